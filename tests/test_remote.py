"""`RemoteModel` against a real server on a free local port: the same interface and exceptions as `Model`."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from modelir import (
    DeadlineExceededError,
    InvalidRequestError,
    Model,
    ReferenceModel,
    UnknownModelError,
    UnsupportedCapabilityError,
    accumulate,
    build_request,
)
from modelir.errors import UnauthenticatedError
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.transports.base import LocalTransport
from modelir.v1 import capabilities_pb2, request_pb2, stream_pb2
from modelir.version import IR_VERSION

C = capabilities_pb2.Capability


class SlowUpstream(LocalTransport):
    """An in-process upstream that takes `delay` seconds and records whether it was cancelled."""

    name = "slow"
    version = "0"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.inner = ReferenceModel()

    def manifest(self):
        manifest = self.inner.manifest()
        manifest.transport = self.name
        return manifest

    async def run(self, request):
        self.started.set()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return self.inner.generate(request)

    async def stream(self, request):
        yield stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id="slow"))
        response = await self.run(request)
        del response
        yield stream_pb2.StreamEvent(end=stream_pb2.StreamEnd())

    async def tokenize(self, request):
        return await self.inner.tokenize(request)


@pytest.fixture
async def served():
    slow = SlowUpstream(delay=30)
    models = {"reference": Model(ReferenceModel(), name="reference"), "slow": Model(slow, name="slow")}
    server, port = await build_server(models, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "reference")
    yield remote, slow, port
    await remote.aclose()
    await server.stop(None)


async def test_code_written_for_model_runs_unchanged_remotely(served):
    remote, _, _ = served
    local = Model(ReferenceModel(), name="reference")
    for model in (local, remote):
        chat = await model.achat([("user", "hello")], max_output_tokens=24, top_logprobs=3, seed=5)
        text = await model.agenerate("Once", max_output_tokens=10)
        score = await model.ascore("The cat sat on ", "the mat")
        tokens = await model.atokenize("hé", context="caf")
        verdict = await model.avalidate(build_request("", prompt="x", top_logprobs=5))
        streamed = accumulate([e async for e in model.astream(build_request("", prompt="x", max_output_tokens=40))])
        for r in (chat, text, streamed):
            r.ClearField("timing")
        if model is local:
            expected = (chat, text, score.logprob_sum, tokens, verdict, streamed)
        else:
            assert (chat, text, score.logprob_sum, tokens, verdict, streamed) == expected
            assert score.bits_per_byte > 0
    assert (await remote.acapabilities()) == local.capabilities


async def test_remote_raises_the_same_exceptions(served):
    remote, _, _ = served
    request = build_request("", prompt="def f(", n=40)
    request.fim.suffix = ")"
    with pytest.raises(UnsupportedCapabilityError) as caught:
        await remote.arun(request)
    assert set(caught.value.missing) == {C.CAPABILITY_FIM}
    assert caught.value.unsupported.limit_violations[0].limit == "max_choices"
    with pytest.raises(InvalidRequestError) as invalid:
        await remote.arun(build_request("", prompt="x", top_p=3))
    assert [v.field for v in invalid.value.violations] == ["sampling.top_p"]
    with pytest.raises(UnknownModelError):
        await RemoteModel(remote.target, "missing").arun(build_request("", prompt="x"))
    with pytest.raises(UnsupportedCapabilityError):  # also through the stream
        async for _ in remote.astream(request):
            pass


async def test_deadline_expires_upstream(served):
    _, slow, port = served
    slow_remote = RemoteModel(f"127.0.0.1:{port}", "slow")
    request = build_request("", prompt="x", timeout=0.3)
    with pytest.raises(DeadlineExceededError):
        await slow_remote.arun(request)
    await asyncio.wait_for(slow.cancelled.wait(), 5)  # the upstream call was cancelled, not left running
    await slow_remote.aclose()


async def test_client_cancel_reaches_the_upstream(served):
    _, slow, port = served
    slow_remote = RemoteModel(f"127.0.0.1:{port}", "slow")
    task = asyncio.create_task(slow_remote.arun(build_request("", prompt="x")))
    await asyncio.wait_for(slow.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(slow.cancelled.wait(), 5)
    await slow_remote.aclose()


async def test_a_thousand_concurrent_calls_none_lost(served):
    remote, _, _ = served
    prompts = [f"prompt {i}" for i in range(1000)]
    responses = await asyncio.gather(*(remote.agenerate(p, max_output_tokens=4, seed=i) for i, p in enumerate(prompts)))
    local = Model(ReferenceModel())
    assert len(responses) == 1000
    for i in (0, 499, 999):
        expected = await local.agenerate(prompts[i], max_output_tokens=4, seed=i)
        assert responses[i].choices[0].message == expected.choices[0].message


async def test_auth_accepts_and_refuses():
    models = {"reference": Model(ReferenceModel(), name="reference")}
    server, port = await build_server(models, "127.0.0.1:0", auth_tokens=frozenset({"s3cret", "other"}))
    await server.start()
    target = f"127.0.0.1:{port}"
    try:
        good = RemoteModel(target, "reference", token="s3cret")
        assert (await good.agenerate("x", max_output_tokens=3)).choices
        for bad in (RemoteModel(target, "reference"), RemoteModel(target, "reference", token="wrong")):
            with pytest.raises(UnauthenticatedError):
                await bad.agenerate("x", max_output_tokens=3)
            with pytest.raises(UnauthenticatedError):
                async for _ in bad.astream(build_request("", prompt="x")):
                    pass
            await bad.aclose()
        assert "s3cret" not in repr(good)
        await good.aclose()
        async with grpc.aio.insecure_channel(target) as channel:  # health stays open
            answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(None)


async def test_streaming_consumer_that_stops_early_cancels_the_call(served):
    _, slow, port = served
    slow_remote = RemoteModel(f"127.0.0.1:{port}", "slow")
    stream = slow_remote.astream(build_request("", prompt="x"))
    first = await stream.__anext__()
    assert first.start.id == "slow"
    await asyncio.wait_for(slow.started.wait(), 5)
    await stream.aclose()
    await asyncio.wait_for(slow.cancelled.wait(), 5)
    await slow_remote.aclose()


def test_request_timeout_field_is_honoured_without_a_grpc_deadline():
    request = request_pb2.Request()
    request.timeout.FromMilliseconds(250)
    assert RemoteModel("x:1", "m")._timeout(request, None) == 0.25


async def test_remote_offers_detokenize_round_trip_and_server_info(served):
    remote, _, _ = served
    local = Model(ReferenceModel(), name="reference")
    for model in (local, remote):
        assert await model.adetokenize([256, 104, 0xC3, 0xA9, 257]) == "hé"
        assert await model.around_trip("naïve café")
    info = await remote.aserver_info()
    assert info.ir_version == IR_VERSION
    assert [(t.name, t.version, list(t.model_names)) for t in info.transports] == [
        ("reference", ReferenceModel.version, ["reference"]),
        ("slow", ReferenceModel.version, ["slow"]),  # SlowUpstream reuses the reference manifest
    ]


@pytest.mark.parametrize("server_version", ["2.0.0", "0.9.0", "", "one"])
async def test_remote_refuses_a_server_of_another_ir_major_before_any_call(served, monkeypatch, server_version):
    import modelir.version
    from modelir import IncompatibleServerError

    remote, _, _ = served
    monkeypatch.setattr(modelir.version, "IR_VERSION", server_version)  # what the servicer reports
    with pytest.raises(IncompatibleServerError, match="major versions differ"):
        await remote.arun(build_request("reference", prompt="hi"))
    with pytest.raises(IncompatibleServerError):
        async for _ in remote.astream(build_request("reference", prompt="hi")):
            pass
    assert (await remote.aserver_info()).ir_version == server_version  # asking is still allowed


async def test_remote_accepts_a_server_of_another_minor_and_asks_once(served, monkeypatch):
    import modelir.version

    remote, _, _ = served
    monkeypatch.setattr(modelir.version, "IR_VERSION", f"{IR_VERSION.split('.')[0]}.99.0")
    asked = 0
    ask = remote.aserver_info

    async def counting():
        nonlocal asked
        asked += 1
        return await ask()

    monkeypatch.setattr(remote, "aserver_info", counting)
    assert (await remote.arun(build_request("reference", prompt="hi"))).choices
    assert await remote.acapabilities()
    assert asked == 1


async def test_against_an_older_minor_server_a_newer_field_is_refused_before_it_is_sent(served, monkeypatch):
    import modelir.version

    remote, _, _ = served
    monkeypatch.setattr(modelir.version, "IR_VERSION", "1.0.0")  # a 1.0 server would drop `adapter` unseen
    request = build_request("reference", prompt="hi")
    request.adapter = "sql-lora"
    stub = remote._stub()
    sent = []

    def counting(call):
        return lambda *args, **kwargs: sent.append(args) or call(*args, **kwargs)

    for rpc in ("Generate", "StreamGenerate"):
        monkeypatch.setattr(stub, rpc, counting(getattr(stub, rpc)))
    with pytest.raises(UnsupportedCapabilityError) as caught:
        await remote.arun(request)
    assert list(caught.value.missing) == [C.CAPABILITY_ADAPTERS]
    with pytest.raises(UnsupportedCapabilityError):
        async for _ in remote.astream(request):
            pass
    assert sent == []  # refused here: nothing reached the server
    assert (await remote.arun(build_request("reference", prompt="hi"))).choices  # what 1.0 knows still runs
    assert len(sent) == 1


async def test_embed_runs_remotely_as_locally_and_a_model_without_embeddings_refuses_naming_the_capability():
    from modelir.pipeline.capabilities import narrow
    from modelir.v1 import embedding_pb2

    reference = Model(ReferenceModel(), name="reference")
    plain = Model(
        ReferenceModel(), name="plain", manifest=narrow(ReferenceModel().manifest(), [C.CAPABILITY_EMBEDDINGS])
    )
    server, port = await build_server({"reference": reference, "plain": plain}, "127.0.0.1:0")
    await server.start()
    try:
        inputs = [embedding_pb2.EmbedInput(text="Hello"), embedding_pb2.EmbedInput(text="world")]
        request = embedding_pb2.EmbedRequest(inputs=inputs, dimension_count=4)
        async with RemoteModel(f"127.0.0.1:{port}", "reference") as remote:
            assert await remote.aembed(request) == await reference.aembed(request)
        async with RemoteModel(f"127.0.0.1:{port}", "plain") as remote:
            for model in (plain, remote):
                with pytest.raises(UnsupportedCapabilityError) as caught:
                    await model.aembed(request)
                assert list(caught.value.missing) == [C.CAPABILITY_EMBEDDINGS]
    finally:
        await server.stop(None)
