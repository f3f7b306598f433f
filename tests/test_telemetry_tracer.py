"""modelir's lean tracer (`modelir.telemetry.tracer`) exports what the SDK's tracer would: the same calls traced by
both give the same spans once encoded for OTLP (names, kinds, parents, attributes, statuses, exception events,
flags), ids and times aside; and the tracer's own behaviour (sampling, status rules, the setup that picks it)."""

from __future__ import annotations

import random

import pytest
from modelir import build_request, errors, telemetry
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.telemetry import _context, setup, wire
from modelir.telemetry.tracer import LeanSpan, LeanTracerProvider
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    SamplingResult,
    StaticSampler,
    TraceIdRatioBased,
)
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tests.test_telemetry import upstream  # noqa: F401  (the fixture)

RESOURCE = Resource.create({"service.name": "modelir-test"})
# What changes from one run of the same calls to the next: the test servers' ports, the fake's request ids, timings.
_VARYING_ATTRIBUTES = frozenset(
    {
        "server.port",
        "url.full",
        "modelir.provider.request_id",
        "modelir.queue.duration",
        "gen_ai.response.time_to_first_chunk",
    }
)


async def _calls(model, port: int | None = None) -> None:
    """A chat, a stream, a retried call, a call failing after retries, and a user span with an exception; with a
    server, a remote call too (its server span, the model call inside and the HTTP attempt)."""
    fake = model._fake
    await model.achat([("user", "hi")], max_output_tokens=4, temperature=0.5)
    [_ async for _ in model.astream(build_request("mini", messages=[("user", "hi")]))]
    fake.fail_first = [503]
    await model.achat([("user", "again")])
    fake.fail_first = [500, 500, 500, 500, 500]
    with pytest.raises(errors.ModelError):
        await model.achat([("user", "fails")])
    fake.fail_first = []
    tracer = telemetry._runtime.tracer()
    with pytest.raises(ZeroDivisionError), tracer.start_as_current_span("user work", attributes={"n": [1, 2]}):
        1 / 0  # noqa: B018
    if port is not None:
        remote = RemoteModel(f"127.0.0.1:{port}", "mini")
        try:
            await remote.achat([("user", "through the server")])
        finally:
            await remote.aclose()


def _encoded(spans) -> list[dict]:
    """The spans as OTLP would carry them, ids replaced by their order of appearance, times left out."""
    request = encode_spans(spans)
    names = {
        bytes(span.span_id): span.name
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    }
    out = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                events = [
                    (e.name, sorted((a.key, str(a.value)) for a in e.attributes if a.key != "exception.stacktrace"))
                    for e in span.events
                ]
                out.append(
                    {
                        "scope": scope_spans.scope.name,
                        "name": span.name,
                        "kind": span.kind,
                        "parent": names.get(bytes(span.parent_span_id)) if span.parent_span_id else None,
                        "attributes": sorted(
                            (a.key, str(a.value)) for a in span.attributes if a.key not in _VARYING_ATTRIBUTES
                        ),
                        "status": (span.status.code, span.status.message),
                        "events": events,
                        "flags": span.flags,
                        "resource": sorted((a.key, str(a.value)) for a in resource_spans.resource.attributes),
                    }
                )
    return sorted(out, key=lambda s: (s["name"], s["attributes"]))


class _Captured(InMemorySpanExporter):
    pass


async def _traced(provider_factory, fake, model) -> list[dict]:
    exporter = _Captured()
    provider = provider_factory(exporter)
    telemetry.install(tracer_provider=provider)
    server, port = await build_server({"mini": model}, "127.0.0.1:0")
    await server.start()
    try:
        await _calls(model, port)
    finally:
        await server.stop(None)
        telemetry.install()
    provider.force_flush()
    spans = list(exporter.get_finished_spans())
    provider.shutdown()
    return _encoded(spans)


async def test_the_same_calls_give_the_same_spans_as_the_sdk(upstream):  # noqa: F811
    fake, model = upstream
    model._fake = fake

    def sdk(exporter):
        provider = TracerProvider(resource=RESOURCE, sampler=ALWAYS_ON)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return provider

    def lean(exporter):
        return LeanTracerProvider(exporter, sampler=ALWAYS_ON, resource=RESOURCE)

    expected = await _traced(sdk, fake, model)
    got = await _traced(lean, fake, model)
    assert len(expected) >= 12
    assert {s["name"] for s in expected} >= {"chat mini", "POST", "modelir.v1.ModelService/Generate", "user work"}
    assert any(s["events"] for s in expected) and any(s["status"][0] == StatusCode.ERROR.value + 0 for s in got)
    assert got == expected


