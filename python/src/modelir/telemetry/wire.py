"""The telemetry that crosses the wire: a child span and `traceparent` per HTTP attempt, trace context on outgoing
gRPC metadata, and the provider's request id taken back from response headers and gRPC trailers.

Each HTTP attempt is a child `POST` span of the current call with `http.request.resend_count`, so retries show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.trace.span import DEFAULT_TRACE_STATE as _NO_TRACE_STATE

from modelir.telemetry import _context, _runtime
from modelir.telemetry import conventions as sc
from modelir.telemetry._context import BAGGAGE_KEY as _BAGGAGE_KEY
from modelir.telemetry.calls import ServedCall

if TYPE_CHECKING:
    from modelir.telemetry.calls import Call

# Response headers that carry the provider's own request id, in the order they are looked for.
REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-goog-request-id", "cf-ray")

# ---- HTTP attempts ------------------------------------------------------------------------------------------


class Attempt:
    """One HTTP attempt of the current call: a child span, `traceparent` on the request, the provider's id."""

    __slots__ = ("_call", "_seen", "span")

    def __init__(self, call: Call | ServedCall | None, seen: _runtime.Seen | None, request: Any, attempt: int) -> None:
        self._call = call
        self._seen = seen
        self.span: trace.Span | None = None
        if call is not None:
            if attempt > call.attempts:
                call.attempts = attempt
            # A call has a context to propagate only when it is traced; its span only when the trace is kept.
            if call.context is not None and call.span is None:  # a trace left out
                request.headers = request.headers.copy()  # a cached, shared object (see `Executor._headers`)
                if (
                    seen is not None
                    and call.context is seen.unsampled_context
                    and seen.traceparent  # rendered for a W3C propagator: is the global one still W3C?
                    and propagate.get_global_textmap() is _checked_textmap[0]  # `_w3c_only()`, without its call
                    and _checked_textmap[1]
                ):
                    request.headers["traceparent"] = seen.traceparent  # the server's root, rendered once
                else:
                    inject(request.headers, call.context)  # `traceparent` says "not sampled"
            elif call.context is not None and (tracer := _runtime._resolved.tracer) is not None:  # as resolved
                attributes = dict(_url_attributes(request.url))
                attributes[sc.HTTP_REQUEST_METHOD] = request.method
                if attempt > 1:
                    attributes[sc.HTTP_REQUEST_RESEND_COUNT] = attempt - 1
                # The call's span is its context's: a kept lean span's child is made directly.
                start_child = getattr(tracer, "start_child", None)
                span = start_child(call.span, request.method, SpanKind.CLIENT, attributes) if start_child else None
                if span is None:
                    span = tracer.start_span(
                        request.method, context=call.context, kind=SpanKind.CLIENT, attributes=attributes
                    )
                self.span = span
                # The request's headers are a cached, shared object (see `Executor._headers`): copy before adding.
                headers = request.headers = request.headers.copy()
                span_context = span.get_span_context()
                textmap = getattr(propagate, _GLOBAL_TEXTMAP, None) or propagate.get_global_textmap()
                if (
                    textmap is _checked_textmap[0]
                    and _checked_textmap[1]
                    and span_context[5]  # valid
                    and not _context.current().get(_BAGGAGE_KEY)
                ):  # what `inject` writes for the span in the current context (W3C only, no baggage), without its calls
                    headers["traceparent"] = _traceparent(span_context)
                    trace_state = span_context[4]
                    if trace_state is not _NO_TRACE_STATE and trace_state:
                        headers["tracestate"] = trace_state.to_header()
                else:
                    inject(headers, _context.with_span(self.span))

    def __enter__(self) -> Attempt:
        return self

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        """The provider answered `status` (before any body is read)."""
        request_id = ""
        if self._seen is not None or self.span is not None:
            for name in REQUEST_ID_HEADERS:
                request_id = headers.get(name) or ""
                if request_id:
                    break
            if request_id and self._seen is not None:
                self._seen.provider_request_id = request_id
        span = self.span
        if span is not None and span.is_recording():
            answer: dict[str, Any] = {sc.HTTP_RESPONSE_STATUS_CODE: status}
            if request_id:
                answer[sc.PROVIDER_REQUEST_ID] = request_id
            if status >= 400:
                answer[sc.ERROR_TYPE] = str(status)
                span.set_status(Status(StatusCode.ERROR))
            span.set_attributes(answer)

    def __exit__(self, exc_type, exc, tb) -> None:
        span = self.span
        if span is None:
            return
        if exc is not None and not isinstance(exc, GeneratorExit):
            span.set_attribute(sc.ERROR_TYPE, type(exc).__qualname__)
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
        span.end()


