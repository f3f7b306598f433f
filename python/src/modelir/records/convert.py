"""`modelir records convert`: a record file copied into the other format, keeping every field its writer wrote."""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.message import Message

from modelir.records.descriptors import message_class
from modelir.records.errors import RecordFileError
from modelir.records.files import JSONL, _binary_frames, _decode, _jsonl_frames, check_readable, encode_entry, format_of
from modelir.v1 import record_pb2


def convert(source: str | os.PathLike[str], target: str | os.PathLike[str], fmt: str) -> int:
    """Copy a record file into `fmt`, header included, keeping every field its writer wrote. Returns the number of
    records.

    Entries are decoded with the types of the file's own header (`message_class`), not this SDK's: a field added by
    a newer release survives the trip through either format, and the copy keeps the writer's header (its IR version
    and descriptor set), so it never claims a version whose fields it lost. Unreadable entries are skipped and a torn
    tail is left out, as every reader does."""
    source_format = format_of(source)
    entry_class: type[Message] | None = None
    count = 0
    with Path(source).open("rb") as reading, Path(target).open("xb") as handle:
        frames = _jsonl_frames(reading) if source_format == JSONL else _binary_frames(reading)
        for index, (_end, raw) in enumerate(frames):
            entry = None if raw is None else _decode(raw, source_format)
            if raw is None or entry is None:
                continue
            if entry_class is None:
                if index != 0 or entry.WhichOneof("entry") != "header":
                    raise RecordFileError(f"{source} has no header")
                check_readable(entry.header, source)
                entry_class = (
                    message_class(entry.header, "modelir.v1.RecordFileEntry")
                    if entry.header.ir_descriptor_set
                    else record_pb2.RecordFileEntry  # written before headers carried their types: ours are theirs
                )
            elif entry.WhichOneof("entry") == "header":
                continue  # a second header is ignored, as `scan` ignores it
            full = json_format.Parse(raw, entry_class()) if source_format == JSONL else entry_class.FromString(raw)
            handle.write(encode_entry(full, fmt))
            count += entry.WhichOneof("entry") == "record"
        if entry_class is None:
            raise RecordFileError(f"{source} has no header")
        handle.flush()
        os.fsync(handle.fileno())
    return count
