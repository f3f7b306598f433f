"""Telemetry with the SDK's in-memory span exporter and metric reader: every attribute and metric of a success, a
soft error, a hard failure after retries, a stream and a rejection; propagation through the server; provenance;
the access log; and that nothing is done when nothing is configured."""

from __future__ import annotations

import io
import json

import orjson
import pytest
from modelir import ReferenceModel, build_request, errors, telemetry
from modelir.batch import run_batch
from modelir.calls import streaming
from modelir.config import build_config
from modelir.model import Model
from modelir.records.files import read_records
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.telemetry import access_log as access_log_module
from modelir.telemetry import calls, setup
from modelir.v1 import errors_pb2, record_pb2
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.fake_openai import ANSWER, FakeOpenAI


class Otel:
    def __init__(self, capture_content: bool = False) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        telemetry.install(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, capture_content=capture_content
        )

    def finished(self, name: str | None = None) -> list:
        return [s for s in self.spans.get_finished_spans() if name is None or s.name == name]

    def points(self, metric: str) -> list:
        data = self.reader.get_metrics_data()
        found = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for m in scope_metrics.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found


@pytest.fixture
def otel():
    yield Otel()
    telemetry.install()


@pytest.fixture
async def upstream():
    async with FakeOpenAI() as fake:
        config = build_config(
            {
                "models": {
                    "mini": {"transport": "openai_chat", "base_url": fake.base_url, "provider_model": "gpt-4o-mini"}
                }
            },
            source="test.yaml",
            environ={},
        )
        yield fake, config.models["mini"]
        await config.aclose()


def _common(fake) -> dict:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "mini",
        "server.address": "127.0.0.1",
        "server.port": fake.port,
    }


async def test_success_every_attribute_and_metric(otel, upstream):
    fake, model = upstream
    fake.body_override = {
        "id": "chatcmpl-cached",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini-2024",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 9,
            "total_tokens": 29,
            "prompt_tokens_details": {"cached_tokens": 12},
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }
    request = build_request(
        "mini", messages=[("user", "hi")], max_output_tokens=10, temperature=0.5, top_p=0.9, stop=["\n"], seed=7
    )
    request.sampling.presence_penalty = 0.25
    request.sampling.frequency_penalty = 0.5
    await model.arun(request)

    (call,) = otel.finished("chat mini")
    assert call.kind == SpanKind.CLIENT and call.parent is None
    assert call.status.status_code == StatusCode.UNSET
    assert dict(call.attributes) == {
        **_common(fake),
        "modelir.transport": "openai_chat",
        "gen_ai.request.max_tokens": 10,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ("\n",),
        "gen_ai.request.seed": 7,
        "gen_ai.request.presence_penalty": 0.25,
        "gen_ai.request.frequency_penalty": 0.5,
        "gen_ai.response.id": "chatcmpl-cached",
        "gen_ai.response.model": "gpt-4o-mini-2024",
        "gen_ai.response.finish_reasons": ("length",),
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 9,
        "gen_ai.usage.cache_read.input_tokens": 12,
        "gen_ai.usage.reasoning.output_tokens": 5,
        "modelir.attempt_count": 1,
        "modelir.queue.duration": pytest.approx(call.attributes["modelir.queue.duration"]),
    }
    assert "gen_ai.input.messages" not in call.attributes  # content capture is off by default

    (attempt,) = otel.finished("POST")
    assert attempt.parent.span_id == call.context.span_id and attempt.kind == SpanKind.CLIENT
    assert dict(attempt.attributes) == {
        "http.request.method": "POST",
        "server.address": "127.0.0.1",
        "server.port": fake.port,
        "url.full": f"{fake.base_url}/chat/completions",
        "http.response.status_code": 200,
        "modelir.provider.request_id": "req-fake-1",
    }
    # The provider saw the attempt's span as its parent.
    headers, _ = fake.requests[0]
    trace_id = trace.format_trace_id(call.context.trace_id)
    version, sent_trace, sent_parent, flags = headers["traceparent"].split("-")
    assert (version, sent_trace, sent_parent) == ("00", trace_id, trace.format_span_id(attempt.context.span_id))
    assert int(flags, 16) & 1  # sampled

    metric_attributes = {**_common(fake), "gen_ai.response.model": "gpt-4o-mini-2024"}
    tokens = {p.attributes["gen_ai.token.type"]: p for p in otel.points("gen_ai.client.token.usage")}
    assert tokens["input"].sum == 20 and tokens["output"].sum == 9
    assert dict(tokens["input"].attributes) == {**metric_attributes, "gen_ai.token.type": "input"}
    assert tokens["input"].explicit_bounds[:3] == (1, 4, 16)  # the conventions' advised buckets
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert dict(duration.attributes) == metric_attributes and duration.count == 1
    assert 0 < duration.sum < 10
    (queued,) = otel.points("modelir.client.limiter.queue.duration")
    assert queued.count == 1 and dict(queued.attributes) == metric_attributes
    assert otel.points("modelir.client.retries") == []
    assert otel.points("modelir.client.soft_errors") == []
    assert otel.points("gen_ai.client.operation.time_to_first_chunk") == []  # only for streams


