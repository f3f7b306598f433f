"""Records from the SDK: a `Record` with full provenance from a request and what came of it.

`record_of(model, request, response)` builds one from a response you already have; `arecorded(model, request)`
runs the request and records the outcome, failures included (a failed call is a `FAILED` record carrying its
error, a soft error a `PARTIAL` one). Provenance is filled the way batch runs fill it: IR and SDK versions, the
transport and its version from the model's manifest, the configured and the provider model, the call's start and
end times and its attempt count. The key is opaque: the caller's, or (when none is given) the record's position in
the file it is appended to, as the spec's record-key rule says.
"""

from __future__ import annotations

import time

from google.protobuf import timestamp_pb2

from modelir import errors
from modelir.interface import ModelInterface, with_model
from modelir.sync import run_sync as _sync
from modelir.v1 import capabilities_pb2, record_pb2, request_pb2, response_pb2
from modelir.version import IR_VERSION, SDK_VERSION


def _stamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def record_of(
    model: ModelInterface | capabilities_pb2.CapabilityManifest,
    request: request_pb2.Request,
    response: response_pb2.Response | None = None,
    *,
    failure: errors.ModelError | None = None,
    key: str | None = None,
) -> record_pb2.Record:
    """A record of `request` and its `response` (or its `failure`), with provenance.

    `model` is the model that ran it (or its manifest, with `request.model` naming it). `key` is the caller's
    opaque record key; without one the record's key stays empty and `RecordWriter.append` gives it its position in
    the file (`#<n>`), the spec's rule for a request given without a key. Times and attempts come
    from `response.timing`; for a failure, the end time is now.
    """
    if (response is None) == (failure is None):
        raise ValueError("record_of needs exactly one of response= or failure=")
    if isinstance(model, capabilities_pb2.CapabilityManifest):
        manifest, name = model, request.model
    else:
        manifest, name = model.capabilities, model.name
    if not request.model:
        request = with_model(request, name)
    record = record_pb2.Record(key=key or "", request=request)
    p = record.provenance
    p.ir_version, p.sdk_version = IR_VERSION, SDK_VERSION
    p.transport, p.transport_version = manifest.transport, manifest.transport_version
    p.configured_model = request.model
    if response is not None:
        record.response.CopyFrom(response)
        partial = bool(response.errors)
        record.status = record_pb2.RECORD_STATUS_PARTIAL if partial else record_pb2.RECORD_STATUS_OK
        p.provider_model = response.model
        p.start_time.CopyFrom(response.timing.start_time)
        p.end_time.CopyFrom(response.timing.end_time)
        p.attempt_count = response.timing.attempt_count or 1
    else:
        assert failure is not None
        record.status = record_pb2.RECORD_STATUS_FAILED
        record.failure.CopyFrom(failure.to_response_error())
        p.end_time.CopyFrom(_stamp(time.time()))
        p.attempt_count = 1
    return record


async def arecorded(
    model: ModelInterface, request: request_pb2.Request, *, key: str | None = None
) -> record_pb2.Record:
    """Run `request` on `model` and record the outcome; a `ModelError` becomes a `FAILED` record, not a raise."""
    named = request if request.model else with_model(request, model.name)
    manifest = await model.acapabilities()
    started = time.time()
    try:
        response = await model.arun(named)
    except errors.ModelError as exc:
        record = record_of(manifest, named, failure=exc, key=key)
        record.provenance.start_time.CopyFrom(_stamp(started))
        return record
    return record_of(manifest, named, response, key=key)


def recorded(model: ModelInterface, request: request_pb2.Request, *, key: str | None = None) -> record_pb2.Record:
    return _sync(arecorded(model, request, key=key))
