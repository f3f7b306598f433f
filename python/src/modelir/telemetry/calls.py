"""Spans and metrics for model calls (`arun`, `astream`, local or remote); their HTTP attempts are in `wire`.

A call's span is `{gen_ai.operation.name} {gen_ai.request.model}`. A unary call makes its span current for its
whole body (it is a coroutine, so attaching and detaching happen in one context). A stream's span is made current
only while the stream computes its next event, never across a `yield`: a consumer that stops early would
otherwise be left with the stream's span as its current one.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation import _SPAN_KEY

from modelir import errors
from modelir.streams.fold import StreamAccumulator
from modelir.telemetry import _context, _runtime
from modelir.telemetry import conventions as sc
from modelir.telemetry.attribute_set import FOLD_AT, AttributeSet
from modelir.v1 import capabilities_pb2, request_pb2, response_pb2, stream_pb2


@dataclass(frozen=True, slots=True)
class _Target:
    """What does not change between calls of one model, and the metric attribute sets its calls measure with."""

    transport: str
    provider: str
    endpoint: tuple[str, int] | None
    kind: SpanKind
    remote: bool
    metric_sets: dict[tuple[str, str, str, str], _MetricSets] = field(default_factory=dict)
    # `gen_ai.operation.name` by the request's input kind (`conversation`, `prompt`, ...).
    operations: dict[str | None, str] = field(default_factory=dict)

    def operation(self, request: request_pb2.Request, input_kind: str | None) -> str:
        """The operation of a request with this input kind (made once per kind)."""
        operation = self.operations[input_kind] = sc.operation_name(request, self.transport)
        return operation

    def metric_set(self, operation: str, model: str, response_model: str = "", error_type: str = "") -> _MetricSets:
        """The attribute sets of one (operation, model, response model, error type), made once: a call measures
        five or six times, and building the dicts anew each time was a fifth of its metrics' cost. They are
        shared, so nobody may change them."""
        key = (operation, model, response_model, error_type)
        sets = self.metric_sets.get(key)
        if sets is None:
            if len(self.metric_sets) >= _METRIC_SETS_LIMIT:  # a bound, for models whose names or errors vary
                self.metric_sets.clear()
            plain: dict[str, Any] = {
                sc.OPERATION_NAME: operation,
                sc.PROVIDER_NAME: self.provider,
                sc.REQUEST_MODEL: model,
            }
            if self.endpoint is not None:
                plain[sc.SERVER_ADDRESS], plain[sc.SERVER_PORT] = self.endpoint
            if response_model:
                plain[sc.RESPONSE_MODEL] = response_model
            if error_type:
                plain[sc.ERROR_TYPE] = error_type
            sets = self.metric_sets[key] = _MetricSets(
                AttributeSet(plain),
                AttributeSet(plain, **{sc.TOKEN_TYPE: "input"}),
                AttributeSet(plain, **{sc.TOKEN_TYPE: "output"}),
            )
        return sets


@dataclass(frozen=True, slots=True)
class _MetricSets:
    plain: dict[str, Any]
    input_tokens: dict[str, Any]
    output_tokens: dict[str, Any]
    # `[instruments, lists]`: the lists that `ServedCall` appends its token usage (input, output), queue duration
    # and duration to for the `instruments` named first (`_appended`).
    appended: list[Any] = field(default_factory=lambda: [None])


def _appended(sets: _MetricSets, instruments: Any) -> list[Any]:
    """`sets.appended` for `instruments`: each list the histogram appends a measurement of these sets to
    (`meter.AggregatingHistogram.values_of`), None for a histogram of another kind (the SDK's)."""

    def values_of(histogram: Any, attributes: Any) -> list[float] | None:
        method = getattr(histogram, "values_of", None)
        return method(attributes) if method is not None else None

    sets.appended[:] = [
        instruments,
        values_of(instruments.token_usage, sets.input_tokens),
        values_of(instruments.token_usage, sets.output_tokens),
        values_of(instruments.queue_duration, sets.plain),
        values_of(instruments.duration, sets.plain),
    ]
    return sets.appended


_METRIC_SETS_LIMIT = 512


_P = ParamSpec("_P")
_R = TypeVar("_R")
_Method = Callable[Concatenate[Any, _P], Coroutine[Any, Any, _R]]

# Keyed by `id(model)` and dropped when the model is collected: a `WeakKeyDictionary` makes a weak reference for
# every look-up, and the target kept on the model itself would travel with it when it is pickled (to a Ray worker).
_targets: dict[int, _Target] = {}


def _target(model: Any) -> _Target:
    target = _targets.get(id(model))
    if target is None:
        transport = getattr(model, "transport", None)
        if transport is not None:  # a local `Model`: its transport, and the executor's endpoint when it has one
            executor = getattr(model, "executor", None)
            url = getattr(executor, "base_url", None) or getattr(executor, "_base_url", None)
            target = _Target(
                transport.name,
                sc.provider_name(transport.name),
                sc.endpoint(url) if url else None,
                SpanKind.CLIENT if executor is not None else SpanKind.INTERNAL,  # in-process models are INTERNAL
                remote=False,
            )
        else:  # a `RemoteModel`: the modelir server is the GenAI service it calls
            where = getattr(model, "target", "")
            target = _Target("", sc.REMOTE_PROVIDER, sc.endpoint(where) if where else None, SpanKind.CLIENT, True)
        weakref.finalize(model, _targets.pop, id(model), None)  # before the id can be another object's
        _targets[id(model)] = target
    return target


class Call:
    """One model call being observed. Made by `model_call` / `stream_call`; not used directly."""

    # No `__slots__`: what most calls never change is a class attribute, not one more assignment per call (a
    # served call's telemetry is a few hundred interpreter steps, and each costs in a busy server).
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
    _attach = True  # whether making the call current attaches its context (see `__init__`)

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
    ) -> None:
        """A generation call of `request`; or, with `request=None`, an `operation` (tokenize) that gets a span
        and its HTTP attempts as children, but no GenAI metrics. `tracer`, `instruments`: the ones in use
        (`_runtime.hooks()`)."""
        target = _targets.get(id(model)) or _target(model)
        self._target = target
        self._request = request
        self.streaming = streaming
        if request is None:
            self._instruments = None
            model_name = self._model_name = model.name
            self._operation = operation
        else:
            self._instruments = instruments
            model_name = self._model_name = request.model or model.name
            input_kind = request.WhichOneof("input")
            self._operation = target.operations.get(input_kind) or target.operation(request, input_kind)
        # The metric attribute sets are looked up when first needed: a unary call's answer names the response
        # model, which picks other sets than the ones known now.
        self._metrics = target.metric_set(self._operation, model_name) if streaming else None
        if tracer is not None:
            current = parent if parent is not None else _context.current()
            capture = _runtime.current_capture.get()
            if (capture is not None and current is capture.unsampled_context) or _runtime.sampled_out(current):
                # Under a parent the sampler left out, no span is made (the default, parent-based sampler would drop
                # it anyway, after doing most of the work of making it); the parent's context is what gets propagated.
                self.context = current
                # Without a parent of its own (a unary call) that context is already the current one: nothing to attach.
                self._attach = parent is not None
                tracer = None
        if tracer is not None:
            attributes = dict(self._sets().plain)
            if target.transport:
                attributes[sc.TRANSPORT] = target.transport
            if request is not None:
                attributes.update(sc.request_attributes(request))
            if streaming:
                attributes[sc.REQUEST_STREAM] = True
            name = f"{attributes[sc.OPERATION_NAME]} {model_name}"
            # A child of a kept lean span is made directly (`LeanTracer.start_child`), else the general way.
            start_child = getattr(tracer, "start_child", None)
            span = start_child(current.get(_SPAN_KEY), name, target.kind, attributes) if start_child else None
            if span is None:
                span = tracer.start_span(name, parent, kind=target.kind, attributes=attributes)
            self.context = _context.with_span(span)  # propagated even when sampled out
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
                span_context = self.span.get_span_context()  # as `trace.format_trace_id` / `format_span_id` write them
                seen.trace_id, seen.span_id = _context.trace_id_hex(span_context), f"{span_context[1]:016x}"

    def _sets(self) -> _MetricSets:
        sets = self._metrics
        if sets is None:
            sets = self._metrics = self._target.metric_set(
                self._operation, self._model_name, self._response_model, self._error_type
            )
        return sets

    # ---- making it current ---------------------------------------------------------------------------------

    def _enter_step(self) -> None:
        self._call_token = _runtime.current_call.set(self)
        if self.context is not None and self._attach:
            self._ctx_token = _context.attach(self.context)

    def _exit_step(self) -> None:
        if self._ctx_token is not None:
            _context.detach(self._ctx_token)  # type: ignore[arg-type]
            self._ctx_token = None
        _runtime.current_call.reset(self._call_token)  # type: ignore[arg-type]

    def __enter__(self) -> Call:
        # `_enter_step`, inline: a unary call's path.
        self._call_token = _runtime.current_call.set(self)
        if self.context is not None and self._attach:
            self._ctx_token = _context.attach(self.context)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._ctx_token is not None:  # `_exit_step`, inline
            _context.detach(self._ctx_token)  # type: ignore[arg-type]
            self._ctx_token = None
        _runtime.current_call.reset(self._call_token)  # type: ignore[arg-type]
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
        or the metrics use it: every read of a protobuf field makes a Python object (about 1k instructions each)."""
        span, instruments = self.span, self._instruments
        errors_ = outcome.errors
        error = errors_[0] if errors_ else None
        response_model = outcome.model or (started_as[1] if started_as is not None else "")
        if response_model or error is not None or self._metrics is None:
            self._response_model = response_model
            self._error_type = sc.soft_error_type(error) if error is not None else ""
            key = (self._operation, self._model_name, response_model, self._error_type)
            self._metrics = self._target.metric_sets.get(key) or self._target.metric_set(*key)
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
            # The finish reasons alone (the one value that is a sequence, which a span checks item by item), the rest
            # in one `set_attributes` call of plain values: the SDK takes its lock and checks the span once a call.
            span.set_attribute(sc.RESPONSE_FINISH_REASONS, sc.finish_reasons(f.finish_reason for f in finished))
            ending: dict[str, Any] = {}
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
            # The call's context goes with each measurement: exemplars read its span there, and the SDK does not
            # look up the current context again.
            # A count or duration that is not zero was reported; only a zero asks `HasField` (a name look-up, the
            # cost of a field read again) whether it was reported as zero or not at all.
            sets, context = self._metrics, self.context
            tokens = usage.input_token_count
            if tokens or usage.HasField("input_token_count"):
                instruments.token_usage.record(tokens, sets.input_tokens, context)
            tokens = usage.output_token_count
            if tokens or usage.HasField("output_token_count"):
                instruments.token_usage.record(tokens, sets.output_tokens, context)
            if not self._target.remote:
                queued = timing.queue_duration  # its fields: `ToNanoseconds` is a Python method, thrice the cost
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


class KeptCall(Call):
    """A `Call` made by `_kept_call`: its span a lean one (`tracer.LeanSpan`, a plain record), the kept root's child.
    A unary answer without errors is recorded in fewer steps; anything else the general way.

    Why: `_record_outcome` checks every value it sets on the span again and reads the usage and timing twice (for the
    span, then for the metrics), and the RPC read the usage a third time; each protobuf read is ~1 k instructions.
    Recorded here, a kept served call's hooks cost ~19 k instructions less (counted in a loop: 231 k -> 212 k;
    `bench/README.md`). `tests/test_telemetry.py` holds the spans and points of both ways to the same."""

    _seen: _runtime.Seen  # the RPC's (set by `_kept_call`)

    def _record_outcome(
        self, outcome: response_pb2.Response | stream_pb2.StreamEnd, started_as: tuple[str, str] | None
    ) -> None:
        if started_as is not None or outcome.errors:
            Call._record_outcome(self, outcome, started_as)
            return
        response: response_pb2.Response = outcome  # type: ignore[assignment]  # a unary answer
        response_model = response.model
        if response_model:  # (none: the sets of the request's model, made at the start, stay)
            self._response_model = response_model
            key = (self._operation, self._model_name, response_model, "")
            self._metrics = self._target.metric_sets.get(key) or self._target.metric_set(*key)
        reported = sc.usage_attributes(response.usage)  # the reported counts, a zero included
        input_tokens, output_tokens = reported.get(sc.USAGE_INPUT_TOKENS), reported.get(sc.USAGE_OUTPUT_TOKENS)
        seen = self._seen  # the RPC's: the usage read here is its too, if it answers with this (`ServerCall.answered`)
        seen.answer, seen.input_tokens, seen.output_tokens = response, input_tokens, output_tokens
        timing = response.timing
        queued = timing.queue_duration if timing.HasField("queue_duration") else None
        span: Any = self.span
        if span.end_time is None:  # `is_recording()`
            # What `Call._record_outcome` sets, in its order, written into the span's record: every value is one a
            # lean span keeps as it is (the finish reasons a tuple of strings).
            attributes = span.attributes
            attributes[sc.RESPONSE_FINISH_REASONS] = sc.finish_reasons(c.finish_reason for c in response.choices)
            if response.id:
                attributes[sc.RESPONSE_ID] = response.id
            if response_model:
                attributes[sc.RESPONSE_MODEL] = response_model
            attributes.update(reported)
            if timing.attempt_count:
                attributes[sc.ATTEMPT_COUNT] = timing.attempt_count
            if queued is not None:
                attributes[sc.QUEUE_DURATION] = queued.seconds + queued.nanos / 1e9
        instruments = self._instruments
        if instruments is not None:
            sets, context = self._metrics, self.context
            if input_tokens is not None:
                instruments.token_usage.record(input_tokens, sets.input_tokens, context)  # type: ignore[union-attr]
            if output_tokens is not None:
                instruments.token_usage.record(output_tokens, sets.output_tokens, context)  # type: ignore[union-attr]
            if queued is not None and not self._target.remote:  # (not reported: `Call` records none either)
                instruments.queue_duration.record(queued.seconds + queued.nanos / 1e9, sets.plain, context)  # type: ignore[union-attr]


def _capability_names(unsupported) -> list[str]:
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

    def __exit__(self, exc_type, exc, tb) -> None:
        return None

    def finish(self, response: response_pb2.Response) -> response_pb2.Response:
        return response


NO_CALL = _NoCall()
_new = object.__new__


def _off() -> bool:
    return _runtime.hooks() is None


class ServedCall:
    """The first model call of a generation RPC that makes no span (no tracer, or its root left out by the
    sampler): what a `Call` records of it (the same measurements, attribute sets and propagated context), in a
    fraction of the steps, since a call without a span needs none of a `Call`'s span work and a successful answer
    none of its error handling. An exception or an answer with errors is recorded by a `Call` made for it then
    (`_recorded_by_call`), so those rarer paths are the general ones (`tests/test_telemetry.py` compares the two).

    Why: in a gateway nine calls in ten are such calls, and a `Call`'s generality (span checks, the current call's
    context looked up and compared, its attribute sets re-keyed) cost 8-10 k instructions a request of the ~107 k
    telemetry cost one (`bench/instructions.py`, two runs a side); the RPC sharing its reading of the usage, 3-4 k
    more."""

    __slots__ = ("_instruments", "_model", "_request", "_response", "_token", "attempts", "context", "seen", "started")
    span = None  # never traced: the RPC's trace was left out, and its context is what is propagated
    # Made by `model_call` as `object.__new__(ServedCall)` with these set: no `__init__` to run.
    _instruments: Any
    _model: Any
    _request: request_pb2.Request
    _response: response_pb2.Response | None
    _token: Any
    attempts: int
    context: Any
    seen: _runtime.Seen
    started: float

    def __enter__(self) -> ServedCall:
        self._token = _runtime.current_call.set(self)  # what the HTTP attempts inside find (`wire.http_attempt`)
        return self

    def finish(self, response: response_pb2.Response) -> response_pb2.Response:
        self._response = response
        return response

    def __exit__(self, exc_type, exc, tb) -> None:
        _runtime.current_call.reset(self._token)
        instruments, response = self._instruments, self._response
        if instruments is None:  # traces only, this one left out: nothing to record
            return
        if exc is not None or response is None or response.errors:
            self._recorded_by_call(exc)
            return
        # `Call._record_outcome` and `Call._end` for a unary answer without errors, their lines repeated rather than
        # shared through a helper (a Python call a request is ~1 k instructions on both paths);
        # `test_a_served_call_records_what_a_call_records` holds the two to the same points.
        model, request = self._model, self._request
        target = _targets.get(id(model)) or _target(model)
        input_kind = request.WhichOneof("input")
        key = (
            target.operations.get(input_kind) or target.operation(request, input_kind),
            request.model or model.name,
            response.model,
            "",
        )
        sets = target.metric_sets.get(key) or target.metric_set(*key)
        usage, context, seen = response.usage, self.context, self.seen
        seen.answer = response  # its usage, as read here, is the RPC's too (`ServerCall.answered`)
        # The lists an `AggregatingHistogram` appends these sets' measurements to (`values_of`), appended to here:
        # four `record` calls a request saved. None for another meter's instruments: `record` is called.
        appended = sets.appended if sets.appended[0] is instruments else _appended(sets, instruments)
        tokens = usage.input_token_count
        if tokens or usage.HasField("input_token_count"):
            values = appended[1]
            if values is None:
                instruments.token_usage.record(tokens, sets.input_tokens, context)
            else:
                values.append(tokens)
                if len(values) >= FOLD_AT:
                    instruments.token_usage.fold(values, sets.input_tokens)
            seen.input_tokens = tokens
        tokens = usage.output_token_count
        if tokens or usage.HasField("output_token_count"):
            values = appended[2]
            if values is None:
                instruments.token_usage.record(tokens, sets.output_tokens, context)
            else:
                values.append(tokens)
                if len(values) >= FOLD_AT:
                    instruments.token_usage.fold(values, sets.output_tokens)
            seen.output_tokens = tokens
        if not target.remote:
            timing = response.timing
            queued = timing.queue_duration
            seconds = queued.seconds + queued.nanos / 1e9
            if seconds or timing.HasField("queue_duration"):
                values = appended[3]
                if values is None:
                    instruments.queue_duration.record(seconds, sets.plain, context)
                else:
                    values.append(seconds)
                    if len(values) >= FOLD_AT:
                        instruments.queue_duration.fold(values, sets.plain)
        values, seconds = appended[4], time.monotonic() - self.started
        if values is None:
            instruments.duration.record(seconds, sets.plain, context)
        else:
            values.append(seconds)
            if len(values) >= FOLD_AT:
                instruments.duration.fold(values, sets.plain)
        if self.attempts > 1 and not target.remote:
            instruments.retries.add(self.attempts - 1, sets.plain)

    def _recorded_by_call(self, exc: BaseException | None) -> None:
        """Record this call as a `Call` without a span would: its answer (soft errors included), then its end (an
        exception's type, a rejection's capabilities, the duration, the retries)."""
        call = Call(self._model, self._request, streaming=False, instruments=self._instruments)
        call.started, call.attempts, call.context = self.started, self.attempts, self.context
        if self._response is not None:
            call.finish(self._response)
        call._end(exc)


def model_call(model: Any, request: request_pb2.Request) -> Call | ServedCall | _NoCall:
    """Observe one unary call: `with model_call(self, request) as call: return call.finish(await ...)`."""
    seen = _runtime.current_capture.get()
    if seen is not None and seen.served:
        # The first model call of an RPC that makes no span: none here either, as long as the context the call runs
        # in is still the RPC's (nothing between them started a span of its own). The RPC resolved the hooks.
        seen.served = False
        if seen.unsampled_context is None or _context.current() is seen.unsampled_context:
            call = _new(ServedCall)  # (no `__init__`: a Python call a request fewer)
            call._model, call._request, call.seen, call._instruments = model, request, seen, seen.instruments
            call.context, call.attempts, call._response = seen.unsampled_context, 0, None
            call.started = time.monotonic()
            return call
    hooks = _runtime.hooks()
    if hooks is None:
        return NO_CALL
    if seen is not None and seen.kept is not None:
        # The first model call of an RPC whose root was kept (`server.KeptRpc`): its span is the root's child, made
        # directly, as long as the context is still the RPC's and content is not captured (the general way does that).
        rpc, seen.kept = seen.kept, None
        if _context.current() is rpc.context and not _runtime._resolved.capture_content:
            kept = _kept_call(model, request, hooks, seen, rpc)
            if kept is not None:
                return kept
    return Call(model, request, streaming=False, tracer=hooks.tracer, instruments=hooks.instruments)


def _kept_call(model: Any, request: request_pb2.Request, hooks: Any, seen: _runtime.Seen, rpc: Any) -> KeptCall | None:
    """What `Call(model, request, streaming=False, ...)` makes in the context of `rpc`, a kept root (its span alone),
    without its general look-ups: the root is the parent, kept, so the call's span is `start_child`'s; None when the
    tracer cannot make it so (the general way then).

    Why: with `server.KeptRpc`, skipping `Call.__init__`'s checks of the current context, its sampling and its
    capture took ~18 k instructions off a kept served call's hooks (counted in a loop: 249 k -> 231 k;
    `bench/README.md`)."""
    start_child = getattr(hooks.tracer, "start_child", None)
    if start_child is None:
        return None
    target = _targets.get(id(model)) or _target(model)
    input_kind = request.WhichOneof("input")
    operation = target.operations.get(input_kind) or target.operation(request, input_kind)
    model_name = request.model or model.name
    key = (operation, model_name, "", "")
    sets = target.metric_sets.get(key) or target.metric_set(*key)
    attributes = dict(sets.plain)  # the span's start attributes, as `Call.__init__` makes them
    if target.transport:
        attributes[sc.TRANSPORT] = target.transport
    attributes.update(sc.request_attributes(request))
    span = start_child(rpc.span, f"{operation} {model_name}", target.kind, attributes)
    if span is None:
        return None
    call = _new(KeptCall)
    call._target, call._request, call.streaming, call._instruments = target, request, False, hooks.instruments
    call._model_name, call._operation, call._metrics = model_name, operation, sets
    call.span, call.context = span, otel_context.Context({_SPAN_KEY: span})  # `with_span(span)` of the RPC's context
    call.started, call._seen = time.monotonic(), seen
    # The root's trace id is the call's (`Call.__init__` formats it again).
    seen.trace_id, seen.span_id = rpc.trace_id, f"{span.context[1]:016x}"
    return call


def tokenize_span(operation: str) -> Callable[[_Method[_P, _R]], _Method[_P, _R]]:
    """Decorate a model's tokenize or detokenize method: a span named `{operation} {model}` around each call, with
    the HTTP attempts it makes as children. `operation` (`tokenize`, `detokenize`) is a custom
    `gen_ai.operation.name`: the conventions name no operation for it."""

    def decorate(method: _Method[_P, _R]) -> _Method[_P, _R]:
        @functools.wraps(method)
        async def traced(self: Any, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            hooks = _runtime.hooks()
            if hooks is None:
                return await method(self, *args, **kwargs)
            with Call(self, None, streaming=False, operation=operation, tracer=hooks.tracer):
                return await method(self, *args, **kwargs)

        return traced

    return decorate


def stream_call(
    model: Any, request: request_pb2.Request, events: AsyncIterator[stream_pb2.StreamEvent]
) -> AsyncIterator[stream_pb2.StreamEvent]:
    """Observe one stream: returns `events` itself when nothing is configured, else a wrapper that records them."""
    if _off():
        return events
    # The span starts when the stream is first iterated (a stream never iterated leaves no open span), as a child
    # of the context the stream was made in.
    return _observed_stream(model, request, events, otel_context.get_current(), _runtime.current_capture.get())


async def _observed_stream(
    model: Any,
    request: request_pb2.Request,
    events: AsyncIterator[stream_pb2.StreamEvent],
    parent: otel_context.Context,
    seen: _runtime.Seen | None,
) -> AsyncIterator[stream_pb2.StreamEvent]:
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
