"""The metrics and spans added to the telemetry: time per output chunk on streams, the `gen_ai.server.*` metrics
of the generation RPCs, and a span (with its HTTP attempts as children) for every tokenize and detokenize call."""

from __future__ import annotations

import pytest
from aiohttp import web
from modelir import Model, ReferenceModel, build_request, telemetry
from modelir.config import build_config
from modelir.remote import RemoteModel
from modelir.server import build_server
from opentelemetry.trace import SpanKind

from tests.fake_openai import ANSWER
from tests.test_telemetry import Otel, upstream  # noqa: F401  (the fixture)


@pytest.fixture
def otel():
    yield Otel()
    telemetry.install()


async def test_a_stream_records_the_time_of_every_chunk_after_the_first(otel, upstream):  # noqa: F811
    _, model = upstream
    events = [e async for e in model.astream(build_request("mini", messages=[("user", "hi")]))]
    deltas = [e for e in events if e.WhichOneof("event") == "delta"]
    assert len(deltas) == len(ANSWER) > 2
    (per_chunk,) = otel.points("gen_ai.client.operation.time_per_output_chunk")
    (first,) = otel.points("gen_ai.client.operation.time_to_first_chunk")
    assert per_chunk.count == len(deltas) - 1 and first.count == 1
    assert dict(per_chunk.attributes) == dict(first.attributes)
    assert per_chunk.explicit_bounds[:3] == (0.01, 0.025, 0.05)
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert 0 <= first.sum + per_chunk.sum <= duration.sum


async def test_the_server_records_request_duration_and_for_streams_first_token_and_time_per_token(otel):
    server, port = await build_server({"reference": Model(ReferenceModel(), name="reference")}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "reference")
    try:
        await remote.achat([("user", "hi")], max_output_tokens=8)
        request = build_request("reference", prompt="x", max_output_tokens=40)
        [_ async for _ in remote.astream(request)]
        with pytest.raises(Exception, match="max_output_tokens"):
            await remote.arun(build_request("reference", prompt="x", max_output_tokens=10**7))
    finally:
        await remote.aclose()
        await server.stop(None)
    durations = {
        p.attributes["gen_ai.operation.name"] + p.attributes.get("error.type", ""): p
        for p in otel.points("gen_ai.server.request.duration")
    }
    assert set(durations) == {"chat", "text_completion", "text_completionFAILED_PRECONDITION"} or set(durations) >= {
        "chat",
        "text_completion",
    }
    assert dict(durations["chat"].attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "modelir.reference",
        "gen_ai.request.model": "reference",
    }
    assert durations["text_completionFAILED_PRECONDITION"].count == 1
    (first,) = otel.points("gen_ai.server.time_to_first_token")
    (per_token,) = otel.points("gen_ai.server.time_per_output_token")
    assert first.count == per_token.count == 1  # the stream only: a unary answer arrives whole
    assert dict(first.attributes) == {**durations["chat"].attributes, "gen_ai.operation.name": "text_completion"}
    assert 0 <= first.sum <= durations["text_completion"].sum
    assert 0 <= per_token.sum * 39 <= durations["text_completion"].sum


@pytest.fixture
async def llamacpp():
    """A llama.cpp-style server that tokenizes by characters and detokenizes ids as characters."""
    seen: list[dict] = []

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(dict(request.headers))
        return web.json_response({"tokens": [{"id": ord(c), "piece": c} for c in body["content"]]})

    async def detokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(dict(request.headers))
        return web.json_response({"content": "".join(chr(i) for i in body["tokens"])})

    app = web.Application()
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    config = build_config(
        {"models": {"tiny": {"transport": "llamacpp", "base_url": f"http://127.0.0.1:{port}"}}},
        source="test.yaml",
        environ={},
    )
    yield config.models["tiny"], seen
    await config.aclose()
    await runner.cleanup()


async def test_tokenize_and_detokenize_calls_have_spans_with_their_http_attempts(otel, llamacpp):
    model, seen = llamacpp
    tokens = await model.atokenize("hé")
    assert list(tokens.token_ids) == [ord("h"), ord("é")]
    assert await model.adetokenize([104, 105]) == "hi"
    (tokenize,) = otel.finished("tokenize tiny")
    (detokenize,) = otel.finished("detokenize tiny")
    for span, operation in ((tokenize, "tokenize"), (detokenize, "detokenize")):
        assert span.kind == SpanKind.CLIENT
        assert span.attributes["gen_ai.operation.name"] == operation
        assert span.attributes["gen_ai.provider.name"] == "llama.cpp"
        assert span.attributes["modelir.transport"] == "llamacpp"
    attempts = otel.finished("POST")
    assert sorted(a.parent.span_id for a in attempts) == sorted(s.context.span_id for s in (tokenize, detokenize))
    assert all(h["traceparent"].split("-")[1] == f"{tokenize.context.trace_id:032x}" for h in seen[:1])
    assert otel.points("gen_ai.client.operation.duration") == []  # no GenAI metrics for a tokenize call


async def test_a_served_tokenize_is_one_trace_from_the_rpc_to_the_provider(otel, llamacpp):
    model, _ = llamacpp
    server, port = await build_server({"tiny": model}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "tiny")
    try:
        await remote.atokenize("ab")
    finally:
        await remote.aclose()
        await server.stop(None)
    (rpc,) = otel.finished("modelir.v1.ModelService/Tokenize")
    (tokenize,) = otel.finished("tokenize tiny")
    (attempt,) = otel.finished("POST")
    assert tokenize.parent.span_id == rpc.context.span_id and attempt.parent.span_id == tokenize.context.span_id
    assert otel.points("gen_ai.server.request.duration") == []  # not a generation RPC


def test_the_server_keeps_a_tenth_of_new_traces_unless_the_environment_names_a_sampler(monkeypatch):
    from modelir.telemetry import setup
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG", raising=False)
    environ = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}
    served = setup.build_from_env(environ, default_sampler_ratio=setup.SERVER_SAMPLER_RATIO)
    library = setup.build_from_env(environ)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.01")  # the default sampler's ratio, as for its SDK name
    one_in_a_hundred = setup.build_from_env(environ, default_sampler_ratio=setup.SERVER_SAMPLER_RATIO)
    assert "TraceIdRatioBased{0.01}" in one_in_a_hundred.tracer_provider.sampler.get_description()
    one_in_a_hundred.shutdown()
    for bad in ("ten percent", "1.5"):
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", bad)
        with pytest.raises(setup.TelemetrySetupError, match="OTEL_TRACES_SAMPLER_ARG"):
            setup.build_from_env(environ, default_sampler_ratio=setup.SERVER_SAMPLER_RATIO)
    monkeypatch.delenv("OTEL_TRACES_SAMPLER_ARG")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    chosen = setup.build_from_env(environ, default_sampler_ratio=setup.SERVER_SAMPLER_RATIO)
    try:
        sampler = served.tracer_provider.sampler
        assert isinstance(sampler, ParentBased) and "TraceIdRatioBased{0.1}" in sampler.get_description()
        assert isinstance(sampler._root, TraceIdRatioBased)
        assert "AlwaysOnSampler" in library.tracer_provider.sampler.get_description()  # `modelir run`: every trace
        assert "AlwaysOnSampler" in chosen.tracer_provider.sampler.get_description()
    finally:
        for installed in (served, library, chosen):
            installed.shutdown()