def test_the_sampler_decides_and_a_left_out_span_only_carries_its_context():
    exported = _Captured()
    provider = LeanTracerProvider(exported, sampler=ParentBased(ALWAYS_OFF), resource=RESOURCE)
    tracer = provider.get_tracer("t")
    dropped = tracer.start_span("dropped")
    assert not dropped.is_recording() and dropped.get_span_context().is_valid
    assert not dropped.get_span_context().trace_flags.sampled
    assert dropped.get_span_context().trace_flags.random_trace_id  # as the SDK marks random trace ids
    dropped.end()
    kept = LeanTracerProvider(exported, sampler=TraceIdRatioBased(1.0), resource=RESOURCE).get_tracer("t")
    span = kept.start_span("kept", attributes={"a": 1})
    assert isinstance(span, LeanSpan) and span.get_span_context().trace_flags.sampled
    child = kept.start_span("child", context=trace.set_span_in_context(span))
    assert child.parent == span.get_span_context() and child.context.trace_id == span.context.trace_id
    provider.shutdown()


def test_ids_are_drawn_as_the_sdks_generator_draws_them(monkeypatch):
    """With the SDK's `RandomIdGenerator` the lean tracer draws ids itself: the same seed gives the same trace and
    span ids as the generator (a subclass is asked), and a zero draw is drawn again, as the generator does."""
    tracer = LeanTracerProvider(_Captured(), sampler=ALWAYS_ON, resource=RESOURCE).get_tracer("t")
    random.seed(17)
    drawn = [(span.context.trace_id, span.context.span_id) for span in (tracer.start_span("s") for _ in range(5))]
    random.seed(17)
    generator = RandomIdGenerator()
    assert drawn == [(generator.generate_trace_id(), generator.generate_span_id()) for _ in range(5)]

    class Counting(RandomIdGenerator):
        def generate_span_id(self) -> int:
            return 7

    counted = LeanTracerProvider(_Captured(), sampler=ALWAYS_ON, resource=RESOURCE, id_generator=Counting())
    assert counted.get_tracer("t").start_span("s").context.span_id == 7

    draws = iter([0, 5, 0, 9])  # a zero trace id, then a zero span id: each drawn again
    monkeypatch.setattr(random, "getrandbits", lambda bits: next(draws))
    span_context = tracer.start_span("s").get_span_context()
    assert (span_context.trace_id, span_context.span_id, span_context.is_valid) == (5, 9, True)


class _NamedIds(IdGenerator):
    """Trace ids the test chooses (the next one in `trace_ids`), span ids counting up."""

    def __init__(self) -> None:
        self.trace_ids: list[int] = []
        self.span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_ids.pop()

    def generate_span_id(self) -> int:
        self.span_id += 1
        return self.span_id


class _StateSampler(ParentBased):
    """A sampler of the user's own (its `should_sample` is not the SDK's): adds an attribute and a trace state."""

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
        decided = super().should_sample(parent_context, trace_id, name, kind, attributes, links)
        return SamplingResult(decided.decision, {**decided.attributes, "chosen": True}, TraceState([("mine", "1")]))


