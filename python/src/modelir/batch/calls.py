"""One batch call becomes one record: the request, its response or failure, and its provenance.

Every scheduler (the local worker pool, Ray workers, `modelir.batch.ray_data` in a Ray Data pipeline) builds its records
here, so a record says the same thing however it was scheduled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from google.protobuf import timestamp_pb2

from modelir import errors, telemetry
from modelir.interface import ModelInterface
from modelir.v1 import capabilities_pb2, record_pb2, request_pb2
from modelir.version import IR_VERSION, SDK_VERSION
from modelir.writing.builder import with_model


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


def new_record(
    key: str, request: request_pb2.Request, model_name: str, manifest: capabilities_pb2.CapabilityManifest
) -> record_pb2.Record:
    """A record with its request and the provenance known before the call, its start time now."""
    request = request if request.model else with_model(request, model_name)
    record = record_pb2.Record(key=key, request=request)
    provenance = record.provenance
    provenance.ir_version, provenance.sdk_version = IR_VERSION, SDK_VERSION
    provenance.transport, provenance.transport_version = manifest.transport, manifest.transport_version
    provenance.configured_model = request.model
    provenance.start_time.CopyFrom(_now())
    return record


def fail_record(record: record_pb2.Record, exc: errors.ModelError, attempts: int, previous_attempts: int) -> None:
    """Mark `record` failed with `exc`, ending now."""
    record.status = record_pb2.RECORD_STATUS_FAILED
    record.failure.CopyFrom(exc.to_response_error())
    record.provenance.end_time.CopyFrom(_now())
    record.provenance.attempt_count = previous_attempts + attempts


async def call_to_record(
    model: ModelInterface,
    manifest: capabilities_pb2.CapabilityManifest,
    key: str,
    request: request_pb2.Request,
    previous_attempts: int = 0,
) -> record_pb2.Record:
    """Run one request and return its record; any exception becomes a failed record (a `ModelError` as itself,
    anything else as INTERNAL), never the end of the run."""
    record = new_record(key, request, model.name, manifest)
    seen = telemetry.Seen()  # the trace, span and provider request ids of the call, for the provenance
    try:
        with telemetry.capture(seen):
            response = await model.arun(record.request)
    except errors.ModelError as exc:
        fail_record(record, exc, 1, previous_attempts)
        telemetry.fill_provenance(record.provenance, seen)
        return record
    except Exception as exc:  # a bug or an untyped escape: this input's failed record, not the end of the run
        internal = errors.InternalError(f"the call raised {type(exc).__name__}: {exc}")
        fail_record(record, internal, 1, previous_attempts)
        telemetry.fill_provenance(record.provenance, seen)
        return record
    record.response.CopyFrom(response)
    record.status = record_pb2.RECORD_STATUS_PARTIAL if bool(response.errors) else record_pb2.RECORD_STATUS_OK
    record.provenance.provider_model = response.model
    record.provenance.end_time.CopyFrom(_now())
    record.provenance.attempt_count = previous_attempts + (response.timing.attempt_count or 1)
    telemetry.fill_provenance(record.provenance, seen)
    return record


async def call_many(
    model: ModelInterface,
    manifest: capabilities_pb2.CapabilityManifest,
    items: Sequence[tuple[str, request_pb2.Request, int]],
    concurrency: int,
) -> list[record_pb2.Record]:
    """Records for `(key, request, attempts already spent)` items, `concurrency` calls at a time, in item order."""
    slots = asyncio.Semaphore(max(1, concurrency))

    async def one(key: str, request: request_pb2.Request, previous: int) -> record_pb2.Record:
        async with slots:
            return await call_to_record(model, manifest, key, request, previous)

    return list(await asyncio.gather(*(one(*item) for item in items)))
