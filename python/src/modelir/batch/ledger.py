"""The output side of a batch run: the record file, what it already holds, and appending to it.

Opening a ledger creates the record file, or (on resume) repairs a torn last entry and reads which keys are
done: a key with a successful record is done, and so is a failed one when failed keys are not to be retried.
Only the process that runs the batch (the driver, with any scheduler) writes, one record per finished call.
"""

from __future__ import annotations

import sys
from pathlib import Path

from modelir.records import RecordWriter
from modelir.v1 import record_pb2

SUCCESS = (record_pb2.RECORD_STATUS_OK, record_pb2.RECORD_STATUS_PARTIAL)


class Ledger:
    def __init__(self, writer: RecordWriter, done: set[str], previous_attempts: dict[str, int]) -> None:
        self.writer = writer
        self.done = done
        # Attempts already spent on a key by earlier runs: a resumed record counts them too.
        self.previous_attempts = previous_attempts

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
        if output.exists() and output.stat().st_size:
            if not resume:
                raise FileExistsError(f"{output} exists: pass --resume to continue it, or choose another output file")
            writer, scanned = RecordWriter.resume(output)
            if scanned.torn_bytes:
                print(f"modelir: repaired a torn last entry in {output} ({scanned.torn_bytes} bytes)", file=sys.stderr)
            for record in scanned.records:
                attempts = max(previous_attempts.get(record.key, 0), record.provenance.attempt_count)
                previous_attempts[record.key] = attempts
                if record.status in SUCCESS or not retry_failed:
                    done.add(record.key)
        else:
            if output.exists():
                output.unlink()  # an empty file left by a crash before the header was written
            writer = RecordWriter.create(output, fmt=fmt, run_metadata=run_metadata)
        return cls(writer, done, previous_attempts)

    def append(self, record: record_pb2.Record) -> None:
        self.writer.append(record)
        if record.status in SUCCESS:
            self.done.add(record.key)

    def close(self) -> None:
        self.writer.close()
