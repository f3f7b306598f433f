"""The server side of a call: continue the client's W3C trace context, a `SERVER` span per RPC, the access log line.

A gRPC handler runs in a task of its own, so the RPC's span is current for the whole handler, streaming ones
included: the model call inside becomes its child, and the provider call the model's grandchild.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from operator import itemgetter
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation import _SPAN_KEY

from modelir.telemetry import _context, _runtime
from modelir.telemetry import access_log as access_log_module
from modelir.telemetry import conventions as sc
from modelir.telemetry.attribute_set import FOLD_AT, AttributeSet
from modelir.telemetry.wire import PROVIDER_REQUEST_ID_TRAILER, root_traceparent, w3c_traceparent
from modelir.v1 import request_pb2, response_pb2, stream_pb2

SERVICE = "modelir.v1.ModelService"
_TRACE_KEYS = frozenset(("traceparent", "tracestate", "baggage"))
_GRPC_CODES = {code.name: code.value[0] for code in grpc.StatusCode}
_first = itemgetter(0)  # a metadata entry's key


class ServerCall:
    """One RPC: set `transport` and `status` as they become known; `answered` / `observe` take the usage."""

    # No `__slots__`: the defaults are class attributes, so `ServedRpc` sets only what it knows.
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
        root: trace.Span | None = None,
    ) -> None:
        """`hooks`: the ones in use (`_runtime.hooks()`); `root`: the RPC's span, when `server_call` started it as a
        new trace's root."""
        self.method = method
        self.model = model or "-"
        # A generation RPC's request: those RPCs also record the `gen_ai.server.*` metrics.
        self._request = request
        self.started = time.monotonic()
        self._grpc_context = grpc_context
        # The provider's request id of the model call inside, sent back in the trailing metadata.
        self._seen = _runtime.Seen()
        self._capture_token = _runtime.current_capture.set(self._seen)
        tracer = hooks.tracer if hooks is not None else None
        if hooks is not None and request is not None:  # resolved once for the RPC: only generation RPCs measure
            self._instruments = hooks.instruments
        if tracer is not None:
            parent = None  # a new trace, decided by the sampler
            if root is not None:
                span = self.span = root
            else:
                metadata = dict(grpc_context.invocation_metadata() or ()) if grpc_context is not None else {}
                if not _TRACE_KEYS.isdisjoint(metadata):  # (in C: no Python step per metadata entry)
                    carrier = {k: v for k, v in metadata.items() if k in _TRACE_KEYS and isinstance(v, str)}
                    parent = propagate.extract(carrier) if carrier else None
                name, attributes = _span_start(method)
                span = self.span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)
            context = _context.with_span(span, parent)
            self._token = _context.attach(context)
            if parent is None and type(span) is NonRecordingSpan and not context.get(_context.BAGGAGE_KEY):
                # A root the sampler left out (most RPCs, at a low ratio), with no baggage to send: its model call and
                # HTTP attempts make no span and propagate this context; its header is rendered once here, for them
                # and the access log.
                self._seen.unsampled_context = context
                self._seen.traceparent = w3c_traceparent(span.get_span_context())
        # A generation RPC with no span of its own (no tracer, or a root left out as above): its model call makes
        # none either, so it is measured by the lean `ServedCall`.
        if hooks is not None and request is not None and (tracer is None or self._seen.unsampled_context is not None):
            self._seen.served, self._seen.instruments = True, self._instruments

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

    def __exit__(self, exc_type, exc, tb) -> None:
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
                _context.detach(self._token)  # type: ignore[arg-type]
            traceparent = self._seen.traceparent
            trace_id = traceparent[3:35] if traceparent else _context.trace_id_hex(span.get_span_context())
            if type(span) is not NonRecordingSpan:  # a span the sampler left out has nothing to record or end
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
        if self._request is not None:
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
        instruments = self._instruments
        if instruments is None:
            return
        # Keyed by the request's input kind, which with the transport decides the operation: one look-up, and
        # `operation_name` only for a new combination.
        key = (request.WhichOneof("input"), self.transport, self.model, self.status)
        attributes = (_server_metric_sets.get(key) or _server_metric_set(key, request))[0]
        instruments.server_request_duration.record(latency, attributes)
        if self.status != "OK":
            return
        first = self._first_output
        if first is None:
            return
        instruments.server_time_to_first_token.record(first - self.started, attributes)
        if self.output_tokens is not None and self.output_tokens > 1:
            after_first = self.started + latency - first
            instruments.server_time_per_output_token.record(after_first / (self.output_tokens - 1), attributes)