_url_cache: dict[tuple[str, bytes, bytes], dict[str, Any]] = {}
# The same, by the identity of the `httpx.URL` object (an executor sends one per path, call after call): its scheme,
# host and path are Python properties, four calls to make the key above. The URL is kept with its attributes, so
# its id cannot be another's while it is cached.
_url_objects: dict[int, tuple[Any, dict[str, Any]]] = {}


def _url_attributes(url: Any) -> dict[str, Any]:
    """`server.*` and `url.full` (without the query, which may hold keys) of an `httpx.URL`, cached per URL:
    building them (`copy_with` re-parses the URL) costs more than the rest of the attempt span."""
    known = _url_objects.get(id(url))
    if known is not None and known[0] is url:
        return known[1]
    key = (url.scheme, url.netloc, url.raw_path)
    attributes = _url_cache.get(key)
    if attributes is None:
        if len(_url_cache) > 4096:  # a bound, for callers whose paths vary
            _url_cache.clear()
            _url_objects.clear()
        attributes = _url_cache[key] = {
            sc.SERVER_ADDRESS: url.host,
            sc.SERVER_PORT: url.port or (443 if url.scheme == "https" else 80),
            sc.URL_FULL: f"{url.scheme}://{url.netloc.decode('ascii')}{url.path}",
        }
    if len(_url_objects) > 4096:
        _url_objects.clear()
    _url_objects[id(url)] = (url, attributes)
    return attributes


class _NoAttempt:
    __slots__ = ()

    def __enter__(self) -> _NoAttempt:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        return None

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        return None


NO_ATTEMPT = _NoAttempt()


_new = object.__new__


class _ServedAttempt:
    """An HTTP attempt of a `ServedCall`: no span, so all it takes back is the provider's request id."""

    __slots__ = ("_seen",)  # made as `object.__new__(_ServedAttempt)`, then `_seen` set: no `__init__` to run
    _seen: _runtime.Seen

    def __enter__(self) -> _ServedAttempt:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        return None

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        for name in REQUEST_ID_HEADERS:
            request_id = headers.get(name)
            if request_id:
                self._seen.provider_request_id = request_id
                return


def http_attempt(request: Any, attempt: int) -> Attempt | _ServedAttempt | _NoAttempt:
    """Observe attempt number `attempt` (from 1) of sending the built `httpx.Request` `request`."""
    call = _runtime.current_call.get()
    if type(call) is ServedCall:
        # What an `Attempt` does for a call with no span, in fewer steps (nine attempts in ten, by default).
        if attempt > call.attempts:
            call.attempts = attempt
        rpc = call.seen
        if call.context is not None:  # the RPC's root, left out by the sampler
            request.headers = request.headers.copy()  # a cached, shared object (see `Executor._headers`)
            textmap = getattr(propagate, _GLOBAL_TEXTMAP, None) or propagate.get_global_textmap()
            if rpc.traceparent and textmap is _checked_textmap[0] and _checked_textmap[1]:
                request.headers["traceparent"] = rpc.traceparent  # rendered once, for a W3C propagator still in use
            else:
                inject(request.headers, call.context)
        observed = _new(_ServedAttempt)
        observed._seen = rpc
        return observed
    seen = _runtime.current_capture.get()
    if call is None and seen is None:
        return NO_ATTEMPT
    return Attempt(call, seen, request, attempt)


# ---- propagation ------------------------------------------------------------------------------------------

# The propagator `opentelemetry.propagate` made from OTEL_PROPAGATORS when it is the default one (W3C trace context
# and baggage, in that order), or trace context alone: then `inject` writes `traceparent` itself.
_W3C_PROPAGATORS = ([TraceContextTextMapPropagator, W3CBaggagePropagator], [TraceContextTextMapPropagator])
_HEX = [f"{n:02x}" for n in range(256)]  # trace flags are one byte
_checked_textmap: list[object] = [None, False]  # [the global propagator last checked, whether it is W3C only]
# Where `propagate.get_global_textmap()` finds the global propagator: read directly on the served path (a Python
# call fewer, each time); if a later API keeps it elsewhere, the function is called
# (`tests/test_telemetry_context.py` checks the two agree).
_GLOBAL_TEXTMAP = "_HTTP_TEXT_FORMAT"


