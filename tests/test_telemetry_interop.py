"""modelir's spans are the OpenTelemetry SDK's, on every path: a user's span processor sees each start and end, a
sampler that does not defer to the parent is asked about every child span, span limits bound every attribute,
`suppress_instrumentation` suppresses, and `modelir serve`'s setup joins providers already installed (as
`opentelemetry-instrument` installs them) instead of building its own."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from grpc_health.v1 import health_pb2_grpc
from modelir import build_request, errors, telemetry
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.server.app import add_model_service
from modelir.server.servicer import ModelServicer
from modelir.telemetry import setup
from opentelemetry import context as otel_context
from opentelemetry import metrics as metrics_api
from opentelemetry import trace
from opentelemetry import trace as trace_api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Decision, ParentBased, Sampler, SamplingResult

from tests.otlp_receiver import OtlpReceiver
from tests.test_telemetry import upstream  # noqa: F401  (a fixture)

RPC = "modelir.v1.ModelService/Generate"


class _Seen(SpanProcessor):
    """A user's span processor: the names of the spans it saw start and end."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ended: list[str] = []

    def on_start(self, span, parent_context=None) -> None:
        self.started.append(span.name)

    def on_end(self, span) -> None:
        self.ended.append(span.name)


class _KeepAllButTheRoot(Sampler):
    """A sampler that does not defer to the parent: it drops the spans named `dropped` and keeps every other one,
    whatever its parent decided, and remembers what it was asked about."""

    def __init__(self, dropped: str) -> None:
        self.dropped, self.asked = dropped, []

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
        self.asked.append(name)
        decision = Decision.DROP if name == self.dropped else Decision.RECORD_AND_SAMPLE
        return SamplingResult(decision, attributes if decision is Decision.RECORD_AND_SAMPLE else None)

    def get_description(self) -> str:
        return "KeepAllButTheRoot"


async def _through_a_server(model, *, stream: bool = True) -> None:
    """One unary and one streamed RPC through a modelir gRPC server of `model`, from a caller with no trace context."""
    server, port = await build_server({"mini": model}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "mini")
    try:
        await remote.achat([("user", "hi")])
        if stream:
            [_ async for _ in remote.astream(build_request("mini", messages=[("user", "hi")]))]
    finally:
        await server.stop(None)


async def test_a_users_span_processor_sees_every_modelir_span_start_and_end_under_modelir_serves_setup(
    upstream,  # noqa: F811
    monkeypatch,
):
    """`modelir serve`'s setup (OTLP traces, every trace kept) builds an SDK tracer provider: a processor the user
    adds to it sees the RPC's, the model call's and the HTTP attempt's spans start and end."""
    _fake, model = upstream
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    async with OtlpReceiver() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        installed = setup.build_from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        assert installed is not None
        seen = _Seen()
        installed.tracer_provider.add_span_processor(seen)  # type: ignore[union-attr]
        telemetry.install(tracer_provider=installed.tracer_provider)
        try:
            await _through_a_server(model)
        finally:
            telemetry.install()
            await asyncio.to_thread(installed.shutdown)
    assert sorted(seen.started) == sorted(seen.ended)
    # The RemoteModel's calls and the server's model calls are both `chat mini`.
    assert seen.started.count(RPC) == 1 and seen.started.count("chat mini") == 4 and seen.started.count("POST") == 2


async def test_a_sampler_that_does_not_defer_to_the_parent_is_asked_about_every_child(upstream):  # noqa: F811
    """Under a parent the sampler dropped (the user's own root, or a served RPC's), modelir's child spans are still
    started through the tracer: a sampler that keeps them regardless of the parent keeps them."""
    _fake, model = upstream
    for dropped in ("user root", RPC):
        sampler = _KeepAllButTheRoot(dropped)
        spans = InMemorySpanExporter()
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(SimpleSpanProcessor(spans))
        telemetry.install(tracer_provider=provider)
        try:
            if dropped == RPC:
                await _through_a_server(model, stream=False)
            else:
                with provider.get_tracer("user").start_as_current_span(dropped):
                    await model.achat([("user", "hi")])
                    [_ async for _ in model.astream(build_request("mini", messages=[("user", "hi")]))]
        finally:
            telemetry.install()
        kept = sorted(s.name for s in spans.get_finished_spans())
        assert dropped in sampler.asked and dropped not in kept
        assert {"chat mini", "POST"} <= set(sampler.asked), dropped
        assert kept.count("chat mini") >= 1 and kept.count("POST") >= 1, dropped