class ServedRpc(ServerCall):
    """A generation RPC that makes no span: no tracer, or a new trace's root that the sampler left out (nine RPCs in
    ten at the default ratio). It does what a `ServerCall` does for such an RPC (the same context attached, header
    rendered, measurements and log line), in fewer steps: `server_call` already knows there is no parent to extract
    and no baggage or other context to carry, so the RPC's context is its span alone.

    Why: nine gateway requests in ten take this path. With the lean model call and attempts it serves
    (`calls.ServedCall`), a left-out root made from its drawn bits (`_context.LeftOutRoot`) and measurements
    appended to the histograms' lists, such a request's telemetry fell from ~68 k instructions to ~51 k
    (`bench/instructions.py`; `bench/README.md`). `tests/test_telemetry.py` holds it to the general path's output."""

    def __init__(
        self,
        method: str,
        model: str,
        grpc_context: Any,
        request: request_pb2.Request,
        instruments: _runtime.Instruments | None,
        span: _context.LeftOutRoot | NonRecordingSpan | None,
    ) -> None:
        """`span`: the root the sampler left out, or None when there is no tracer."""
        self.method = method
        self.model = model or "-"
        self._request = request
        self.started = time.monotonic()
        self._grpc_context = grpc_context
        self._instruments = instruments
        seen = self._seen = _runtime.Seen()
        seen.served, seen.instruments = True, instruments  # its model call is a `ServedCall`
        self._capture_token = _runtime.current_capture.set(seen)
        if span is not None:
            self.span = span
            # `with_span(span)` of the empty current context; no baggage, so the header is the span's alone.
            context = seen.unsampled_context = Context({_SPAN_KEY: span})
            self._token = _context.attach(context)
            if type(span) is _context.LeftOutRoot:
                seen.traceparent = root_traceparent(span)
            else:  # made the general way (a zero drawn, one draw in 2**64)
                seen.traceparent = w3c_traceparent(span.get_span_context())

    def close(self) -> None:
        """`ServerCall.close` for an RPC whose span, if any, is never recorded: nothing to end, and its context
        reset directly once the capture's reset shows this is the context it was attached in."""
        latency = time.monotonic() - self.started
        try:
            _runtime.current_capture.reset(self._capture_token)
        except ValueError:  # closed in another context (see `ServerCall.close`): nothing of it to reset there
            pass
        else:
            if self._token is not None:
                _context.detach_own(self._token)  # type: ignore[arg-type]
        trace_id = ""
        if self.span is not None:
            traceparent = self._seen.traceparent
            trace_id = traceparent[3:35] if traceparent else _context.trace_id_hex(self.span._context)  # type: ignore[attr-defined]
        instruments = self._instruments
        if instruments is not None and self._first_output is None:
            # `_record_server_metrics` for an answer with no first output to time (a unary one): the duration
            # alone, appended to the histogram's list (one Python call fewer, twice over).
            request: request_pb2.Request = self._request  # type: ignore[assignment]  # a generation RPC's
            key = (request.WhichOneof("input"), self.transport, self.model, self.status)
            entry = _server_metric_sets.get(key) or _server_metric_set(key, request)
            values = entry[2] if entry[1] is instruments else _appended_duration(entry, instruments)
            if values is None:
                instruments.server_request_duration.record(latency, entry[0])
            else:
                values.append(latency)
                if len(values) >= FOLD_AT:
                    instruments.server_request_duration.fold(values, entry[0])
        elif instruments is not None:
            self._record_server_metrics(self._request, latency)  # type: ignore[arg-type]
        access_log_module._current.write(
            self.method,
            self.model,
            self.transport,
            self.status,
            latency,
            self.input_tokens,
            self.output_tokens,
            trace_id,
        )