def _w3c_only() -> bool:
    """Whether the global propagator is W3C trace context only (with or without baggage), checked once per
    propagator and kept in `_checked_textmap`."""
    textmap = propagate.get_global_textmap()
    if textmap is not _checked_textmap[0]:
        kinds = [type(p) for p in getattr(textmap, "_propagators", ())] if type(textmap) is CompositePropagator else []
        _checked_textmap[:] = [textmap, kinds in _W3C_PROPAGATORS]
    return bool(_checked_textmap[1])


def inject(carrier: Any, context: Any) -> None:
    """`propagate.inject(carrier, context=context)`, the same headers written directly when the global propagator
    is W3C only and `context` carries no baggage (the propagator's composite, getter and setter calls were a fifth
    of what an unsampled trace costs a served call); any other propagator or any baggage goes through `propagate`.
    `tests/test_telemetry.py` compares the two."""
    if context is None:
        context = _context.current()
    if not _w3c_only() or context.get(_BAGGAGE_KEY):  # another propagator, or baggage to send
        propagate.inject(carrier, context=context)
        return
    span_context = _context.span_context(context)
    if span_context == INVALID_SPAN_CONTEXT:  # as `TraceContextTextMapPropagator.inject`
        return
    carrier["traceparent"] = _traceparent(span_context)
    trace_state = span_context[4]  # `_context.SPAN_CONTEXT_FIELDS`
    if trace_state is not _NO_TRACE_STATE and trace_state:  # a new trace's is the shared empty one
        carrier["tracestate"] = trace_state.to_header()


def _traceparent(span_context: Any) -> str:
    """The W3C `traceparent` of a span context that is not the invalid one."""
    trace_id, span_id, _, flags, _, valid = span_context  # `_context.SPAN_CONTEXT_FIELDS`
    if valid:  # ids in range: their bytes in hex (formatting the 128-bit int costs twice as much)
        return f"00-{trace_id.to_bytes(16, 'big').hex()}-{span_id.to_bytes(8, 'big').hex()}-{_HEX[flags]}"
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def w3c_traceparent(span_context: Any) -> str:
    """What `inject` writes for a context with this span context and no baggage: its `traceparent` when the global
    propagator is W3C trace context only (with or without baggage) and the span context is valid and carries no
    trace state, else "" (then `inject` is the way)."""
    trace_state = span_context[4]
    if not _w3c_only() or not span_context[5] or (trace_state is not _NO_TRACE_STATE and trace_state):
        return ""
    return _traceparent(span_context)


_LEFT_OUT_FLAGS_HEX = _HEX[_context.LEFT_OUT_FLAGS]


def root_traceparent(root: _context.LeftOutRoot) -> str:
    """`w3c_traceparent` of a left-out root's span context, from its drawn bits in one step: their 24 bytes in hex
    are the span id's 16 digits, then the trace id's 32."""
    textmap = getattr(propagate, _GLOBAL_TEXTMAP, None) or propagate.get_global_textmap()
    if not (_checked_textmap[1] if textmap is _checked_textmap[0] else _w3c_only()):
        return ""
    ids = root.drawn.to_bytes(24, "big").hex()
    return f"00-{ids[16:]}-{ids[:16]}-{_LEFT_OUT_FLAGS_HEX}"


# ---- gRPC client metadata -----------------------------------------------------------------------------------


def outgoing_metadata(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`metadata` plus the current trace context (`traceparent`, `tracestate`, `baggage`) when tracing is on."""
    call = _runtime.current_call.get()
    if call is None or call.context is None:
        return metadata
    carrier: dict[str, str] = {}
    inject(carrier, None)
    return metadata + tuple(carrier.items()) if carrier else metadata


# The trailing-metadata key in which the server returns the provider's request id (see `ServerCall`).
PROVIDER_REQUEST_ID_TRAILER = "modelir-provider-request-id"


async def read_trailers(grpc_call: Any) -> None:
    """After a `RemoteModel` RPC: take the provider's request id the server sent back, for the current call's
    span and a record's provenance (only when something is listening: reading trailers costs a few us)."""
    call = _runtime.current_call.get()
    seen = _runtime.current_capture.get()
    if call is None and seen is None:
        return
    for key, value in await grpc_call.trailing_metadata() or ():
        if key == PROVIDER_REQUEST_ID_TRAILER and isinstance(value, str):
            if seen is not None:
                seen.provider_request_id = value
            if call is not None and call.span is not None:
                call.span.set_attribute(sc.PROVIDER_REQUEST_ID, value)
