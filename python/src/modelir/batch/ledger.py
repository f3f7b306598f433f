"""The output side of a batch run: the record file, what it already holds, and appending to it.

Opening a ledger creates the record file, or (on resume) repairs a torn last entry and reads which keys are
done: a key with a successful record is done, and so is a failed one when failed keys are not to be retried.
Only the process that runs the batch (the driver, with any scheduler) writes, one record per finished call, and
it holds an exclusive lock on the file while it does: a second run on the same file (two `--resume`s) is refused
with `RecordFileLockedError`, not interleaved. A new file is written whole with its header under a temporary name
and linked into place, so a crash during creation never leaves a torn header behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from modelir.records.files import OtherSeriesError, RecordFileError, RecordWriter, format_of
from modelir.v1 import record_pb2, request_pb2
from modelir.writing.builder import with_model

SUCCESS = (record_pb2.RECORD_STATUS_OK, record_pb2.RECORD_STATUS_PARTIAL)


class RecordFileLockedError(RecordFileError):
    """Another run is writing the record file."""


def _lock(path: Path) -> int:
    """An exclusive lock on the file (released when the descriptor closes, also when the process dies)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RecordFileLockedError(
            f"{path} is being written by another run (it holds the file's lock); wait for it to finish, or write "
            "to another output file"
        ) from None
    return fd


class ChangedInputError(RecordFileError):
    """A resume whose input holds, at a recorded key, another request than the one recorded."""


class Ledger:
    def __init__(
        self,
        writer: RecordWriter,
        done: set[str],
        previous_attempts: dict[str, int],
        lock_fd: int = -1,
        recorded: dict[str, record_pb2.Record] | None = None,
    ) -> None:
        self.writer = writer
        self._lock_fd = lock_fd
        self.done = done
        # Attempts already spent on a key by earlier runs: a resumed record counts them too.
        self.previous_attempts = previous_attempts
        # The newest record of each key already in the file, to check a resumed input against.
        self.recorded = recorded or {}

    def check_inputs(self, inputs: Iterable[tuple[str, request_pb2.Request]], model_name: str) -> None:
        """Refuse a resume whose input changed: the request at a recorded key must be the one recorded (with the
        model name filled in the way a record fills it). Keys are opaque, so a changed file would otherwise mix
        the answers to two inputs under one key."""
        for key, request in inputs:
            record = self.recorded.get(key)
            if record is None:
                continue
            expected = request if request.model else with_model(request, model_name)
            if record.request != expected:
                raise ChangedInputError(
                    f"cannot resume into {self.writer.path}: the input's request at key {key!r} is not the request "
                    "recorded under that key (or it ran on another model). The input changed since the records "
                    "were written (keys given without one are input positions, so inserting or removing a line "
                    "moves them); resume with the original input, or write to a new output file"
                )

    @classmethod
    def open(
        cls,
        output: str | Path,
        *,
        resume: bool = False,
        retry_failed: bool = True,
        fmt: str | None = None,
        run_metadata: dict[str, str] | None = None,
    ) -> Ledger:
        output = Path(output)
        previous_attempts: dict[str, int] = {}
        done: set[str] = set()
        recorded: dict[str, record_pb2.Record] = {}
        if output.exists() and output.stat().st_size:
            if not resume:
                raise FileExistsError(f"{output} exists: pass --resume to continue it, or choose another output file")
            lock_fd = _lock(output)
            try:
                writer, scanned = RecordWriter.resume(output)
            except OtherSeriesError:
                os.close(lock_fd)
                raise  # the file holds records of another IR series: its message says what to do, never to delete it
            except RecordFileError as exc:
                os.close(lock_fd)
                raise RecordFileError(
                    f"{exc}. If a crash interrupted the run that created it before its header was complete, it holds "
                    "no records: delete it and run again without --resume"
                ) from None
            if scanned.torn_bytes:
                print(f"modelir: repaired a torn last entry in {output} ({scanned.torn_bytes} bytes)", file=sys.stderr)
            for record in scanned.records:
                recorded[record.key] = record
                attempts = max(previous_attempts.get(record.key, 0), record.provenance.attempt_count)
                previous_attempts[record.key] = attempts
                if record.status in SUCCESS or not retry_failed:
                    done.add(record.key)
        else:
            if output.exists():
                output.unlink()  # an empty file left by a crash before the header was written
            writer, lock_fd = _create(output, fmt, run_metadata)
        return cls(writer, done, previous_attempts, lock_fd, recorded)

    def append(self, record: record_pb2.Record) -> None:
        self.writer.append(record)
        if record.status in SUCCESS:
            self.done.add(record.key)

    def close(self) -> None:
        self.writer.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _create(output: Path, fmt: str | None, run_metadata: dict[str, str] | None) -> tuple[RecordWriter, int]:
    """Create the file with its header under a temporary name, lock it, then link it into place (never over an
    existing file): the file appears with a complete header or not at all."""
    temporary = output.with_name(f".{output.name}.{os.getpid()}.creating")
    fmt = fmt or format_of(output)  # from the real name: the temporary one says nothing of the format
    writer = RecordWriter.create(temporary, fmt=fmt, run_metadata=run_metadata)
    try:
        lock_fd = _lock(temporary)
        try:
            os.link(temporary, output)
        except FileExistsError:
            os.close(lock_fd)
            writer.close()
            raise FileExistsError(
                f"{output} was created by another run meanwhile; choose another output file"
            ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    writer.path = output
    return writer, lock_fd