class KeptRpc(ServerCall):
    """A generation RPC whose root the sampler kept, started as a new trace's root (`server_call`: an empty context,
    no trace context in the metadata): what a `ServerCall` does for it, in fewer steps. Its context is its span
    alone, its first model call's span is made directly as its child (`calls.model_call`, through `Seen.kept`),
    and it ends its span with the attributes written into the lean span's own record.

    Why: one RPC in ten keeps its trace at the default ratio, and a kept trace cost a gateway request ~315 k
    instructions over telemetry off, a third of what 10% of traces cost. With `calls.KeptCall` and
    `LeanTracer.start_child` it costs ~265 k (`bench/instructions.py`; `bench/README.md`).
    `tests/test_telemetry.py` holds its spans, measurements, log lines and headers to the general path's.

    Its first lines and its close's repeat `ServedRpc`'s rather than share helpers: the served path, nine RPCs in
    ten, would pay a Python call for each (~1 k instructions a request)."""

    def __init__(
        self, method: str, model: str, grpc_context: Any, request: request_pb2.Request, instruments: Any, root: Any
    ) -> None:
        """`root`: the kept root span (a `tracer.LeanSpan`, never remote, with a valid span context)."""
        self.method = method
        self.model = model or "-"
        self._request = request
        self.started = time.monotonic()
        self._grpc_context = grpc_context
        self._instruments = instruments
        seen = self._seen = _runtime.Seen()
        seen.kept = self  # (a cycle until its model call or `close` takes it back)
        self._capture_token = _runtime.current_capture.set(seen)
        self.span = root
        # `with_span(root)` of the empty current context, and the trace id as `trace_id_hex` writes it (drawn in range).
        context = self.context = Context({_SPAN_KEY: root})
        self._token = _context.attach(context)
        self.trace_id = root.context[0].to_bytes(16, "big").hex()

    def close(self) -> None:
        """`ServerCall.close` for a kept root: its ending attributes written into its record (plain values)."""
        latency = time.monotonic() - self.started
        self._seen.kept = None
        try:
            _runtime.current_capture.reset(self._capture_token)
        except ValueError:  # closed in another context (see `ServerCall.close`): nothing of it to reset there
            pass
        else:
            _context.detach_own(self._token)  # type: ignore[arg-type]
        span: Any = self.span
        if span.end_time is None:  # `is_recording()`: not ended by anyone else
            attributes = span.attributes  # what `set_attributes` of these plain values updates
            attributes[sc.RPC_GRPC_STATUS_CODE] = _GRPC_CODES.get(self.status, 2)
            if self.model != "-":
                attributes[sc.REQUEST_MODEL] = self.model
            if self.transport != "-":
                attributes[sc.TRANSPORT] = self.transport
            if self.status != "OK":
                attributes[sc.ERROR_TYPE] = self.status
                span.set_status(Status(StatusCode.ERROR))
            span.end()
        if self._instruments is not None:
            self._record_server_metrics(self._request, latency)  # type: ignore[arg-type]
        access_log_module._current.write(
            self.method,
            self.model,
            self.transport,
            self.status,
            latency,
            self.input_tokens,
            self.output_tokens,
            self.trace_id,
        )


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
    entry[1:] = [instruments, values_of(entry[0]) if values_of is not None else None]
    return entry[2]


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
    hooks = _runtime.hooks()
    if hooks is None or request is None:
        return ServerCall(method, model, grpc_context, request, hooks)
    tracer = hooks.tracer
    if tracer is None:
        return ServedRpc(method, model, grpc_context, request, hooks.instruments, None)
    # `LeanTracer.start_root` (the SDK is not imported here: a library user pays only for the API).
    start_root = getattr(tracer, "start_root", None)
    if start_root is not None and not _context.current():  # an empty context: no span, no baggage
        metadata = grpc_context.invocation_metadata() if grpc_context is not None else None
        if not metadata or _TRACE_KEYS.isdisjoint(map(_first, metadata)):  # the caller sent no trace context
            name, attributes = _span_starts.get(method) or _span_start(method)
            root = start_root(name, SpanKind.SERVER, attributes)
            if type(root) is _context.LeftOutRoot or type(root) is NonRecordingSpan:
                return ServedRpc(method, model, grpc_context, request, hooks.instruments, root)
            if type(root) is getattr(tracer, "span_type", None):  # a `LeanSpan`, kept
                return KeptRpc(method, model, grpc_context, request, hooks.instruments, root)
            return ServerCall(method, model, grpc_context, request, hooks, root)
    return ServerCall(method, model, grpc_context, request, hooks)
