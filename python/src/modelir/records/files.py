"""Record files: the persisted form of `Record`s, with a header, durable appends and torn-tail repair.

Two formats hold the same entries (`RecordFileEntry`: the header first, then records):

- JSON Lines (the default): one entry a line in proto-JSON, enums written as integers (a reader of an older
  release keeps a newer enum value as its number instead of turning an unknown name into 0); readers accept
  enum names too.
- Binary: each entry as a varint length followed by the serialized entry; smaller and faster.

The header carries the `FileDescriptorSet` of the IR that wrote the file (`ir_descriptor_set`), so a reader of any
later or earlier release can decode fields it does not know (`message_class`). The formats are defined
normatively in `proto/README.md` ("Record files").

The format is recognised from the first byte (`{` is JSON Lines). Appends are flushed to the OS after every record
(so a killed process loses nothing it wrote) and fsynced at a bounded interval and on close (so a crashed machine
loses at most that interval). A crash mid-write leaves at most one torn entry at the end: readers detect, report
and skip it, and a resumed writer truncates it before appending.
"""

from __future__ import annotations

import fcntl
import os
import time
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message

from modelir.records import varint
from modelir.records.descriptors import ir_descriptor_set as ir_descriptor_set
from modelir.records.descriptors import message_class as message_class
from modelir.records.errors import NewerMinorVersionWarning as NewerMinorVersionWarning
from modelir.records.errors import OtherSeriesError as OtherSeriesError
from modelir.records.errors import RecordFileError as RecordFileError
from modelir.v1 import record_pb2
from modelir.version import IR_SEMVER, IR_VERSION, SDK_VERSION, parse_semver

JSONL = "jsonl"
BINARY = "binary"


def format_of(path: str | os.PathLike[str]) -> str:
    """`jsonl` or `binary`, from the file's first byte (or its name when it is empty or missing)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            first = handle.read(1)
    except FileNotFoundError:
        first = b""
    if first:
        return JSONL if first == b"{" else BINARY
    return BINARY if path.suffix in (".binpb", ".pb", ".bin") else JSONL


def encode_entry(entry: Message, fmt: str) -> bytes:
    """One `RecordFileEntry` as the format frames it: a proto-JSON line with integer enums, or varint length +
    serialized bytes. Works for an entry of any descriptor pool (a reader of another release writes the same)."""
    if fmt == JSONL:
        return json_format.MessageToJson(entry, indent=None, use_integers_for_enums=True).encode() + b"\n"
    payload = entry.SerializeToString()
    return varint.encode(len(payload)) + payload


@dataclass(slots=True)
class Scan:
    """What reading a record file found."""

    header: record_pb2.RecordHeader | None
    records: list[record_pb2.Record] = field(default_factory=list)
    good_bytes: int = 0  # the length of the file up to the end of its last complete entry
    torn_bytes: int = 0  # bytes after that: a torn last entry (0 when the file ends cleanly)
    problems: list[str] = field(default_factory=list)


# One step of reading a file: ("header" | "record", the message, its end offset) or ("problem", text, offset).
_Step = tuple[str, Any, int]


def _jsonl_frames(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(end offset, the line; None when it has no newline: the last write never finished)."""
    position = 0
    for line in handle:  # buffered: one line at a time, never the whole file
        position += len(line)
        yield position, line if line.endswith(b"\n") else None