async def test_retries_show_as_attempt_spans_and_a_counter(otel, upstream):
    fake, model = upstream
    fake.fail_first = [429, 503]
    await model.achat([("user", "hi")])
    (call,) = otel.finished("chat mini")
    attempts = sorted(otel.finished("POST"), key=lambda s: s.start_time)
    assert [a.attributes["http.response.status_code"] for a in attempts] == [429, 503, 200]
    assert [a.attributes.get("http.request.resend_count") for a in attempts] == [None, 1, 2]
    assert [a.attributes.get("error.type") for a in attempts] == ["429", "503", None]
    assert all(a.parent.span_id == call.context.span_id for a in attempts)
    assert call.attributes["modelir.attempt_count"] == 3
    (retries,) = otel.points("modelir.client.retries")
    assert retries.value == 2


async def test_hard_failure_after_retries(otel, upstream):
    fake, model = upstream
    fake.fail_first = [503, 503, 503, 503]
    with pytest.raises(errors.ProviderUnavailableError):
        await model.achat([("user", "hi")])
    (call,) = otel.finished("chat mini")
    assert call.status.status_code == StatusCode.ERROR
    assert call.attributes["error.type"] == "PROVIDER_UNAVAILABLE"
    assert "gen_ai.response.id" not in call.attributes and "gen_ai.usage.input_tokens" not in call.attributes
    assert [e.name for e in call.events] == ["exception"]
    attempts = otel.finished("POST")
    assert len(attempts) == 4 and {a.attributes["error.type"] for a in attempts} == {"503"}
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert dict(duration.attributes) == {**_common(fake), "error.type": "PROVIDER_UNAVAILABLE"}
    (retries,) = otel.points("modelir.client.retries")
    assert retries.value == 3
    assert otel.points("gen_ai.client.token.usage") == []


def _answer(input_tokens: int | None, queued: float | None):
    """An answer of one choice whose input count and queue time are as given (None: not reported)."""
    from modelir.v1 import response_pb2

    response = response_pb2.Response(model="gpt-4o-mini")
    response.choices.add()
    if input_tokens is not None:
        response.usage.input_token_count = input_tokens
    if queued is not None:
        response.timing.queue_duration.FromNanoseconds(int(queued * 1e9))
    return response


def test_a_count_reported_as_zero_is_measured_and_one_not_reported_is_not(otel, upstream):
    """Token counts and the queue time: zero when the answer says zero, left out when it says nothing (as the span
    leaves out the usage it was not told)."""

    _, model = upstream
    request = build_request("mini", messages=[("user", "hi")])
    for input_tokens, queued in ((0, 0.0), (None, None), (7, 0.25)):
        with calls.model_call(model, request) as call:
            call.finish(_answer(input_tokens, queued))
    (input_tokens,) = [
        p for p in otel.points("gen_ai.client.token.usage") if p.attributes["gen_ai.token.type"] == "input"
    ]
    assert (input_tokens.count, input_tokens.sum) == (2, 7)  # the zero and the seven, not the unreported one
    assert not [p for p in otel.points("gen_ai.client.token.usage") if p.attributes["gen_ai.token.type"] == "output"]
    (queued,) = otel.points("modelir.client.limiter.queue.duration")
    assert (queued.count, queued.sum) == (2, 0.25)
    spans = otel.finished("chat mini")
    assert [s.attributes.get("gen_ai.usage.input_tokens") for s in spans] == [0, None, 7]


