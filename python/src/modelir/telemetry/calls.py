"""Spans and metrics for model calls (`arun`, `astream`, local or remote); their HTTP attempts are in `wire`.

A call's span is `{gen_ai.operation.name} {gen_ai.request.model}`, started with the tracer's own `start_span`: the
configured sampler decides it (under any parent, kept or not), the span processors see it start and end, and the
span limits bound it. A unary call makes its span current for its whole body (it is a coroutine, so attaching and
detaching happen in one context). A stream's span is made current only while the stream computes its next event,
never across a `yield`: a consumer that stops early would otherwise be left with the stream's span as its current one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from modelir import errors
from modelir.streams.fold import StreamAccumulator
from modelir.telemetry import _runtime
from modelir.telemetry import conventions as sc
from modelir.telemetry.served import ServedCall
from modelir.telemetry.targets import MetricSets, Target, target_of
from modelir.v1 import capabilities_pb2, errors_pb2, request_pb2, response_pb2, stream_pb2

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Method = Callable[Concatenate[Any, _P], Coroutine[Any, Any, _R]]


def start_call_span(
    tracer: trace.Tracer,
    target: Target,
    request: request_pb2.Request | None,
    operation: str,
    model_name: str,
    **options: Any,
) -> trace.Span:
    """The span of one call, started by `tracer` under `parent` (None: the current context). The sampler is given
    the attributes the GenAI conventions call sampling-relevant (operation, provider, request model, server address
    and port: the call's metric attributes) and the transport; what the request asks for is set once the span is
    known to record."""
    parent, streaming = options.get("parent"), options.get("streaming", False)
    attributes = dict(target.metric_set(operation, model_name).plain)
    if target.transport:
        attributes[sc.TRANSPORT] = target.transport
    span = tracer.start_span(f"{operation} {model_name}", parent, kind=target.kind, attributes=attributes)
    if span.is_recording():
        asked = sc.request_attributes(request) if request is not None else {}
        if streaming:
            asked[sc.REQUEST_STREAM] = True
        if asked:
            span.set_attributes(asked)
    return span


class Call:
    """One model call being observed. Made by `model_call` / `stream_call`; not used directly."""

    # No `__slots__`: what most calls never change is a class attribute, not one more assignment per call.
    attempts = 0
    span: trace.Span | None = None
    context: otel_context.Context | None = None
    _first_chunk: float | None = None
    _last_chunk = 0.0
    _started_as = ("", "")
    _ctx_token: object = None
    _call_token: object = None
    _response_model = ""
    _error_type = ""
    _capture_content = False
    _stream_accumulator: StreamAccumulator | None = None

    def __init__(
        self,
        model: Any,
        request: request_pb2.Request | None,
        *,
        streaming: bool,
        parent: otel_context.Context | None = None,
        seen: _runtime.Seen | None = None,
        operation: str = "",
        tracer: Any = None,
        instruments: Any = None,
        span: trace.Span | None = None,
    ) -> None:
        """A generation call of `request`; or, with `request=None`, an `operation` (tokenize) that gets a span
        and its HTTP attempts as children, but no GenAI metrics. `tracer`, `instruments`: the ones in use
        (`_runtime.hooks()`); `span`: the call's span when it was started already (`model_call`'s served path)."""
        target = self._target = target_of(model)
        self._request = request
        self.streaming = streaming
        if request is None:
            self._instruments = None
            model_name = self._model_name = model.name
            self._operation = operation
        else:
            self._instruments = instruments
            model_name = self._model_name = request.model or model.name
            self._operation = target.operation(request)
        # The metric attribute sets are looked up when first needed: a unary call's answer names the response
        # model, which picks other sets than the ones known now.
        self._metrics = target.metric_set(self._operation, model_name) if streaming else None
        if span is None and tracer is not None and _runtime.instrumented(parent):
            span = start_call_span(
                tracer, target, request, self._operation, model_name, parent=parent, streaming=streaming
            )
        if span is not None:
            self.context = trace.set_span_in_context(span, parent)  # propagated even when sampled out
            # A span the sampler left out is not recorded: keep its context, skip all attribute work.
            self.span = span if span.is_recording() else None
        # Timed from here, once the span has started: a duration or time to first chunk never exceeds its span's.
        self.started = time.monotonic()
        if self.span is not None:
            if request is not None and _runtime._resolved.capture_content:  # `capture_content()`: hooks resolved it
                self._capture_content = True
                messages, system = sc.input_messages_json(request)
                self.span.set_attribute(sc.INPUT_MESSAGES, messages)
                if system is not None:
                    self.span.set_attribute(sc.SYSTEM_INSTRUCTIONS, system)
            seen = seen or _runtime.current_capture.get()
            if seen is not None:
                span_context = self.span.get_span_context()
                seen.trace_id = trace.format_trace_id(span_context.trace_id)
                seen.span_id = trace.format_span_id(span_context.span_id)

    def _sets(self) -> MetricSets:
        sets = self._metrics
        if sets is None:
            sets = self._metrics = self._target.metric_set(
                self._operation, self._model_name, self._response_model, self._error_type
            )
        return sets

    # ---- making it current ---------------------------------------------------------------------------------

    def _enter_step(self) -> None:
        self._call_token = _runtime.current_call.set(self)
        if self.context is not None:
            self._ctx_token = otel_context.attach(self.context)

    def _exit_step(self) -> None:
        if self._ctx_token is not None:
            otel_context.detach(self._ctx_token)  # type: ignore[arg-type]
            self._ctx_token = None
        _runtime.current_call.reset(self._call_token)  # type: ignore[arg-type]

    def __enter__(self) -> Call:
        self._enter_step()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit_step()
        self._end(exc)

    # ---- what happened --------------------------------------------------------------------------------------

    def finish(self, response: response_pb2.Response) -> response_pb2.Response:
        """Record a unary response (returns it, so a hook can be one expression)."""
        if self.span is not None or self._instruments is not None:
            self._record_outcome(response, None)
        return response

    def observe(self, event: stream_pb2.StreamEvent) -> None:
        """Record what a stream event tells: time to first chunk, and at the end everything `finish` records."""
        which = event.WhichOneof("event")
        if self._stream_accumulator is not None:
            self._stream_accumulator.add(event)
        if which == "delta":
            now = time.monotonic()
            if self._first_chunk is None:
                self._first_chunk = now - self.started
                if self.span is not None:
                    self.span.set_attribute(sc.RESPONSE_TIME_TO_FIRST_CHUNK, self._first_chunk)
                if self._instruments is not None:
                    self._instruments.time_to_first_chunk.record(self._first_chunk, self._sets().plain, self.context)
            elif self._instruments is not None:
                self._instruments.time_per_output_chunk.record(now - self._last_chunk, self._sets().plain, self.context)
            self._last_chunk = now
        elif which == "start":
            self._started_as = (event.start.id, event.start.model)
            if self._capture_content and self._stream_accumulator is None:
                self._stream_accumulator = StreamAccumulator()
                self._stream_accumulator.add(event)
        elif which == "end":
            self._record_outcome(event.end, self._started_as)

    def _record_outcome(
        self, outcome: response_pb2.Response | stream_pb2.StreamEnd, started_as: tuple[str, str] | None
    ) -> None:
        """What a unary `Response` (`started_as` None) or a stream's `StreamEnd` tells (then `started_as`: the id
        and model its start named, for what the end leaves empty). Each field is read once and only when the span
        or the metrics use it: every read of a protobuf field makes a Python object."""
        span, instruments = self.span, self._instruments
        errors_ = outcome.errors
        error = errors_[0] if errors_ else None
        response_model = outcome.model or (started_as[1] if started_as is not None else "")
        if response_model or error is not None or self._metrics is None:
            self._response_model = response_model
            self._error_type = sc.soft_error_type(error) if error is not None else ""
            self._metrics = self._target.metric_set(self._operation, self._model_name, response_model, self._error_type)
        usage, timing = outcome.usage, outcome.timing
        if span is not None:
            if started_as is None:
                finished = choices = outcome.choices  # type: ignore[union-attr]
                response_id = outcome.id
            else:  # a stream's finishes; its choices only when content is captured (accumulated)
                finished = outcome.finishes  # type: ignore[union-attr]
                accumulator = self._stream_accumulator
                choices = accumulator.response().choices if accumulator is not None else ()
                response_id = outcome.id or started_as[0]
            ending: dict[str, Any] = {sc.RESPONSE_FINISH_REASONS: sc.finish_reasons(f.finish_reason for f in finished)}
            if response_id:
                ending[sc.RESPONSE_ID] = response_id
            if response_model:
                ending[sc.RESPONSE_MODEL] = response_model
            ending.update(sc.usage_attributes(usage))
            if timing.attempt_count:
                ending[sc.ATTEMPT_COUNT] = timing.attempt_count
            if timing.HasField("queue_duration"):
                queued = timing.queue_duration  # its fields: `ToNanoseconds` is a Python method
                ending[sc.QUEUE_DURATION] = queued.seconds + queued.nanos / 1e9
            if error is not None:
                ending[sc.ERROR_TYPE] = self._error_type
                span.set_status(Status(StatusCode.ERROR, error.message))
            if self._capture_content and choices:
                ending[sc.OUTPUT_MESSAGES] = sc.output_messages_json(choices)
            span.set_attributes(ending)
        if instruments is not None:
            # The call's context goes with each measurement: exemplars read its span there. A count or duration
            # that is not zero was reported; only a zero asks `HasField` whether it was reported as zero.
            sets, context = self._metrics, self.context
            tokens = usage.input_token_count
            if tokens or usage.HasField("input_token_count"):
                instruments.token_usage.record(tokens, sets.input_tokens, context)
            tokens = usage.output_token_count
            if tokens or usage.HasField("output_token_count"):
                instruments.token_usage.record(tokens, sets.output_tokens, context)
            if not self._target.remote:
                queued = timing.queue_duration
                seconds = queued.seconds + queued.nanos / 1e9
                if seconds or timing.HasField("queue_duration"):
                    instruments.queue_duration.record(seconds, sets.plain, context)
            if error is not None:
                instruments.soft_errors.add(1, {**sets.plain, sc.SOFT_ERROR_REASON: self._error_type})

    def _end(self, exc: BaseException | None) -> None:
        span, instruments = self.span, self._instruments
        if exc is not None and not isinstance(exc, GeneratorExit):
            error_type = sc.error_type(exc)
            self._error_type = error_type
            self._metrics = self._target.metric_set(self._operation, self._model_name, self._response_model, error_type)
            if span is not None:
                span.set_attribute(sc.ERROR_TYPE, error_type)
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            if instruments is not None and isinstance(exc, errors.UnsupportedCapabilityError):
                for name in _capability_names(exc.unsupported):
                    instruments.rejections.add(1, {**self._metrics.plain, sc.CAPABILITY: name})
        if instruments is not None:
            plain = (self._metrics or self._sets()).plain
            instruments.duration.record(time.monotonic() - self.started, plain, self.context)
            if self.attempts > 1 and not self._target.remote:
                instruments.retries.add(self.attempts - 1, plain)
        if span is not None:
            span.end()


def _capability_names(unsupported: errors_pb2.UnsupportedCapabilities) -> list[str]:
    """One name per gap: each missing capability, each exceeded limit (`limit:<name>`), and `other` for the
    reasons given only in words (their sentences would make the attribute unbounded)."""
    names = [_CAPABILITY_NAMES.get(c, str(c)) for c in unsupported.missing]
    names += [f"limit:{v.limit}" for v in unsupported.limit_violations]
    if unsupported.reasons or not names:
        names.append("other")
    return names


_CAPABILITY_NAMES = {v: k.removeprefix("CAPABILITY_") for k, v in capabilities_pb2.Capability.items()}


class _NoCall:
    """Stands in for a `Call` when nothing is configured: every method does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoCall:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def finish(self, response: response_pb2.Response) -> response_pb2.Response:
        return response


