"""Batch runs: many requests through one model into a record file, resumable after a crash.

Input is JSON Lines: each line an IR `Request` in proto-JSON, or `{"key": ..., "request": {...}}`. A line without
a key gets a stable one: the first 24 hex digits of the SHA-256 of the request's deterministic binary
serialization. Every call becomes one record (failures too, with their error). Resuming skips keys that already
have a successful record, retries failed ones (unless told not to), and appends; the newest record of a key wins.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import orjson
from google.protobuf import json_format, timestamp_pb2

from modelir import errors, telemetry
from modelir.interface import ModelInterface, with_model
from modelir.records import RecordWriter
from modelir.v1 import record_pb2, request_pb2
from modelir.version import IR_VERSION, SDK_VERSION

SUCCESS = (record_pb2.RECORD_STATUS_OK, record_pb2.RECORD_STATUS_PARTIAL)


class BatchInputError(ValueError):
    """An input file problem, naming the line."""


def request_key(request: request_pb2.Request) -> str:
    return hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()[:24]


def read_inputs(path: str | Path) -> list[tuple[str, request_pb2.Request]]:
    inputs: list[tuple[str, request_pb2.Request]] = []
    seen: dict[str, int] = {}
    with Path(path).open("rb") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
                if isinstance(data, dict) and "request" in data:
                    request = json_format.ParseDict(data["request"], request_pb2.Request())
                    key = str(data.get("key") or request_key(request))
                else:
                    request = json_format.ParseDict(data, request_pb2.Request())
                    key = request_key(request)
            except (orjson.JSONDecodeError, json_format.ParseError) as exc:
                raise BatchInputError(f"{path}:{number}: not an IR request in proto-JSON: {exc}") from None
            if key in seen:
                raise BatchInputError(f"{path}:{number}: the key {key!r} was already used on line {seen[key]}")
            seen[key] = number
            inputs.append((key, request))
    return inputs


class Progress:
    """done / failed / rate / ETA: one redrawn line on a terminal, a plain line every `every` seconds otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, every: float = 5.0) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self.done = self.failed = 0
        self.started = self._last = time.monotonic()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (self.done + self.failed) / elapsed
        left = self.total - self.done - self.failed
        eta = f"{left / rate:,.0f}s" if rate > 0 else "?"
        return f"done {self.done}/{self.total}  failed {self.failed}  {rate:,.1f}/s  ETA {eta}"

    def update(self, *, ok: bool) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
        now = time.monotonic()
        if self.tty and now - self._last >= 0.1:
            self.stream.write("\r" + self.line())
            self.stream.flush()
            self._last = now
        elif not self.tty and now - self._last >= self.every:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last = now

    def finish(self) -> None:
        self.stream.write(("\r" if self.tty else "") + self.line() + "\n")
        self.stream.flush()


@dataclass(slots=True)
class Summary:
    total: int
    skipped: int
    ok: int
    failed: int


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


async def run_batch(
    model: ModelInterface,
    inputs: Iterable[tuple[str, request_pb2.Request]],
    output: str | Path,
    *,
    concurrency: int = 8,
    resume: bool = False,
    retry_failed: bool = True,
    fmt: str | None = None,
    progress_stream: TextIO | None = None,
    run_metadata: dict[str, str] | None = None,
) -> Summary:
    inputs = list(inputs)
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
            previous_attempts[record.key] = max(previous_attempts.get(record.key, 0), record.provenance.attempt_count)
            if record.status in SUCCESS:
                done.add(record.key)
            elif not retry_failed:
                done.add(record.key)
    else:
        if output.exists():
            output.unlink()  # an empty file left by a crash before the header was written
        writer = RecordWriter.create(output, fmt=fmt, run_metadata=run_metadata)
    manifest = await model.acapabilities()
    todo = [(key, request) for key, request in inputs if key not in done]
    progress = Progress(len(todo), progress_stream)
    queue: asyncio.Queue[tuple[str, request_pb2.Request]] = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)
    counts = {"ok": 0, "failed": 0}

    async def worker() -> None:
        while True:
            try:
                key, request = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            request = request if request.model else with_model(request, model.name)
            record = record_pb2.Record(key=key, request=request)
            provenance = record.provenance
            provenance.ir_version, provenance.sdk_version = IR_VERSION, SDK_VERSION
            provenance.transport, provenance.transport_version = manifest.transport, manifest.transport_version
            provenance.configured_model = request.model
            provenance.start_time.CopyFrom(_now())
            attempts = 1
            seen = telemetry.Seen()
            try:
                with telemetry.capture(seen):
                    response = await model.arun(request)
            except errors.ModelError as exc:
                record.status = record_pb2.RECORD_STATUS_FAILED
                record.failure.CopyFrom(exc.to_response_error())
            else:
                record.response.CopyFrom(response)
                record.status = (
                    record_pb2.RECORD_STATUS_PARTIAL if response.HasField("error") else record_pb2.RECORD_STATUS_OK
                )
                provenance.provider_model = response.model
                attempts = response.timing.attempt_count or 1
            provenance.end_time.CopyFrom(_now())
            telemetry.fill_provenance(provenance, seen)
            provenance.attempt_count = previous_attempts.get(key, 0) + attempts
            writer.append(record)
            ok = record.status in SUCCESS
            counts["ok" if ok else "failed"] += 1
            progress.update(ok=ok)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, concurrency))))
    finally:
        writer.close()
        progress.finish()
    return Summary(total=len(inputs), skipped=len(inputs) - len(todo), ok=counts["ok"], failed=counts["failed"])
