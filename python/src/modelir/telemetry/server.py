"""The server side of a call: continue the client's trace context, a `SERVER` span per RPC, the access log line.

A gRPC handler runs in a task of its own, so the RPC's span is current for the whole handler, streaming ones
included: the model call inside becomes its child, and the provider call the model's grandchild. The span is the
tracer's (`start_span`): the sampler decides it, under the caller's context or as a new root.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from modelir.telemetry import _runtime
from modelir.telemetry import access_log as access_log_module
from modelir.telemetry import conventions as sc
from modelir.telemetry.attribute_set import AttributeSet
from modelir.telemetry.served import _measure
from modelir.telemetry.wire import PROVIDER_REQUEST_ID_TRAILER
from modelir.v1 import request_pb2, response_pb2, stream_pb2

SERVICE = "modelir.v1.ModelService"
_GRPC_CODES = {code.name: code.value[0] for code in grpc.StatusCode}
# The global propagator last asked, and the fields it reads: a request whose metadata holds none of them carries no
# context to extract.
_fields_of: list[Any] = [None, frozenset()]


def _extract(grpc_context: Any) -> otel_context.Context | None:
    """The caller's context, as the global propagator reads it from the invocation metadata; None when the metadata
    holds none of the fields the propagator reads (the span is then a new trace's root, as the sampler decides)."""
    metadata = grpc_context.invocation_metadata() if grpc_context is not None else None
    if not metadata:
        return None
    textmap = propagate.get_global_textmap()
    if textmap is not _fields_of[0]:
        _fields_of[:] = [textmap, frozenset(textmap.fields)]
    carrier = {key: value for key, value in metadata if key in _fields_of[1] and isinstance(value, str)}
    return propagate.extract(carrier) if carrier else None


class ServerCall:
    """One RPC: set `transport` and `status` as they become known; `answered` / `observe` take the usage."""

    # No `__slots__`: the defaults are class attributes, set per RPC only when they change.
    transport = "-"
    status = "OK"
    input_tokens: int | None = None
    output_tokens: int | None = None
    span: trace.Span | None = None
    _token: object = None
    _first_output: float | None = None
    _instruments: _runtime.Instruments | None = None

    def __init__(
        self,
        method: str,
        model: str,
        grpc_context: Any,
        request: request_pb2.Request | None = None,
        hooks: _runtime._Resolved | None = None,
    ) -> None:
        """`hooks`: the ones in use (`_runtime.hooks()`)."""
        self.method = method
        self.model = model or "-"
        # A generation RPC's request: those RPCs also record the `gen_ai.server.*` metrics.
        self._request = request
        self.started = time.monotonic()
        self._grpc_context = grpc_context
        # The provider's request id of the model call inside, sent back in the trailing metadata.
        seen = self._seen = _runtime.Seen()
        self._capture_token = _runtime.current_capture.set(seen)
        tracer = hooks.tracer if hooks is not None else None
        if hooks is not None and request is not None:  # resolved once for the RPC: only generation RPCs measure
            self._instruments = hooks.instruments
        recorded = False
        if tracer is not None:
            parent = _extract(grpc_context)
            if _runtime.instrumented(parent):
                name, attributes = _span_starts.get(method) or _span_start(method)
                span = self.span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)
                context = seen.context = trace.set_span_in_context(span, parent)
                self._token = otel_context.attach(context)
                recorded = span.is_recording()
        # A generation RPC whose span is not recorded (no tracer, or a root the sampler left out): its model call
        # may be measured by the lean `ServedCall`.
        if hooks is not None and request is not None and not recorded:
            seen.served, seen.instruments = True, self._instruments

    def __enter__(self) -> ServerCall:
        return self

    def answered(self, result: Any) -> Any:
        """Take the usage of a `Response` result (returns the result, so the hook is one expression)."""
        if isinstance(result, response_pb2.Response):
            seen = self._seen
            if result is seen.answer:  # the answer of its model call, whose usage that call read (`ServedCall`)
                self.input_tokens, self.output_tokens = seen.input_tokens, seen.output_tokens
            else:
                self._usage(result.usage)
            if seen.provider_request_id and self._grpc_context is not None:  # `_send_request_id()`, inline
                self._grpc_context.set_trailing_metadata(((PROVIDER_REQUEST_ID_TRAILER, seen.provider_request_id),))
        return result

    def observe(self, event: stream_pb2.StreamEvent) -> None:
        which = event.WhichOneof("event")
        if which == "delta":
            if self._first_output is None:
                self._first_output = time.monotonic()
        elif which == "end":
            self._usage(event.end.usage)
            self._send_request_id()

    def _send_request_id(self) -> None:
        if self._seen.provider_request_id and self._grpc_context is not None:
            self._grpc_context.set_trailing_metadata(((PROVIDER_REQUEST_ID_TRAILER, self._seen.provider_request_id),))

    def _usage(self, usage: response_pb2.Usage) -> None:
        if usage.HasField("input_token_count"):
            self.input_tokens = usage.input_token_count
        if usage.HasField("output_token_count"):
            self.output_tokens = usage.output_token_count

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """End the RPC's span and write its access-log line, with the `status` and `transport` set by then (what
        leaving the `with` block does, for a caller that keeps its own frame)."""
        latency = time.monotonic() - self.started
        # A streaming handler that its caller abandoned is closed by asyncio's finaliser, in a context of its own:
        # what this call set is not current there, and resetting it would raise (or log, for OpenTelemetry's).
        own_context = _reset(_runtime.current_capture, self._capture_token)
        trace_id = ""
        span = self.span
        if span is not None:
            if own_context:
                otel_context.detach(self._token)  # type: ignore[arg-type]
            span_context = span.get_span_context()
            trace_id = trace.format_trace_id(span_context.trace_id) if span_context.is_valid else ""
            if span.is_recording():
                ending: dict[str, Any] = {sc.RPC_GRPC_STATUS_CODE: _GRPC_CODES.get(self.status, 2)}
                if self.model != "-":
                    ending[sc.REQUEST_MODEL] = self.model
                if self.transport != "-":
                    ending[sc.TRANSPORT] = self.transport
                if self.status != "OK":
                    ending[sc.ERROR_TYPE] = self.status
                    span.set_status(Status(StatusCode.ERROR))
                span.set_attributes(ending)
                span.end()
        if self._request is not None and self._instruments is not None:
            self._record_server_metrics(self._request, latency)
        access_log_module._current.write(  # `access_log()`, without its call
            self.method,
            self.model,
            self.transport,
            self.status,
            latency,
            self.input_tokens,
            self.output_tokens,
            trace_id,
        )

    def _record_server_metrics(self, request: request_pb2.Request, latency: float) -> None:
        """`gen_ai.server.request.duration` for every generation RPC; time to first token and time per output
        token for successful streams (a unary answer arrives whole, so it has neither)."""
        instruments: Any = self._instruments
        # Keyed by the request's input kind, which with the transport decides the operation: one look-up, and
        # `operation_name` only for a new combination.
        key = (request.WhichOneof("input"), self.transport, self.model, self.status)
        entry = _server_metric_sets.get(key) or _server_metric_set(key, request)
        values = entry[2] if entry[1] is instruments else _appended_duration(entry, instruments)
        _measure(instruments.server_request_duration, values, latency, entry[0], None)
        first = self._first_output
        if self.status != "OK" or first is None:
            return
        attributes = entry[0]
        instruments.server_time_to_first_token.record(first - self.started, attributes)
        if self.output_tokens is not None and self.output_tokens > 1:
            after_first = self.started + latency - first
            instruments.server_time_per_output_token.record(after_first / (self.output_tokens - 1), attributes)