NO_CALL = _NoCall()


def model_call(model: Any, request: request_pb2.Request) -> Call | ServedCall | _NoCall:
    """Observe one unary call: `with model_call(self, request) as call: return call.finish(await ...)`."""
    seen = _runtime.current_capture.get()
    if seen is not None and seen.served:
        # The first model call of an RPC whose span is not recorded (no tracer, or a root the sampler left out):
        # measured by a `ServedCall` as long as the context is still the RPC's and its own span, which the sampler
        # decides here like any other, is not recorded either. The RPC resolved the hooks.
        seen.served = False
        tracer = _runtime._resolved.tracer
        if tracer is None:
            return ServedCall(model, request, seen, None)
        if otel_context.get_current() is seen.context and _runtime.instrumented(seen.context):
            target = target_of(model)
            span = start_call_span(tracer, target, request, target.operation(request), request.model or model.name)
            if not span.is_recording():
                return ServedCall(model, request, seen, trace.set_span_in_context(span, seen.context))
            return Call(model, request, streaming=False, instruments=seen.instruments, span=span)
    hooks = _runtime.hooks()
    if hooks is None:
        return NO_CALL
    return Call(model, request, streaming=False, tracer=hooks.tracer, instruments=hooks.instruments)


def tokenize_span(operation: str) -> Callable[[_Method[_P, _R]], _Method[_P, _R]]:
    """Decorate a model's tokenize or detokenize method: a span named `{operation} {model}` around each call, with
    the HTTP attempts it makes as children. `operation` (`tokenize`, `detokenize`) is a custom
    `gen_ai.operation.name`: the conventions name no operation for it."""

    def decorate(method: _Method[_P, _R]) -> _Method[_P, _R]:
        @functools.wraps(method)  # `self` positional-only, as `_Method` says
        async def traced(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            hooks = _runtime.hooks()
            if hooks is None:
                return await method(self, *args, **kwargs)
            with Call(self, None, streaming=False, operation=operation, tracer=hooks.tracer):
                return await method(self, *args, **kwargs)

        return traced

    return decorate


S = TypeVar("S", stream_pb2.StreamEvent, list[stream_pb2.StreamEvent])


def stream_call(model: Any, request: request_pb2.Request, events: AsyncIterator[S]) -> AsyncIterator[S]:
    """Observe one stream (of events, or of lists of them): returns `events` itself when nothing is configured,
    else a wrapper that records them."""
    if _runtime.hooks() is None:
        return events
    # The span starts when the stream is first iterated (a stream never iterated leaves no open span), as a child
    # of the context the stream was made in.
    return _observed_stream(model, request, events, otel_context.get_current(), _runtime.current_capture.get())


async def _observed_stream(
    model: Any,
    request: request_pb2.Request,
    events: AsyncIterator[S],
    parent: otel_context.Context,
    seen: _runtime.Seen | None,
) -> AsyncIterator[S]:
    hooks = _runtime.hooks()
    tracer, instruments = (hooks.tracer, hooks.instruments) if hooks is not None else (None, None)
    call = Call(model, request, streaming=True, parent=parent, seen=seen, tracer=tracer, instruments=instruments)
    failure: BaseException | None = None
    try:
        while True:
            call._enter_step()
            try:
                event = await events.__anext__()
            except StopAsyncIteration:
                return
            finally:
                call._exit_step()
            if isinstance(event, list):  # a batch (`Model.astream_batches`): each event observed in turn
                for one in event:
                    call.observe(one)
            else:
                call.observe(event)
            yield event
    except BaseException as exc:
        failure = exc
        raise
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:  # a consumer that stopped early: close the source in the call's context
            call._enter_step()
            try:
                await aclose()
            finally:
                call._exit_step()
        call._end(failure)
