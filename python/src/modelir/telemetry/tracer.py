"""The tracer `modelir serve` (and the CLI) trace with when spans go out over OTLP: spans kept as plain records, with
the SDK's sampler, batch span processor and exporters, for a fraction of the SDK span's cost.

Why not the SDK's spans: each one builds bounded, locked attribute maps that clean every value again, on start and on
every `set_attributes`, plus a lock per call and a readable copy at the end. With three spans per served call, a
kept trace costs a served call about half what it does with the SDK's spans, export included (`bench/telemetry.py`,
`run_served`: ~180 us against ~350).
The values modelir sets are already of the attribute types, so a value is cleaned only when it is not a plain
`str`, `bool`, `int` or `float` (another library's span through the global provider, say), as the SDK would clean it.

A `LeanSpan` has what the exporters read of the SDK's `ReadableSpan` (context, parent, name, kind, times, attributes,
events, links, status, resource, scope, dropped counts), so the stock OTLP encoders and `telemetry/otlp.py`'s take
it alike, and `BatchSpanProcessor` batches it (its `OTEL_BSP_*` settings apply). What it keeps of the SDK's
behaviour, so a collector cannot tell the two apart (`tests/test_telemetry_tracer.py` compares the encoded spans of
the same calls): the sampler's decision, attributes and trace state; span and trace ids as the id generator makes
them (the SDK's own generator's drawn here as it draws them); status rules (OK is final, UNSET ignored); exceptions
recorded as `exception` events with the same attributes; `start_as_current_span`. Not kept: span limits (modelir's
spans are bounded by what modelir sets) and span processors other than the one batch processor (the console
exporter, which prints the SDK's span JSON, keeps the SDK).
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import _clean_attribute_value
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import Decision, ParentBased, Sampler, StaticSampler, TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import DEFAULT_TRACE_STATE
from opentelemetry.util._decorator import _agnosticcontextmanager

from modelir.telemetry import _context

# The flags of a new span by (kept, random trace id), made once.
_FLAGS = {
    (kept, randomly): TraceFlags((TraceFlags.SAMPLED if kept else 0) | (TraceFlags.RANDOM_TRACE_ID if randomly else 0))
    for kept in (False, True)
    for randomly in (False, True)
}
_PLAIN_TYPES = frozenset((str, bool, int, float))
_SAMPLED, _RANDOM_TRACE_ID = TraceFlags.SAMPLED, TraceFlags.RANDOM_TRACE_ID
_MAX_TRACE_ID, _MAX_SPAN_ID = (1 << 128) - 1, (1 << 64) - 1
_NO_TRACE_STATE = DEFAULT_TRACE_STATE  # what `SpanContext` puts for no trace state
_new_span = object.__new__
_NO_PARENT = Context()  # an empty context: a span started in it is a root
# The status of every lean span until one is set (the OTLP encoder knows it by identity).
UNSET_STATUS = Status(StatusCode.UNSET)


# ---- the decisions of the SDK's own samplers, without calling them ------------------------------------------

# A rule decides from the trace id alone: a constant (`StaticSampler`), or the bound below which the trace id's low 64
# bits are kept (`TraceIdRatioBased`, which checks only those bits, for 64-bit trace ids).
_Rule = bool | int
_LOW_64_BITS = TraceIdRatioBased.TRACE_ID_LIMIT


def _rule(sampler: Sampler) -> _Rule | None:
    """The rule of a sampler whose decision depends on the trace id alone, or None. The samplers are recognised by
    their `should_sample` method, so subclasses that only name them (`ParentBasedTraceIdRatio`, `_AlwaysOn`) count."""
    method = type(sampler).should_sample
    if method is StaticSampler.should_sample:
        return sampler._decision is Decision.RECORD_AND_SAMPLE  # type: ignore[attr-defined]  # RECORD_ONLY: not kept
    if method is TraceIdRatioBased.should_sample:
        return sampler.bound  # type: ignore[attr-defined]
    return None


class _Decisions:
    """A sampler the SDK ships (`ParentBased` over static and ratio samplers, or one of those alone) as data: which
    rule applies to a root, and to a remote or local parent that was or was not sampled.

    Why: the sampler's `should_sample` looks the parent up again, builds a `SamplingResult` and a read-only view of
    the attributes, and finds the parent's trace state a third time, for every span, kept or not (a tenth of what an
    unsampled trace costs a served call). The rules give the same decision, attributes and trace state
    (`tests/test_telemetry_tracer.py` compares them with the sampler's over parents, ratios and trace ids)."""

    __slots__ = ("local_not_sampled", "local_sampled", "remote_not_sampled", "remote_sampled", "root")

    def __init__(self, root: _Rule, remote: tuple[_Rule, _Rule], local: tuple[_Rule, _Rule]) -> None:
        self.root = root
        self.remote_sampled, self.remote_not_sampled = remote
        self.local_sampled, self.local_not_sampled = local

    @classmethod
    def of(cls, sampler: Sampler) -> _Decisions | None:
        """The decisions of `sampler`, or None when it is not one of the SDK's that decide from the trace id alone."""
        alone = _rule(sampler)
        if alone is not None:  # no parent-based delegation: one rule for every span
            return cls(alone, (alone, alone), (alone, alone))
        if type(sampler).should_sample is not ParentBased.should_sample:
            return None
        rules = [
            _rule(getattr(sampler, name))
            for name in (
                "_root",
                "_remote_parent_sampled",
                "_remote_parent_not_sampled",
                "_local_parent_sampled",
                "_local_parent_not_sampled",
            )
        ]
        if any(rule is None for rule in rules):
            return None
        root, remote_sampled, remote_not_sampled, local_sampled, local_not_sampled = rules
        return cls(root, (remote_sampled, remote_not_sampled), (local_sampled, local_not_sampled))  # type: ignore[arg-type]

    def rule(self, parent: SpanContext | None) -> _Rule:
        """The rule for a span under `parent` (a valid span context, or None for a root): a span of trace id `t` is
        kept when the rule is True, or an int bound above `t`'s low 64 bits."""
        if parent is None:
            return self.root
        _, _, remote, flags, _, _ = parent  # `_context.SPAN_CONTEXT_FIELDS`
        if remote:
            return self.remote_sampled if flags & _SAMPLED else self.remote_not_sampled
        return self.local_sampled if flags & _SAMPLED else self.local_not_sampled


def _clean_value(value: Any) -> Any:
    """A value of a type other than the plain ones, cleaned as the SDK cleans it (None: the SDK would drop it)."""
    kind = type(value)
    if kind is tuple or kind is list:
        kinds = set(map(type, value))
        if len(kinds) <= 1 and kinds <= _PLAIN_TYPES:  # of one plain type (finish reasons, stop sequences): in C
            return tuple(value)  # what every SDK version makes of it, without a Python call per element
    return _clean_attribute_value(value, None)


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of `attributes` with every value of a type other than the plain ones cleaned as the SDK cleans it (and
    left out when the SDK would drop it)."""
    if not attributes:
        return {}
    out = dict(attributes)
    if _PLAIN_TYPES.issuperset(map(type, out.values())):  # nearly always (a loop in C): nothing to clean
        return out
    for key, value in attributes.items():
        if type(value) not in _PLAIN_TYPES:
            cleaned = _clean_value(value)
            if cleaned is None:
                del out[key]
            else:
                out[key] = cleaned
    return out


class LeanSpan(trace.Span):
    """A recording span as a plain record; ended, it goes to the tracer's batch processor."""

    __slots__ = (
        "_ended",
        "attributes",
        "context",
        "end_time",
        "events",
        "instrumentation_scope",
        "kind",
        "links",
        "name",
        "parent",
        "resource",
        "start_time",
        "status",
    )

    dropped_attributes = dropped_events = dropped_links = 0

    def __init__(
        self,
        tracer: LeanTracer,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: tuple[Link, ...],
        start_time: int,
    ) -> None:
        """`attributes`: a new dict of cleaned values, kept as it is; `start_time`: in ns since the epoch."""
        # (One field a statement, nothing computed: three spans a kept trace are made here.)
        self._ended = tracer.ended
        self.resource = tracer.resource
        self.instrumentation_scope = tracer.scope
        self.name = name
        self.context = context
        self.parent = parent
        self.kind = kind
        self.attributes = attributes
        self.links = links
        self.events: tuple[Event, ...] = ()  # (a tuple, as the SDK's `ReadableSpan.events`: no list for most spans)
        self.status = UNSET_STATUS
        self.start_time = start_time
        self.end_time: int | None = None

    # ---- the API ------------------------------------------------------------------------------------------

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attribute(self, key: str, value: Any) -> None:
        if self.end_time is None:
            if type(value) not in _PLAIN_TYPES:
                value = _clean_value(value)
                if value is None:  # as the SDK: a value it cannot keep is not set
                    return
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if self.end_time is None:
            if _PLAIN_TYPES.issuperset(map(type, attributes.values())):  # `_clean`'s test, without its call
                self.attributes.update(attributes)
            else:
                self.attributes.update(_clean(attributes))

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        if self.end_time is None:
            event = Event(name, _clean(attributes), timestamp if timestamp is not None else time.time_ns())
            self.events = (*self.events, event)

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        if self.end_time is None and context.is_valid:
            self.links = (*self.links, Link(context, _clean(attributes)))

    def update_name(self, name: str) -> None:
        if self.end_time is None:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # The SDK's rules: OK is final, and UNSET is never set.
        if self.end_time is not None or self.status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                self.status = status
        elif status is not StatusCode.UNSET:
            self.status = Status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        module, qualname = type(exception).__module__, type(exception).__qualname__
        recorded: dict[str, Any] = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            recorded.update(attributes)
        self.add_event("exception", recorded, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else time.time_ns()
        self._ended(self)  # what the processor reads of a ReadableSpan


_context.knows_span_type(LeanSpan, "context")


def _ended(processor: BatchSpanProcessor) -> Callable[[LeanSpan], None]:
    """What to call with an ended span: the processor's `on_end`, or for the SDK's own batch processor the batch
    queue's `emit` that its `on_end` calls once it has checked the span was sampled (a lean span always was): two
    Python calls and two property reads a span fewer, three spans a kept trace."""
    queue = getattr(processor, "_batch_processor", None)  # the SDK's `BatchProcessor`, in the versions that have one
    if type(processor) is BatchSpanProcessor and callable(getattr(queue, "emit", None)):
        return queue.emit  # type: ignore[union-attr]
    return processor.on_end  # type: ignore[return-value]


class LeanTracer(trace.Tracer):
    """Starts `LeanSpan`s, or non-recording spans for what the sampler leaves out, as the SDK's tracer does."""

    span_type = LeanSpan  # what it starts a kept span as (`telemetry.server` knows it by this, without the SDK)

    def __init__(
        self,
        sampler: Sampler,
        id_generator: IdGenerator,
        processor: BatchSpanProcessor,
        resource: Resource,
        scope: InstrumentationScope,
    ) -> None:
        self.sampler, self.id_generator, self.processor = sampler, id_generator, processor
        self.ended = _ended(processor)
        self.resource, self.scope = resource, scope
        self._random_ids = id_generator.is_trace_id_random()
        self._trace_id = id_generator.generate_trace_id
        # The SDK's own generator (not a subclass, which may draw otherwise): its ids are drawn here directly.
        self._sdk_ids = type(id_generator) is RandomIdGenerator
        self._decisions = _Decisions.of(sampler)  # None: the sampler is asked for every span

    def start_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        parent: SpanContext | None = _context.span_context(context)
        parent_trace_id, _, _, parent_flags, parent_state, valid = parent  # type: ignore[misc]  # SPAN_CONTEXT_FIELDS
        sdk_ids = self._sdk_ids
        if not valid:
            parent = None
            # The SDK's generator's ids, drawn as it draws them (`getrandbits`, again while zero), without its calls.
            trace_id = (random.getrandbits(128) or self._trace_id()) if sdk_ids else self._trace_id()
            random_id = self._random_ids
        else:
            trace_id = parent_trace_id
            random_id = bool(parent_flags & _RANDOM_TRACE_ID)
        decisions = self._decisions
        if decisions is not None:
            rule = decisions.root if parent is None else decisions.rule(parent)
            recording = rule is True or (rule is not False and trace_id & _LOW_64_BITS < rule)  # as `rule` says
            trace_state = parent_state if parent is not None else _NO_TRACE_STATE
            kept_attributes = attributes
        else:
            sampled = self.sampler.should_sample(context, trace_id, name, kind, attributes, links)
            recording = sampled.decision is Decision.RECORD_AND_SAMPLE
            trace_state, kept_attributes = sampled.trace_state or _NO_TRACE_STATE, sampled.attributes
        # As the SDK: the W3C "random trace id" flag when the root's generator makes random ids, else the parent's.
        flags = _FLAGS[recording, random_id]
        if sdk_ids:
            span_id = random.getrandbits(64) or self.id_generator.generate_span_id()
            span_valid = True  # both ids in range: drawn so, or the trace id of a valid parent
        else:
            span_id = self.id_generator.generate_span_id()
            span_valid = 0 < trace_id <= _MAX_TRACE_ID and 0 < span_id <= _MAX_SPAN_ID
        # What `SpanContext(...)` makes, without its Python-level `__new__` (a tenth of an unsampled trace's cost).
        span_context = tuple.__new__(SpanContext, (trace_id, span_id, False, flags, trace_state, span_valid))
        if not recording:  # RECORD_ONLY too: recorded but never exported, so nothing here would see it
            return NonRecordingSpan(span_context)
        if not kept_attributes:
            kept: dict[str, Any] = {}
        elif _PLAIN_TYPES.issuperset(map(type, kept_attributes.values())):  # nearly always: `_clean`'s test, inline
            kept = dict(kept_attributes)
        else:
            kept = _clean(kept_attributes)
        return LeanSpan(
            self,
            name,
            span_context,
            parent,
            kind,
            kept,
            tuple(links) if links else (),
            start_time if start_time is not None else time.time_ns(),
        )

    def start_root(self, name: str, kind: SpanKind, attributes: Mapping[str, Any] | None = None) -> trace.Span:
        """`start_span(name, Context(), kind, attributes)`: the root span of a new trace, for a caller that knows it
        has no parent (a server RPC whose caller sent no trace context, in an empty current context).

        Why: a root needs none of `start_span`'s parent look-ups, and with the SDK's own generator and sampler both
        ids come from one draw: `getrandbits(192)` gives the bits `getrandbits(128)` then `getrandbits(64)` give, in
        that order from the low end, so the ids are the ones the generator would draw. (A zero id, one draw in
        2**64, goes the general way.) A root left out is a `_context.LeftOutRoot` of those bits."""
        decisions = self._decisions
        if decisions is not None and self._sdk_ids:
            drawn = random.getrandbits(192)
            if drawn & _MAX_TRACE_ID and drawn >> 128:
                rule = decisions.root
                if rule is not True and (rule is False or drawn & _LOW_64_BITS >= rule):  # left out, as `rule` says
                    root = _new_span(_context.LeftOutRoot)
                    root.drawn = drawn
                    return root
                flags = _FLAGS[True, self._random_ids]
                trace_id, span_id = drawn & _MAX_TRACE_ID, drawn >> 128
                span_context = tuple.__new__(SpanContext, (trace_id, span_id, False, flags, _NO_TRACE_STATE, True))
                return LeanSpan(self, name, span_context, None, kind, _clean(attributes), (), time.time_ns())
        return self.start_span(name, _NO_PARENT, kind, attributes)

    def start_child(self, parent: Any, name: str, kind: SpanKind, attributes: dict[str, Any]) -> LeanSpan | None:
        """`start_span(name, trace.set_span_in_context(parent), kind, attributes)` for a `parent` span this tracer
        kept, when the sampler keeps every child of a kept local parent (the parent-based default) and the SDK's own
        generator draws the ids; None otherwise (start the span the general way). `attributes` is a new dict the
        span keeps (not copied again).

        Why: a kept trace's model call and HTTP attempt are children of the span just started, whose context is
        known: no context to look the parent up in, no rule to choose, one id to draw. Through `start_span` each of
        the two cost ~7 k instructions more (a kept served call's hooks, counted in a loop: 263 k -> 249 k;
        `bench/README.md`)."""
        if type(parent) is not LeanSpan or not self._sdk_ids:
            return None
        decisions = self._decisions
        if decisions is None or decisions.local_sampled is not True:
            return None
        trace_id, _, _, flags, trace_state, _ = parent.context  # `_context.SPAN_CONTEXT_FIELDS`
        span_id = random.getrandbits(64) or self.id_generator.generate_span_id()
        # As `start_span` makes it: the parent's trace id and trace state, both ids valid, and the flags
        # `_FLAGS[True, parent's "random" flag]`, which are the parent's own (a lean span is made only kept).
        context = tuple.__new__(SpanContext, (trace_id, span_id, False, flags, trace_state, True))
        if not _PLAIN_TYPES.issuperset(map(type, attributes.values())):
            attributes = _clean(attributes)
        return LeanSpan(self, name, context, parent.context, kind, attributes, (), time.time_ns())

    @_agnosticcontextmanager  # the API's own decorator: a context manager that also decorates
    def start_as_current_span(
        self,
        name: str,
        context: Any = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] | None = (),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current


class LeanTracerProvider(trace.TracerProvider):
    """A tracer provider of `LeanTracer`s: spans batched (`OTEL_BSP_*`) to `exporter`, sampled by `sampler`."""

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        sampler: Sampler,
        resource: Resource | None = None,
        id_generator: IdGenerator | None = None,
        processor: BatchSpanProcessor | None = None,
    ) -> None:
        """`processor`: a batch span processor of `exporter` made otherwise than from `OTEL_BSP_*`."""
        self.sampler = sampler
        self.resource = resource if resource is not None else Resource.create()
        self.id_generator = id_generator or RandomIdGenerator()
        self.processor = processor if processor is not None else BatchSpanProcessor(exporter)
        self._tracers: dict[tuple[str, str | None, str | None], LeanTracer] = {}
        self._lock = threading.Lock()

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> LeanTracer:
        key = (instrumenting_module_name, instrumenting_library_version, schema_url)
        with self._lock:
            tracer = self._tracers.get(key)
            if tracer is None:
                scope = InstrumentationScope(instrumenting_module_name, instrumenting_library_version, schema_url)
                tracer = self._tracers[key] = LeanTracer(
                    self.sampler, self.id_generator, self.processor, self.resource, scope
                )
        return tracer

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.processor.shutdown()