async def test_soft_error_of_a_cut_stream(otel, upstream):
    fake, model = upstream
    fake.cut_stream = True
    events = [e async for e in model.astream(build_request("mini", messages=[("user", "hi")]))]
    assert events[-1].end.errors[0].reason  # the partial output came back with its soft error
    (call,) = otel.finished("chat mini")
    assert call.status.status_code == StatusCode.ERROR
    assert call.attributes["error.type"] == "TRUNCATED_STREAM"
    assert call.attributes["gen_ai.request.stream"] is True
    (soft,) = otel.points("modelir.client.soft_errors")
    assert soft.value == 1 and soft.attributes["modelir.error.reason"] == "TRUNCATED_STREAM"
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "TRUNCATED_STREAM"


async def test_stream_span_time_to_first_chunk_and_usage(otel, upstream):
    fake, model = upstream
    events = [e async for e in model.astream(build_request("mini", messages=[("user", "hi")]))]
    assert "".join(e.delta.text for e in events if e.WhichOneof("event") == "delta") == "".join(ANSWER)
    (call,) = otel.finished("chat mini")
    attributes = dict(call.attributes)
    first_chunk = attributes.pop("gen_ai.response.time_to_first_chunk")
    attributes.pop("modelir.queue.duration")
    assert attributes == {
        **_common(fake),
        "modelir.transport": "openai_chat",
        "gen_ai.request.stream": True,
        "gen_ai.response.id": "chatcmpl-fake",
        "gen_ai.response.model": "gpt-4o-mini",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": len(ANSWER),
        "modelir.attempt_count": 1,
    }
    (attempt,) = otel.finished("POST")
    assert attempt.parent.span_id == call.context.span_id
    assert 0 < first_chunk <= (call.end_time - call.start_time) / 1e9
    (ttfc,) = otel.points("gen_ai.client.operation.time_to_first_chunk")
    assert ttfc.count == 1 and ttfc.sum == pytest.approx(first_chunk)
    # The stream's span never became the consumer's current span.
    assert not trace.get_current_span().get_span_context().is_valid


async def test_stream_stopped_early_ends_its_span_without_an_error(otel, upstream):
    _, model = upstream
    stream = model.astream(build_request("mini", messages=[("user", "hi")]))
    async for event in stream:
        if event.WhichOneof("event") == "delta":
            break
    await stream.aclose()
    (call,) = otel.finished("chat mini")
    assert call.status.status_code == StatusCode.UNSET and "error.type" not in call.attributes
    assert not trace.get_current_span().get_span_context().is_valid


async def test_rejection_before_any_io(otel, upstream):
    fake, model = upstream
    request = build_request("mini", prompt="The cat", max_output_tokens=0)
    request.input_scoring.continuations.add(text=" sat")
    with pytest.raises(errors.UnsupportedCapabilityError) as caught:
        await model.arun(request)
    assert fake.requests == [] and otel.finished("POST") == []
    (call,) = otel.finished("text_completion mini")
    assert call.attributes["error.type"] == "UNSUPPORTED_CAPABILITY"
    assert call.status.status_code == StatusCode.ERROR
    rejected = {p.attributes["modelir.capability"]: p.value for p in otel.points("modelir.client.rejections")}
    assert rejected and set(rejected.values()) == {1}
    missing = calls._capability_names(caught.value.unsupported)
    assert sorted(rejected) == sorted(missing) and "INPUT_SCORING" in " ".join(missing)


async def test_in_process_model_is_an_internal_span_with_its_usage(otel):
    model = Model(ReferenceModel(), name="ref")
    response = await model.agenerate("Hello", max_output_tokens=4)
    (call,) = otel.finished("text_completion ref")
    assert call.kind == SpanKind.INTERNAL
    assert call.attributes["gen_ai.provider.name"] == "modelir.reference"
    assert "server.address" not in call.attributes
    assert call.attributes["gen_ai.usage.output_tokens"] == response.usage.output_token_count