_SAMPLERS = [
    ALWAYS_ON,
    ALWAYS_OFF,
    StaticSampler(Decision.RECORD_ONLY),  # recorded, never exported: nothing to keep
    *(TraceIdRatioBased(r) for r in (0.0, 0.1, 0.5, 1.0)),
    ParentBased(ALWAYS_OFF),
    ParentBased(TraceIdRatioBased(0.1)),
    ParentBasedTraceIdRatio(0.25),  # what OTEL_TRACES_SAMPLER=parentbased_traceidratio makes
    ParentBased(ALWAYS_ON, remote_parent_not_sampled=ALWAYS_ON, local_parent_sampled=TraceIdRatioBased(0.5)),
    _StateSampler(ALWAYS_ON),
]
_STATE = TraceState([("vendor", "x")])
_PARENTS = [None] + [
    SpanContext(0xABC, 0xDEF, is_remote=remote, trace_flags=TraceFlags(flags), trace_state=_STATE)
    for remote in (True, False)
    for flags in (TraceFlags.SAMPLED, TraceFlags.DEFAULT, TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID)
]
# Low 64 bits below, at and above the bounds of the ratios above, and high bits that the ratio sampler ignores.
_TRACE_IDS = [1, (1 << 64) // 10 - 1, (1 << 64) // 10, (1 << 63), (1 << 64) - 1, (7 << 64) | 5, (1 << 128) - 1]


@pytest.mark.parametrize("sampler", _SAMPLERS, ids=lambda s: s.get_description())
def test_a_root_started_as_a_root_is_the_span_start_span_starts_in_an_empty_context(sampler, monkeypatch):
    """`start_root` draws both ids at once: from the same seed it gives the span `start_span` gives in an empty
    context (ids, decision, flags, trace state, attributes, kind); with a sampler it cannot decide itself, or a zero
    drawn, it is `start_span`."""
    tracer = LeanTracerProvider(_Captured(), sampler=sampler, resource=RESOURCE).get_tracer("t")
    attributes = {"rpc.method": "Generate", "stops": ["a", "b"]}  # a list, cleaned to a tuple as the SDK does
    kept = 0
    for seed in range(60):
        random.seed(seed)
        root = tracer.start_root("r", trace.SpanKind.SERVER, attributes)
        random.seed(seed)
        span = tracer.start_span("r", Context(), trace.SpanKind.SERVER, attributes)
        if isinstance(span, LeanSpan):
            assert type(root) is LeanSpan
        else:  # left out: a `LeftOutRoot` of the drawn bits, when the tracer decides and draws itself
            assert isinstance(root, NonRecordingSpan) and not root.is_recording()
            assert (type(root) is _context.LeftOutRoot) is (type(sampler) is not _StateSampler)
        assert tuple(root.get_span_context()) == tuple(span.get_span_context())  # ids, flags, trace state, validity
        assert tuple(_context.span_context(trace.set_span_in_context(root))) == tuple(span.get_span_context())
        if type(root) is _context.LeftOutRoot:  # its header, rendered from the bits, is what the propagator writes
            written: dict[str, str] = {}
            TraceContextTextMapPropagator().inject(written, trace.set_span_in_context(span))
            assert {"traceparent": wire.root_traceparent(root)} == written
        if isinstance(span, LeanSpan):
            kept += 1
            assert (root.name, root.kind, root.parent, root.attributes) == (span.name, span.kind, None, span.attributes)
    rate = getattr(getattr(sampler, "_root", sampler), "rate", None)  # the root's ratio, for the ratio samplers
    if rate is not None and 0 < rate < 1:
        assert 0 < kept < 60  # the seeds reach both decisions

    draws = iter([0, 5, 9])  # a zero trace id in the one draw: the ids are drawn again the general way
    monkeypatch.setattr(random, "getrandbits", lambda bits: next(draws))
    span_context = tracer.start_root("r", trace.SpanKind.SERVER).get_span_context()
    assert (span_context.trace_id, span_context.span_id, span_context.is_valid) == (5, 9, True)


@pytest.mark.parametrize("sampler", _SAMPLERS, ids=lambda s: s.get_description())
@pytest.mark.parametrize("parent_context", [None, *_PARENTS[1:]], ids=repr)
def test_a_child_started_directly_is_the_span_start_span_starts_under_its_parent(sampler, parent_context):
    """`start_child` makes the child of a kept lean span that `start_span` makes in that span's context (trace id,
    flags, trace state, parent, attributes cleaned as the SDK cleans them), from the same seed; it declines (None)
    whenever that could differ: a sampler whose rule for a kept local parent is not "keep", an id generator other
    than the SDK's, or a parent that is not a lean span."""
    tracer = LeanTracerProvider(_Captured(), sampler=sampler, resource=RESOURCE).get_tracer("t")
    outer = Context() if parent_context is None else trace.set_span_in_context(NonRecordingSpan(parent_context))
    parent = tracer.start_span("parent", outer, trace.SpanKind.SERVER)
    # Samplers that keep every child of a kept local parent: always-on, and the SDK's parent-based ones by default.
    always_kept = sampler is ALWAYS_ON or (
        type(sampler).should_sample is ParentBased.should_sample and sampler._local_parent_sampled is ALWAYS_ON
    )
    for seed in range(20):
        attributes = {"gen_ai.request.model": "mini", "stops": ["a", "b"]}  # a list: cleaned to a tuple
        random.seed(seed)
        child = tracer.start_child(parent, "child", trace.SpanKind.CLIENT, dict(attributes))
        random.seed(seed)
        span = tracer.start_span("child", trace.set_span_in_context(parent), trace.SpanKind.CLIENT, attributes)
        if not isinstance(parent, LeanSpan) or not always_kept:
            assert child is None
            continue
        assert type(child) is LeanSpan and type(span) is LeanSpan
        assert tuple(child.get_span_context()) == tuple(span.get_span_context())  # ids, flags, trace state
        assert (child.name, child.kind, child.parent) == (span.name, span.kind, span.parent)
        assert child.attributes == span.attributes
        assert child.attributes["stops"] == ("a", "b") and child.links == () and child.events == ()

    sdk_span = TracerProvider().get_tracer("t").start_span("sdk")
    assert tracer.start_child(sdk_span, "child", trace.SpanKind.CLIENT, {}) is None  # not a lean span
    named = _NamedIds()
    named.trace_ids = [0xABC]
    own_ids = LeanTracerProvider(_Captured(), sampler=sampler, id_generator=named).get_tracer("t")
    assert own_ids.start_child(own_ids.start_span("p", outer), "child", trace.SpanKind.CLIENT, {}) is None


@pytest.mark.parametrize("sampler", _SAMPLERS, ids=lambda s: s.get_description())
def test_a_span_is_kept_as_the_sampler_decides_with_its_attributes_and_trace_state(sampler):
    """The lean tracer decides the SDK's own samplers without calling them: for every parent kind and trace id, the
    same decision, flags, trace state and attributes as the sampler's `should_sample` gives (a sampler of the
    user's own is asked, and what it returns is kept)."""
    ids = _NamedIds()
    tracer = LeanTracerProvider(_Captured(), sampler=sampler, resource=RESOURCE, id_generator=ids).get_tracer("t")
    for parent in _PARENTS:
        context = None if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        for trace_id in [parent.trace_id] if parent is not None else _TRACE_IDS:
            ids.trace_ids = [trace_id]
            decided = sampler.should_sample(context, trace_id, "s", attributes={"a": 1})
            span = tracer.start_span("s", context, attributes={"a": 1})
            span_context = span.get_span_context()
            kept = decided.decision is Decision.RECORD_AND_SAMPLE
            where = (parent, hex(trace_id))
            assert isinstance(span, LeanSpan) is kept and span_context.trace_flags.sampled is kept, where
            assert span_context.trace_id == trace_id, where
            flags, state = span_context.trace_flags, span_context.trace_state
            remade = SpanContext(trace_id, span_context.span_id, False, flags, state)
            assert tuple(span_context) == tuple(remade), where  # made as `SpanContext` makes it, validity included
            assert span_context.trace_state == (decided.trace_state or TraceState()), where
            if kept:
                assert span.attributes == dict(decided.attributes), where


@pytest.mark.parametrize(
    "value",
    [("stop",), ["a", "b"], (1, 2), [True], (0.5, 1.5), (), [], ("a", 1), [None], [b"x"], [["nested"]], {"k": 1}, b"x"],
)
def test_a_value_is_cleaned_as_the_sdk_cleans_it(value):
    from modelir.telemetry.tracer import _clean, _clean_value
    from opentelemetry.attributes import _clean_attribute_value

    assert _clean_value(value) == _clean_attribute_value(value, None)
    assert _clean({"plain": 1, "v": value}) == {"plain": 1, "v": _clean_attribute_value(value, None)}


def test_status_rules_and_an_ended_span_are_the_sdks():
    exported = _Captured()
    provider = LeanTracerProvider(exported, sampler=ALWAYS_ON, resource=RESOURCE)
    span = provider.get_tracer("t").start_span("s")
    span.set_status(StatusCode.UNSET)  # ignored
    assert span.status.status_code is StatusCode.UNSET
    span.set_status(StatusCode.OK)
    span.set_status(StatusCode.ERROR, "later")  # OK is final
    assert span.status.status_code is StatusCode.OK
    span.set_attribute("odd", {"k": 1})  # a value of another type is cleaned as the SDK cleans it
    span.end()
    span.set_attribute("after", 1)  # an ended span takes nothing more
    span.end()  # nor ends twice
    provider.force_flush()
    (finished,) = exported.get_finished_spans()
    assert "after" not in finished.attributes and finished.attributes["odd"] == {"k": 1}
    provider.shutdown()


def test_the_setup_traces_with_lean_spans_for_otlp_and_with_the_sdk_for_the_console(monkeypatch):
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    otlp = setup.build_from_env(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none"}, default_sampler_ratio=0.1
    )
    console = setup.build_from_env({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"})
    try:
        assert isinstance(otlp.tracer_provider, LeanTracerProvider)
        assert "TraceIdRatioBased{0.1}" in otlp.tracer_provider.sampler.get_description()
        assert isinstance(console.tracer_provider, TracerProvider)
    finally:
        otlp.shutdown()
        console.shutdown()


def test_an_ended_span_reaches_the_batch_queue_or_a_processors_own_on_end():
    """A lean span ends straight into the SDK batch processor's queue (it was sampled: `on_end` would only check
    that), and into `on_end` of any other processor, a batch processor's subclass included."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exported = InMemorySpanExporter()
    provider = LeanTracerProvider(exported, sampler=ALWAYS_ON, resource=RESOURCE)
    provider.get_tracer("t").start_span("queued").end()
    provider.force_flush()
    assert [span.name for span in exported.get_finished_spans()] == ["queued"]

    class Counting(BatchSpanProcessor):
        def on_end(self, span) -> None:
            ended.append(span.name)
            super().on_end(span)

    ended: list[str] = []
    counted = InMemorySpanExporter()
    provider = LeanTracerProvider(counted, sampler=ALWAYS_ON, resource=RESOURCE, processor=Counting(counted))
    provider.get_tracer("t").start_span("counted").end()
    provider.force_flush()
    assert ended == ["counted"] and [span.name for span in counted.get_finished_spans()] == ["counted"]
    provider.shutdown()