async def test_suppress_instrumentation_suppresses_modelirs_spans(upstream):  # noqa: F811
    """What `opentelemetry.instrumentation.utils.suppress_instrumentation()` sets (and the SDK's exporters set
    around their own sends) leaves modelir's calls without spans; the metrics still count them."""
    fake, model = upstream
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry.install(tracer_provider=provider, meter_provider=MeterProvider(metric_readers=[reader]))
    token = otel_context.attach(otel_context.set_value(otel_context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        await model.achat([("user", "hi")])
        [_ async for _ in model.astream(build_request("mini", messages=[("user", "hi")]))]
    finally:
        otel_context.detach(token)
        telemetry.install()
    assert spans.get_finished_spans() == ()
    assert "traceparent" not in fake.requests[0][0]
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "gen_ai.client.operation.duration" in names


async def test_http_suppression_leaves_out_the_attempt_spans_only(upstream):  # noqa: F811
    _fake, model = upstream
    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.install(tracer_provider=provider)
    token = otel_context.attach(otel_context.set_value(otel_context._SUPPRESS_HTTP_INSTRUMENTATION_KEY, True))
    try:
        await model.achat([("user", "hi")])
    finally:
        otel_context.detach(token)
        telemetry.install()
    assert [s.name for s in spans.get_finished_spans()] == ["chat mini"]


async def test_span_limits_bound_a_captured_prompt_and_a_big_one_loses_no_other_span(upstream, monkeypatch):  # noqa: F811
    """`modelir serve`'s OTLP export applies the span limits: a 4.5 MB prompt, content capture on, is cut to the
    attribute value length limit, so the batch fits the receiver's 4 MiB message limit and every span arrives
    (another call's included)."""
    _fake, model = upstream
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1000")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "60000")  # one batch, sent by the flush below
    async with OtlpReceiver() as receiver:
        environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
        installed = setup.build_from_env(environ)
        assert installed is not None
        telemetry.install(tracer_provider=installed.tracer_provider, capture_content=True)
        try:
            with pytest.raises(errors.ProviderRejectedError):  # the fake provider takes at most 1 MiB
                await model.achat([("user", "x" * 4_500_000)])
            await model.achat([("user", "hi")])
        finally:
            telemetry.install()
            assert await asyncio.to_thread(installed.tracer_provider.force_flush)  # type: ignore[union-attr]
            await asyncio.to_thread(installed.shutdown)
    names = sorted(span.name for _, span in receiver.spans)
    assert names == ["POST", "POST", "chat mini", "chat mini"]
    for _, span in receiver.spans:
        for attribute in span.attributes:
            assert len(attribute.value.string_value) <= 1000


@pytest.fixture
def no_global_providers(monkeypatch):
    """The API's global providers as in a fresh process; whatever a test installs is undone after it."""
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER_SET_ONCE", type(trace_api._TRACER_PROVIDER_SET_ONCE)())
    monkeypatch.setattr(metrics_api._internal, "_METER_PROVIDER", None)
    monkeypatch.setattr(
        metrics_api._internal, "_METER_PROVIDER_SET_ONCE", type(metrics_api._internal._METER_PROVIDER_SET_ONCE)()
    )
    yield
    telemetry.install()


async def test_modelir_serves_setup_joins_the_providers_already_installed(
    upstream,  # noqa: F811
    no_global_providers,
    monkeypatch,
    caplog,
):
    """With an SDK tracer and meter provider installed (as `opentelemetry-instrument` installs them), `modelir
    serve`'s setup builds neither: modelir's spans and metrics go to the installed ones, whose sampler decides,
    and a warning says the 10% default does not apply."""
    _fake, model = upstream
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(sampler=ParentBased(ALWAYS_ON))
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    trace.set_tracer_provider(tracer_provider)
    metrics_api.set_meter_provider(MeterProvider(metric_readers=[reader]))
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "otlp"}
    with caplog.at_level(logging.WARNING, "modelir.telemetry.setup"):
        installed = setup.configure_from_env(environ, default_sampler_ratio=setup.SERVER_SAMPLER_RATIO)
    try:
        assert installed is not None
        assert (installed.tracer_provider, installed.meter_provider) == (None, None)
        assert installed.joined_tracer_provider is tracer_provider
        assert trace.get_tracer_provider() is tracer_provider
        assert "its sampler decides" in caplog.text
        await _through_a_server(model, stream=False)
    finally:
        installed.shutdown()  # type: ignore[union-attr]
    # Every trace, as it samples: the call's, and the server's span of the IR check RemoteModel makes first.
    served = {RPC, "chat mini", "POST", "modelir.v1.ModelService/GetServerInfo"}
    assert {s.name for s in spans.get_finished_spans()} == served
    names = {m.name for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"gen_ai.client.operation.duration", "gen_ai.server.request.duration"} <= names


class _BrokenHealth(health_pb2_grpc.HealthServicer):
    """A health service broken as a misbehaving instrumentation breaks it: every check fails."""

    async def Check(self, request, context):
        await context.abort(grpc.StatusCode.INTERNAL, "instrumentation broke the health service")

    async def Watch(self, request, context):
        await context.abort(grpc.StatusCode.INTERNAL, "instrumentation broke the health service")


async def test_a_remote_model_works_against_a_server_whose_health_service_fails(upstream):  # noqa: F811
    _fake, model = upstream
    server = grpc.aio.server()
    add_model_service(ModelServicer({"mini": model}), server)
    health_pb2_grpc.add_HealthServicer_to_server(_BrokenHealth(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        remote = RemoteModel(f"127.0.0.1:{port}", "mini")
        answer = await asyncio.wait_for(remote.achat([("user", "hi")]), 10)
    finally:
        await server.stop(None)
    assert answer.choices[0].message.parts