async def test_content_capture_attributes(upstream):
    otel = Otel(capture_content=True)
    try:
        _, model = upstream
        await model.achat([("system", "Be brief."), ("user", "hi")])
        [_ async for _ in model.astream(build_request("mini", messages=[("user", "again")]))]
    finally:
        telemetry.install()
    unary, streamed = sorted(otel.finished("chat mini"), key=lambda s: s.start_time)
    assert json.loads(unary.attributes["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(unary.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}
    ]
    expected_output = [
        {"role": "assistant", "parts": [{"type": "text", "content": "".join(ANSWER)}], "finish_reason": "stop"}
    ]
    assert json.loads(unary.attributes["gen_ai.output.messages"]) == expected_output
    assert json.loads(streamed.attributes["gen_ai.output.messages"]) == expected_output


async def test_nothing_configured_costs_nothing(upstream):
    telemetry.install()
    fake, model = upstream
    request = build_request("mini", messages=[("user", "hi")])
    assert calls.model_call(model, request) is calls.NO_CALL
    events = streaming.stream_batches(model, request, None)
    assert calls.stream_call(model, request, events) is events
    await events.aclose()
    await model.arun(request)
    assert "traceparent" not in fake.requests[0][0]


def test_the_hooks_follow_the_global_providers_as_they_are_set_and_unset(monkeypatch):
    """`hooks()` keeps its answer only while the providers it resolved are the ones in effect: a global provider set,
    replaced or taken away is seen at the next call."""
    import opentelemetry.metrics._internal as metrics_api
    import opentelemetry.trace as trace_api
    from modelir.telemetry import _runtime
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    telemetry.install()
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(metrics_api, "_METER_PROVIDER", None)
    assert _runtime.hooks() is None
    first, second = TracerProvider(), TracerProvider()
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", first)
    hooks = _runtime.hooks()
    assert hooks is not None and hooks.tracer is not None and hooks.instruments is None
    traced_by = hooks.tracer
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", second)
    assert _runtime.hooks().tracer is not traced_by  # type: ignore[union-attr]
    monkeypatch.setattr(metrics_api, "_METER_PROVIDER", MeterProvider())
    assert _runtime.hooks().instruments is not None  # type: ignore[union-attr]
    monkeypatch.setattr(trace_api, "_TRACER_PROVIDER", None)
    hooks = _runtime.hooks()
    assert hooks is not None and hooks.tracer is None and hooks.instruments is not None
    monkeypatch.setattr(metrics_api, "_METER_PROVIDER", None)
    assert _runtime.hooks() is None


async def test_record_provenance_carries_the_trace_and_the_provider_request_id(otel, upstream, tmp_path):
    _, model = upstream
    inputs = [("a", build_request("mini", messages=[("user", "hi")]))]
    await run_batch(model, inputs, tmp_path / "out.jsonl", progress_stream=io.StringIO())
    (record,) = list(read_records(tmp_path / "out.jsonl"))
    assert record.status == record_pb2.RECORD_STATUS_OK
    (call,) = otel.finished("chat mini")
    assert record.provenance.trace_id == trace.format_trace_id(call.context.trace_id)
    assert record.provenance.span_id == trace.format_span_id(call.context.span_id)
    assert record.provenance.provider_request_id == "req-fake-1"


async def test_provider_request_id_is_kept_without_tracing(upstream, tmp_path):
    telemetry.install()
    _, model = upstream
    inputs = [("a", build_request("mini", messages=[("user", "hi")]))]
    await run_batch(model, inputs, tmp_path / "out.jsonl", progress_stream=io.StringIO())
    (record,) = list(read_records(tmp_path / "out.jsonl"))
    assert record.provenance.provider_request_id == "req-fake-1"
    assert record.provenance.trace_id == "" and record.provenance.span_id == ""


async def test_client_context_continues_through_the_server_to_the_provider(otel, upstream):
    fake, model = upstream
    lines = io.BytesIO()
    access_log_module.configure("json", lines)
    server, port = await build_server({"mini": model}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "mini")
    tracer = otel.tracer_provider.get_tracer("test")
    try:
        with tracer.start_as_current_span("client work") as root:
            await remote.achat([("user", "hi")])
            [_ async for _ in remote.astream(build_request("mini", messages=[("user", "hi")]))]
    finally:
        await remote.aclose()
        await server.stop(None)
        access_log_module.access_log().flush()
        access_log_module.configure()
    trace_id = root.get_span_context().trace_id
    spans = otel.finished()
    assert {s.context.trace_id for s in spans} == {trace_id}, [(s.name, s.context.trace_id == trace_id) for s in spans]
    by_id = {s.context.span_id: s for s in spans}

    def chain(span) -> list[str]:
        names = [span.name]
        while span.parent is not None:
            span = by_id[span.parent.span_id]
            names.append(span.name)
        return names

    for method in ("Generate", "StreamGenerate"):
        (server_span,) = otel.finished(f"modelir.v1.ModelService/{method}")
        assert server_span.kind == SpanKind.SERVER and server_span.parent.is_remote
        assert server_span.attributes["rpc.grpc.status_code"] == 0
        (attempt,) = [s for s in otel.finished("POST") if chain(s)[2] == server_span.name]
        assert chain(attempt) == ["POST", "chat mini", server_span.name, "chat mini", "client work"]
        assert by_id[attempt.parent.span_id].kind == SpanKind.CLIENT
    remote_spans = [s for s in otel.finished("chat mini") if s.attributes["gen_ai.provider.name"] == "modelir"]
    assert len(remote_spans) == 2 and remote_spans[0].attributes["server.port"] == port
    assert all(h["traceparent"].split("-")[1] == trace.format_trace_id(trace_id) for h, _ in fake.requests)

    logged = [orjson.loads(line) for line in lines.getvalue().splitlines()]
    generate = next(line for line in logged if line["method"] == "Generate")
    assert generate["trace_id"] == trace.format_trace_id(trace_id)
    assert {k: generate[k] for k in ("model", "transport", "status", "input_tokens", "output_tokens")} == {
        "model": "mini",
        "transport": "openai_chat",
        "status": "OK",
        "input_tokens": 7,
        "output_tokens": len(ANSWER),
    }
    assert generate["latency_ms"] > 0


async def test_access_log_text_and_json_lines_have_the_same_fields():
    text, data = io.BytesIO(), io.BytesIO()
    for fmt, out in (("text", text), ("json", data)):
        log = access_log_module.AccessLog(out, fmt=fmt)
        log.write("Generate", "mini", "openai_chat", "OK", 0.0123, 7, 4, "ab" * 16)
        log.write("Generate", "mini", "-", "NOT_FOUND", 0.001)
        assert out.getvalue() == b""  # buffered until flushed
        log.flush()
    first, second = text.getvalue().decode().splitlines()
    assert first.endswith(
        "INFO modelir.access Generate model=mini transport=openai_chat status=OK latency_ms=12.3 "
        f"input_tokens=7 output_tokens=4 trace_id={'ab' * 16}"
    )
    assert second.endswith("status=NOT_FOUND latency_ms=1.0 input_tokens=- output_tokens=- trace_id=-")
    one, two = (orjson.loads(line) for line in data.getvalue().splitlines())
    assert {k: v for k, v in one.items() if k != "time"} == {
        "method": "Generate",
        "model": "mini",
        "transport": "openai_chat",
        "status": "OK",
        "latency_ms": 12.3,
        "input_tokens": 7,
        "output_tokens": 4,
        "trace_id": "ab" * 16,
    }
    assert two["trace_id"] is None and two["input_tokens"] is None
    off = io.BytesIO()
    quiet = access_log_module.AccessLog(off, fmt="off")
    quiet.write("Generate", "mini", "-", "OK", 0.1)
    quiet.flush()
    assert off.getvalue() == b""
    with pytest.raises(ValueError, match="access log format"):
        access_log_module.AccessLog(off, fmt="xml")


async def test_access_log_flushes_when_the_buffer_is_full():
    out = io.BytesIO()
    log = access_log_module.AccessLog(out, max_buffered_bytes=300)
    for _ in range(3):
        log.write("Generate", "mini", "openai_chat", "OK", 0.01)
    assert out.getvalue().count(b"\n") >= 2


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_nothing_is_exported_unless_configured(environ, wanted):
    assert setup.requested(environ) is wanted
    if not wanted:
        assert setup.configure_from_env(environ) is None


def test_bad_exporter_settings_name_the_variable():
    with pytest.raises(setup.TelemetrySetupError, match="OTEL_TRACES_EXPORTER='zipkin'"):
        setup._exporter_names({"OTEL_TRACES_EXPORTER": "zipkin"}, "traces")
    with pytest.raises(setup.TelemetrySetupError, match="OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"):
        setup._protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "metrics")
    assert setup._exporter_names({"OTEL_METRICS_EXPORTER": "none"}, "metrics") == []