def _binary_frames(handle: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(end offset, the entry's bytes; None when its length prefix or its bytes are cut short)."""
    position = 0
    while prefix := handle.read(1):
        while prefix[-1] & 0x80 and len(prefix) < 10:  # a varint's continuation bit
            more = handle.read(1)
            if not more:
                break
            prefix += more
        try:
            length, _ = varint.decode(prefix, 0)
        except (IndexError, ValueError):
            yield position + len(prefix) + len(handle.read()), None
            return
        payload = handle.read(length)
        position += len(prefix) + len(payload)
        yield position, payload if len(payload) == length else None


def _decode(frame: bytes, fmt: str) -> record_pb2.RecordFileEntry | None:
    try:
        if fmt == JSONL:
            return json_format.ParseDict(orjson.loads(frame), record_pb2.RecordFileEntry(), ignore_unknown_fields=True)
        return record_pb2.RecordFileEntry.FromString(frame)
    except (orjson.JSONDecodeError, json_format.ParseError, DecodeError):
        return None


def _walk(handle: BinaryIO, fmt: str, path: str | os.PathLike[str]) -> Iterator[_Step]:
    """The entries of a file as they are read. The first must be the header; an entry that cannot be read is
    skipped with a problem, and when it is the last one, it is the torn tail (`("torn", good_bytes, end)`)."""
    frames = _jsonl_frames(handle) if fmt == JSONL else _binary_frames(handle)
    good_bytes = 0
    ahead = next(frames, None)
    index = 0
    while ahead is not None:
        (end, frame), ahead = ahead, next(frames, None)
        entry = None if frame is None else _decode(frame, fmt)
        if index == 0 and (entry is None or entry.WhichOneof("entry") != "header"):
            raise RecordFileError(f"{path}: not a modelir record file (no header entry first)")
        if entry is None and ahead is None:
            yield "torn", good_bytes, end
            return
        if entry is None:
            yield "problem", f"entry {index} (ending at byte {end}) cannot be parsed; skipped", end
        elif entry.WhichOneof("entry") == "header":
            yield (
                ("header", entry.header, end)
                if index == 0
                else ("problem", f"entry {index} is a second header; ignored", end)
            )
        else:
            yield "record", entry.record, end
        good_bytes = end
        index += 1


def _torn(good_bytes: int, end: int) -> str:
    return f"torn last entry ({end - good_bytes} bytes) at byte {good_bytes}"


def scan(path: str | os.PathLike[str]) -> Scan:
    """Read every complete entry; report a torn tail and any unreadable entry instead of failing."""
    result = Scan(header=None)
    with Path(path).open("rb") as handle:
        for kind, value, end in _walk(handle, format_of(path), path):
            if kind == "torn":
                result.torn_bytes = end - value
                result.problems.append(_torn(value, end))
                break
            if kind == "header":
                result.header = value
            elif kind == "record":
                result.records.append(value)
            else:
                result.problems.append(value)
            result.good_bytes = end
    return result


def check_readable(header: record_pb2.RecordHeader, path: str | os.PathLike[str]) -> None:
    """Refuse another major version; warn (but read) a newer minor version."""
    theirs = parse_semver(header.ir_version)
    if theirs.major != IR_SEMVER.major:
        raise RecordFileError(
            f"{path} was written with IR {header.ir_version}; this SDK reads IR {IR_SEMVER.major}.x only"
        )
    if theirs.minor > IR_SEMVER.minor:
        warnings.warn(
            f"{path} was written with IR {header.ir_version}, newer than this SDK's {IR_VERSION}: fields this "
            "SDK does not know are not shown. Upgrade modelir to see them.",
            NewerMinorVersionWarning,
            stacklevel=3,
        )


def check_resumable(header: record_pb2.RecordHeader, path: str | os.PathLike[str]) -> None:
    """Resuming needs the same IR major version. Any minor is resumable, because minors are additive: an older
    file is upgraded first (`RecordWriter.resume`), and this SDK's records are valid records of a newer minor, whose
    header already describes every field they can hold."""
    theirs = parse_semver(header.ir_version)
    if theirs.major != IR_SEMVER.major:
        raise OtherSeriesError(
            f"cannot resume into {path}: it holds records of IR {header.ir_version} (major {theirs.major}), "
            f"and this SDK writes IR {IR_VERSION} (major {IR_SEMVER.major}). Mixing major versions in one file would "
            "make it unreadable as one dataset. Write to a new output file, or resume with an SDK of IR "
            f"{theirs.major}.x."
        )


def _upgrade(path: Path, scanned: Scan, header_bytes: int) -> BinaryIO:
    """Give an older minor's file this SDK's header, so that the header's descriptor set keeps describing every
    entry once this SDK appends records with fields the older IR lacks. The records are copied byte for byte: an
    older minor's record is a valid record of this one (minors are additive). The old version stays readable in
    the header's `run_metadata` (`UPGRADED_FROM_KEY`). The copy replaces the file atomically (temporary file,
    fsync, rename), so a crash leaves either the old file or the new one, never a mixture. Returns the new file,
    open for appending and exclusively locked (`flock`) from before it appeared at `path`, so that a batch run's
    lock, taken on the old file, never leaves the new one unguarded."""
    assert scanned.header is not None
    header = record_pb2.RecordHeader()
    header.CopyFrom(scanned.header)
    if UPGRADED_FROM_KEY not in header.run_metadata:  # upgraded twice: the first version stays
        header.run_metadata[UPGRADED_FROM_KEY] = scanned.header.ir_version
    header.ir_version, header.sdk_version = IR_VERSION, SDK_VERSION
    header.ir_descriptor_set = ir_descriptor_set()
    fmt = format_of(path)
    temporary = path.with_name(f".{path.name}.upgrade")
    target = temporary.open("w+b")
    fcntl.flock(target.fileno(), fcntl.LOCK_EX)
    with path.open("rb") as source:
        target.write(encode_entry(record_pb2.RecordFileEntry(header=header), fmt))
        source.seek(header_bytes)
        remaining = scanned.good_bytes - header_bytes  # the torn tail, if any, is left behind
        while remaining > 0:
            chunk = source.read(min(remaining, 1 << 20))
            if not chunk:
                break
            target.write(chunk)
            remaining -= len(chunk)
    target.flush()
    os.fsync(target.fileno())
    os.replace(temporary, path)
    return target


# The `run_metadata` key an upgraded file's header keeps the IR version it was first written with under.
UPGRADED_FROM_KEY = "modelir.upgraded_from_ir_version"


def read_records(path: str | os.PathLike[str]) -> Iterator[record_pb2.Record]:
    """The records of a file, each as it is read (the first before the rest of the file is): the header is checked
    first; an unreadable entry is skipped and a torn tail ignored, each with a warning, as `scan` reports them."""
    with Path(path).open("rb") as handle:
        for kind, value, end in _walk(handle, format_of(path), path):
            if kind == "record":
                yield value
            elif kind == "header":
                check_readable(value, path)
            else:
                warnings.warn(f"{path}: {_torn(value, end) if kind == 'torn' else value}", stacklevel=2)


def header_end(path: str | os.PathLike[str]) -> int:
    """The byte offset where the file's header entry ends (0 for an empty file)."""
    path = Path(path)
    with path.open("rb") as handle:
        for _kind, _value, end in _walk(handle, format_of(path), path):
            return end
    return 0


def read_header(path: str | os.PathLike[str]) -> record_pb2.RecordHeader | None:
    """The file's header, read without reading its records (None for an empty file)."""
    with Path(path).open("rb") as handle:
        for kind, value, _ in _walk(handle, format_of(path), path):
            return value if kind == "header" else None
    return None


class RecordWriter:
    """Appends records durably. Use `RecordWriter.create` for a new file, `RecordWriter.resume` to append."""

    def __init__(self, handle: BinaryIO, fmt: str, path: Path, fsync_interval: float) -> None:
        self._handle = handle
        self.format = fmt
        self.path = path
        self._fsync_interval = fsync_interval
        self._last_sync = time.monotonic()
        self.records_written = 0  # records in the file, also those before a resume: the next record's position

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        fmt: str | None = None,
        run_metadata: Mapping[str, str] | None = None,
        fsync_interval: float = 1.0,
    ) -> RecordWriter:
        path = Path(path)
        fmt = fmt or format_of(path)
        handle = path.open("xb")  # never overwrite an existing file
        header = record_pb2.RecordHeader(
            ir_version=IR_VERSION, sdk_version=SDK_VERSION, ir_descriptor_set=ir_descriptor_set()
        )
        header.create_time.GetCurrentTime()
        header.run_metadata.update(run_metadata or {})
        writer = cls(handle, fmt, path, fsync_interval)
        writer._write(record_pb2.RecordFileEntry(header=header), sync=True)
        return writer

    @classmethod
    def resume(cls, path: str | os.PathLike[str], *, fsync_interval: float = 1.0) -> tuple[RecordWriter, Scan]:
        """Open an existing file for appending, after the version gate (`check_resumable`; a file of an older minor
        is upgraded to this SDK's header first) and after truncating a torn tail."""
        path = Path(path)
        result = scan(path)
        if result.header is None:
            raise RecordFileError(f"{path} is empty: nothing to resume")
        check_resumable(result.header, path)
        if parse_semver(result.header.ir_version).minor < IR_SEMVER.minor:
            handle = _upgrade(path, result, header_end(path))
            result = scan(path)
        else:
            handle = path.open("r+b")
        if result.torn_bytes:
            handle.truncate(result.good_bytes)
        handle.seek(result.good_bytes)
        writer = cls(handle, format_of(path), path, fsync_interval)
        writer.records_written = len(result.records)
        return writer, result

    def _write(self, entry: record_pb2.RecordFileEntry, *, sync: bool = False) -> None:
        self._handle.write(encode_entry(entry, self.format))
        self._handle.flush()
        if sync or time.monotonic() - self._last_sync >= self._fsync_interval:
            os.fsync(self._handle.fileno())
            self._last_sync = time.monotonic()

    def append(self, record: record_pb2.Record) -> None:
        """Append `record`. A record without a key gets its position in the file, `#<n>` (from 0), as the spec's
        key rule says for a request given without one (its input is the sequence of records appended)."""
        if not record.key:
            record = _with_key(record, f"#{self.records_written}")
        self._write(record_pb2.RecordFileEntry(record=record))
        self.records_written += 1

    def close(self) -> None:
        if not self._handle.closed:
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _with_key(record: record_pb2.Record, key: str) -> record_pb2.Record:
    keyed = record_pb2.Record()
    keyed.CopyFrom(record)
    keyed.key = key
    return keyed
