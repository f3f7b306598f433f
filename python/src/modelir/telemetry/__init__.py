"""OpenTelemetry GenAI traces and metrics for modelir calls, trace context across gRPC and HTTP, the access log.

Only `opentelemetry-api` is needed to import this package. With no tracer or meter provider configured every hook
is a no-op costing one global look-up. `modelir serve` installs the SDK and exporters from the `OTEL_*`
environment variables (`modelir.telemetry.setup`, the `otel` extra); a library user configures OpenTelemetry as
usual and modelir's spans and metrics join it.

The hooks, one line or one `with` each, where the rest of modelir calls in:

- `model_call(model, request)` around `Model.arun` / `RemoteModel.arun`, `stream_call(...)` around `astream`,
  `@tokenize_span("tokenize")` on the tokenize and detokenize methods;
- `http_attempt(built_request, attempt)` around each HTTP attempt in the executor;
- `outgoing_metadata(metadata)` on each `RemoteModel` RPC (sends `traceparent`), `read_trailers(call)` after it
  (takes back the provider's request id);
- `server_call(method, model, context)` around each servicer method (continues `traceparent`, writes the access
  log line);
- `capture()` + `fill_provenance(...)` where records are built.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from modelir.telemetry._runtime import CAPTURE_CONTENT_ENV, Seen, install
from modelir.telemetry.access_log import AccessLog
from modelir.telemetry.calls import model_call, stream_call, tokenize_span
from modelir.telemetry.server import server_call
from modelir.telemetry.wire import http_attempt, outgoing_metadata, read_trailers

if TYPE_CHECKING:
    from modelir.v1 import record_pb2

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "AccessLog",
    "Seen",
    "capture",
    "fill_provenance",
    "http_attempt",
    "install",
    "model_call",
    "outgoing_metadata",
    "read_trailers",
    "server_call",
    "stream_call",
    "tokenize_span",
]


@contextmanager
def capture(seen: Seen | None = None) -> Iterator[Seen]:
    """Collect the trace id, span id and provider request id of the model call made inside the block (into
    `seen`, or a new `Seen`)."""
    from modelir.telemetry._runtime import current_capture

    seen = Seen() if seen is None else seen
    token = current_capture.set(seen)
    try:
        yield seen
    finally:
        current_capture.reset(token)


def fill_provenance(provenance: record_pb2.Provenance, seen: Seen) -> None:
    """Copy what `capture()` saw into a `modelir.v1.Provenance` (fields left empty when not seen)."""
    provenance.trace_id = seen.trace_id
    provenance.span_id = seen.span_id
    provenance.provider_request_id = seen.provider_request_id