async def test_a_sampled_out_call_records_no_span_but_still_propagates_and_counts(upstream):
    from opentelemetry.sdk.trace import sampling

    otel = Otel()
    otel.tracer_provider = TracerProvider(sampler=sampling.ALWAYS_OFF)
    otel.tracer_provider.add_span_processor(SimpleSpanProcessor(otel.spans))
    telemetry.install(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    try:
        fake, model = upstream
        await model.achat([("user", "hi")])
    finally:
        telemetry.install()
    assert otel.finished() == []
    flags = fake.requests[0][0]["traceparent"].split("-")[3]
    assert int(flags, 16) & 1 == 0  # the provider is told the trace was not sampled
    assert len(otel.points("gen_ai.client.operation.duration")) == 1  # metrics do not depend on sampling


async def test_records_of_a_remote_model_get_the_provider_request_id_from_the_server(otel, upstream, tmp_path):
    _, model = upstream
    server, port = await build_server({"mini": model}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "mini")
    try:
        inputs = [("a", build_request("mini", messages=[("user", "hi")]))]
        await run_batch(remote, inputs, tmp_path / "out.jsonl", progress_stream=io.StringIO())
    finally:
        await remote.aclose()
        await server.stop(None)
    (record,) = list(read_records(tmp_path / "out.jsonl"))
    (client_span,) = [s for s in otel.finished("chat mini") if s.attributes["gen_ai.provider.name"] == "modelir"]
    assert record.provenance.span_id == trace.format_span_id(client_span.context.span_id)
    assert record.provenance.provider_request_id == "req-fake-1"
    assert client_span.attributes["modelir.provider.request_id"] == "req-fake-1"


def test_modelir_run_with_otel_variables_writes_trace_ids_into_records(tmp_path):
    import os
    import subprocess
    import sys

    from google.protobuf import json_format

    request = build_request("reference", prompt="Hello", max_output_tokens=3)
    (tmp_path / "in.jsonl").write_text(json_format.MessageToJson(request, indent=None) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"})
    args = ["run", "--model", "reference", "--input", str(tmp_path / "in.jsonl"), "--output", str(tmp_path / "o.jsonl")]
    done = subprocess.run(
        [sys.executable, "-m", "modelir.cli", *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (record,) = list(read_records(tmp_path / "o.jsonl"))
    assert len(record.provenance.trace_id) == 32 and len(record.provenance.span_id) == 16
    exported = done.stdout
    assert f'"trace_id": "0x{record.provenance.trace_id}"' in exported
    assert f'"span_id": "0x{record.provenance.span_id}"' in exported


async def test_under_a_sampled_out_parent_the_parent_based_sampler_keeps_no_child_span(upstream):
    from opentelemetry.sdk.trace import sampling

    otel = Otel()
    otel.tracer_provider = TracerProvider(sampler=sampling.ParentBased(sampling.ALWAYS_OFF))
    otel.tracer_provider.add_span_processor(SimpleSpanProcessor(otel.spans))
    telemetry.install(tracer_provider=otel.tracer_provider)
    fake, model = upstream
    try:
        with otel.tracer_provider.get_tracer("test").start_as_current_span("dropped") as root:
            await model.achat([("user", "hi")])
            [_ async for _ in model.astream(build_request("mini", messages=[("user", "hi")]))]
    finally:
        telemetry.install()
    assert otel.finished() == []
    for headers, _ in fake.requests:  # the provider hears of the (unsampled) trace, its attempt's span the parent
        _, trace_id, _, flags = headers["traceparent"].split("-")
        assert trace_id == trace.format_trace_id(root.get_span_context().trace_id)
        assert int(flags, 16) & 1 == 0


async def test_an_rpc_left_out_with_baggage_in_its_context_sends_the_baggage_too(upstream):
    """With baggage current when an RPC whose root is left out starts, the provider gets what the propagator
    writes, baggage included."""
    from modelir.telemetry import server as telemetry_server
    from opentelemetry import baggage, context, propagate
    from opentelemetry.sdk.trace import sampling

    fake, model = upstream
    provider = TracerProvider(sampler=sampling.ParentBased(sampling.ALWAYS_OFF))
    telemetry.install(tracer_provider=provider)
    request = build_request("mini", messages=[("user", "hi")])
    token = context.attach(baggage.set_baggage("user", "ada"))
    try:
        with telemetry_server.server_call("Generate", "mini", None, request):
            await model.arun(request)
            expected: dict[str, str] = {}
            propagate.inject(expected)
    finally:
        context.detach(token)
        telemetry.install()
    (headers, _) = fake.requests[0]
    assert expected["baggage"] == headers["baggage"] == "user=ada"
    assert headers["traceparent"].split("-")[1] == expected["traceparent"].split("-")[1]  # the RPC's trace


def test_a_bad_access_log_format_in_the_environment_is_a_configuration_error(monkeypatch, capsys):
    from modelir import cli

    monkeypatch.setenv("MODELIR_ACCESS_LOG", "xml")
    assert cli.main(["serve", "--port", "0"]) == 2
    assert "MODELIR_ACCESS_LOG" in capsys.readouterr().err


def test_exporters_follow_the_protocol_variables():
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    assert isinstance(setup._span_exporter("otlp", {}), HttpSpans)  # the specification's default protocol
    assert isinstance(setup._span_exporter("otlp", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), GrpcSpans)
    both = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}
    assert isinstance(setup._metric_exporter("otlp", both), HttpMetrics)  # the per-signal variable wins
    assert isinstance(setup._metric_exporter("otlp", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), GrpcMetrics)
    assert isinstance(setup._span_exporter("console", {}), ConsoleSpanExporter)


async def test_providers_built_from_the_environment_trace_and_measure_a_call(capsys):
    environ = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "console"}
    installed = setup.build_from_env(environ)
    assert installed is not None and installed.tracer_provider is not None and installed.meter_provider is not None
    telemetry.install(tracer_provider=installed.tracer_provider, meter_provider=installed.meter_provider)
    try:
        await Model(ReferenceModel(), name="ref").agenerate("Hello", max_output_tokens=2)
    finally:
        telemetry.install()
        installed.shutdown()  # exports what is batched
    printed = capsys.readouterr().out
    assert '"name": "text_completion ref"' in printed and '"service.name": "modelir"' in printed
    assert "gen_ai.client.operation.duration" in printed
    only_metrics = setup.build_from_env({"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "console"})
    assert only_metrics is not None and only_metrics.tracer_provider is None
    only_metrics.shutdown()


def _metric_points(reader) -> list[tuple]:
    """Every point of every metric, durations as counts only (their values are times)."""
    found = []
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                for p in metric.data.data_points:
                    if metric.unit == "s":
                        value: tuple = (p.count,)
                    else:
                        value = (getattr(p, "count", None), getattr(p, "sum", None), getattr(p, "value", None))
                    found.append((metric.name, tuple(sorted(p.attributes.items())), value))
    return sorted(found, key=repr)


@pytest.mark.parametrize("meter", ["sdk", "aggregating"])
async def test_a_served_call_records_what_a_call_records(upstream, meter):
    """The first model call of an RPC that makes no span is measured by a `ServedCall`: for a success, retries, a
    count reported as zero and one not reported, a soft error, a hard failure after retries and a rejection, the
    same metric points as a `Call` gives the same calls, with the SDK's meter and with modelir's (whose lists the
    served call appends to itself: enough successes that they are folded on the way)."""
    from modelir.telemetry import _runtime
    from modelir.telemetry.attribute_set import FOLD_AT
    from modelir.telemetry.meter import AggregatingMeter

    fake, model = upstream

    async def scenarios(served: bool) -> list[tuple]:
        if meter == "sdk":
            reader = InMemoryMetricReader()
            telemetry.install(meter_provider=MeterProvider(metric_readers=[reader]))
        else:
            aggregating = AggregatingMeter()
            reader = type("Reader", (), {"get_metrics_data": staticmethod(aggregating.collect)})()
            telemetry.install(meter_provider=aggregating)
        kinds = []

        async def call(run):
            seen = _runtime.Seen()
            seen.served, seen.instruments = served, _runtime.hooks().instruments  # as the RPC sets them
            token = _runtime.current_capture.set(seen)
            try:
                await run()
            except errors.ModelError:
                pass
            finally:
                _runtime.current_capture.reset(token)
            kinds.append(seen.served)  # consumed by the served call

        try:
            fake.fail_first = []
            await call(lambda: model.achat([("user", "hi")]))
            fake.fail_first = [429, 503]
            await call(lambda: model.achat([("user", "hi")]))
            fake.fail_first = [503, 503, 503, 503]
            await call(lambda: model.achat([("user", "hi")]))
            fake.fail_first = []
            rejected = build_request("mini", prompt="The cat", max_output_tokens=0)
            rejected.input_scoring.continuations.add(text=" sat")
            await call(lambda: model.arun(rejected))
            request = build_request("mini", messages=[("user", "hi")])

            plain_answer = _answer(5, 0.5)

            async def answered_plainly(response=plain_answer):
                with calls.model_call(model, request) as observed:
                    observed.finish(response)

            for input_tokens, queued, soft in ((0, 0.0, False), (None, None, False), (7, 0.25, True)):
                response = _answer(input_tokens, queued)
                if soft:
                    response.errors.add(reason=errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED, message="not the schema")

                async def answered(response=response):
                    with calls.model_call(model, request) as observed:
                        assert isinstance(observed, calls.ServedCall) is served
                        observed.finish(response)

                await call(answered)
            successes = FOLD_AT + 10 if meter == "aggregating" else 0
            for _ in range(successes):
                await call(answered_plainly)
            assert kinds == [False] * (7 + successes)
            return _metric_points(reader)
        finally:
            telemetry.install()

    general, lean = await scenarios(served=False), await scenarios(served=True)
    assert {name for name, _, _ in general} >= {
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "modelir.client.retries",
        "modelir.client.rejections",
        "modelir.client.soft_errors",
        "modelir.client.limiter.queue.duration",
    }
    assert lean == general


@pytest.mark.parametrize("traces", ["none", "left out"])
async def test_a_served_rpc_logs_the_usage_its_served_call_read(upstream, traces):
    """Through the server, with metrics and no span for the RPC (no tracer, or a new root the sampler leaves out),
    the model call is a `ServedCall`: the access log has the usage the provider reported (read once, by that
    call), a zero count is logged as zero and an unreported one as absent, and the caller gets the provider's
    request id in the trailers."""
    import grpc
    from modelir.telemetry.wire import PROVIDER_REQUEST_ID_TRAILER
    from modelir.v1 import service_pb2, service_pb2_grpc
    from opentelemetry.sdk.trace import sampling

    fake, model = upstream
    tracer_provider = None
    if traces == "left out":
        tracer_provider = TracerProvider(sampler=sampling.ParentBased(sampling.ALWAYS_OFF))
    telemetry.install(
        meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]), tracer_provider=tracer_provider
    )
    made = []
    real = calls.ServedCall.__enter__

    def counting(self):
        made.append(self)
        return real(self)

    lines = io.BytesIO()
    access_log_module.configure("json", lines)
    server, port = await build_server({"mini": model}, "127.0.0.1:0")
    await server.start()
    request = service_pb2.GenerateRequest(request=build_request("mini", messages=[("user", "hi")]))
    try:
        calls.ServedCall.__enter__ = counting  # type: ignore[method-assign]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:  # a caller with no trace context
            stub = service_pb2_grpc.ModelServiceStub(channel)
            first_call = stub.Generate(request)
            answer = (await first_call).response
            trailers = dict(await first_call.trailing_metadata())
            fake.body_override = {
                "id": "chatcmpl-zero",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0},
            }
            await stub.Generate(request)
    finally:
        calls.ServedCall.__enter__ = real  # type: ignore[method-assign]
        await server.stop(None)
        access_log_module.access_log().flush()
        access_log_module.configure()
        telemetry.install()
    assert len(made) == 2
    first, second = (orjson.loads(line) for line in lines.getvalue().splitlines())
    usage = answer.usage
    assert (first["input_tokens"], first["output_tokens"]) == (usage.input_token_count, usage.output_token_count)
    assert first["input_tokens"] > 0 and first["status"] == "OK"
    assert (second["input_tokens"], second["output_tokens"]) == (0, None)
    assert trailers[PROVIDER_REQUEST_ID_TRAILER].startswith("req-fake-")
    assert (first["trace_id"] is None) is (traces == "none")


def test_request_and_usage_attributes_are_the_fields_set_a_zero_included():
    """The sampling parameters and usage counts a span gets are exactly those the request and the answer set
    (explicit zeros included: `optional` fields), under the convention's names and types."""
    from modelir.telemetry import conventions as sc
    from modelir.v1 import response_pb2

    request = build_request("mini", messages=[("user", "hi")], temperature=0.0, top_k=0, stop=["a", "b"], n=3)
    request.sampling.repetition_penalty = 1.1  # no convention name: not an attribute
    assert sc.request_attributes(request) == {
        "gen_ai.request.temperature": 0.0,
        "gen_ai.request.top_k": 0.0,
        "gen_ai.request.stop_sequences": ["a", "b"],
        "gen_ai.request.choice.count": 3,
    }
    single = build_request("mini", messages=[("user", "hi")], n=1, json_schema='{"type": "object"}')
    assert sc.request_attributes(single) == {"gen_ai.output.type": "json"}
    usage = response_pb2.Usage(output_token_count=0, cache_write_token_count=4)
    assert sc.usage_attributes(usage) == {
        "gen_ai.usage.output_tokens": 0,
        "gen_ai.usage.cache_creation.input_tokens": 4,
    }
