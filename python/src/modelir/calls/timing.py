"""A call's own clock on its `Timing`: when it started and ended, how long it queued, how many attempts it took and
when its first output came (`Model.arun` and the streamed call stamp it the same way)."""

from __future__ import annotations

import time

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from modelir.v1 import response_pb2


def stamp_timing(
    timing: response_pb2.Timing, started: float, queued: float, attempts: int, first_output: float | None = None
) -> None:
    _set(timing.start_time, started)
    _set(timing.end_time, time.time())
    _set(timing.queue_duration, queued)
    timing.attempt_count = attempts
    if first_output is not None:
        _set(timing.first_output_duration, first_output)


def _set(field: Timestamp | Duration, seconds: float) -> None:
    """A `Timestamp` or non-negative `Duration` field set in place to `seconds`, to the nanosecond (what
    `FromNanoseconds` gives, without building a message to copy in or its Python-level normalising)."""
    whole, nanos = divmod(int(seconds * 1e9), 1_000_000_000)
    field.seconds = whole
    field.nanos = nanos
