"""The telemetry that crosses the wire: a child span and `traceparent` per HTTP attempt, trace context on outgoing
gRPC metadata, and the provider's request id taken back from response headers and gRPC trailers.

Each HTTP attempt is a child `POST` span of the current call with `http.request.resend_count`, so retries show. Trace
context is written by the global propagator (`opentelemetry.propagate.inject`), whatever it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from modelir.telemetry import _runtime
from modelir.telemetry import conventions as sc
from modelir.telemetry.served import ServedCall

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
        if call is None:
            return
        if attempt > call.attempts:
            call.attempts = attempt
        context = call.context
        if context is None:  # the call is not traced: nothing to propagate
            return
        tracer = _runtime._resolved.tracer  # as `hooks()` resolved it for the call
        if tracer is not None and _runtime.instrumented(context, http=True):
            attributes = dict(_url_attributes(request.url))
            attributes[sc.HTTP_REQUEST_METHOD] = request.method
            if attempt > 1:
                attributes[sc.HTTP_REQUEST_RESEND_COUNT] = attempt - 1
            span = tracer.start_span(request.method, context=context, kind=SpanKind.CLIENT, attributes=attributes)
            context = trace.set_span_in_context(span, context)
            # A span the sampler left out is not recorded: its context is propagated, nothing more.
            self.span = span if span.is_recording() else None
        # The request's headers are a cached, shared object (see `Executor._headers`): copy before adding.
        headers = request.headers = request.headers.copy()
        propagate.inject(headers, context=context)

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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        return None


NO_ATTEMPT = _NoAttempt()


class _ServedAttempt:
    """An HTTP attempt of a `ServedCall`: no span, so all it takes back is the provider's request id."""

    __slots__ = ("_seen",)  # set by `http_attempt`
    _seen: _runtime.Seen

    def __enter__(self) -> _ServedAttempt:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
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
    if type(call) is ServedCall and call.context is None:  # a served call without a tracer
        if attempt > call.attempts:
            call.attempts = attempt
        observed = _ServedAttempt()
        observed._seen = call.seen
        return observed
    seen = _runtime.current_capture.get()
    if call is None and seen is None:
        return NO_ATTEMPT
    return Attempt(call, seen, request, attempt)


# ---- gRPC client metadata -----------------------------------------------------------------------------------


def outgoing_metadata(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`metadata` plus the current trace context (`traceparent`, `tracestate`, `baggage`) when tracing is on."""
    call = _runtime.current_call.get()
    if call is None or call.context is None:
        return metadata
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
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