_span_starts: dict[str, tuple[str, dict[str, str]]] = {}


def _span_start(method: str) -> tuple[str, dict[str, str]]:
    """The name and start attributes of an RPC's span (made once per method: the tracer copies what it keeps)."""
    start = _span_starts.get(method)
    if start is None:
        start = _span_starts[method] = (
            f"{SERVICE}/{method}",
            {sc.RPC_SYSTEM: "grpc", sc.RPC_SERVICE: SERVICE, sc.RPC_METHOD: method},
        )
    return start


# By (input kind, transport, model, status): `[attribute set, instruments, the list of the instruments' request
# duration histogram for that set or None]` (the list: see `_appended_duration`).
_server_metric_sets: dict[tuple[str | None, str, str, str], list[Any]] = {}


def _server_metric_set(key: tuple[str | None, str, str, str], request: request_pb2.Request) -> list[Any]:
    """The attribute set of a generation RPC's `gen_ai.server.*` metrics for `key` (input kind, transport, model,
    status), made once per combination (shared: nobody may change it), in its `_server_metric_sets` entry."""
    _, transport, model, status = key
    if len(_server_metric_sets) >= 512:  # a bound, for servers whose model names or statuses vary
        _server_metric_sets.clear()
    made: dict[str, Any] = {
        sc.OPERATION_NAME: sc.operation_name(request, transport),  # as the model call's span names it
        sc.PROVIDER_NAME: sc.provider_name(transport) if transport != "-" else sc.REMOTE_PROVIDER,
        sc.REQUEST_MODEL: model,
    }
    if status != "OK":
        made[sc.ERROR_TYPE] = status
    entry = _server_metric_sets[key] = [AttributeSet(made), None, None]
    return entry


def _appended_duration(entry: list[Any], instruments: _runtime.Instruments) -> list[float] | None:
    """The list `instruments.server_request_duration` appends the measurements of `entry`'s set to
    (`meter.AggregatingHistogram.values_of`; None for a histogram of another kind), kept in the entry."""
    values_of = getattr(instruments.server_request_duration, "values_of", None)
    values: list[float] | None = values_of(entry[0]) if values_of is not None else None
    entry[1:] = [instruments, values]
    return values


def _reset(variable: ContextVar[Any], token: Token[Any]) -> bool:
    """Reset `variable` to before `token`; False when `token` belongs to another context (nothing to reset here)."""
    try:
        variable.reset(token)
    except ValueError:
        return False
    return True


def server_call(method: str, model: str, grpc_context: Any, request: request_pb2.Request | None = None) -> ServerCall:
    """Observe one RPC: `with server_call("Generate", name, context) as rpc: ...`; with the `request` of a
    generation RPC, it also records the `gen_ai.server.*` metrics."""
    return ServerCall(method, model, grpc_context, request, _runtime.hooks())
