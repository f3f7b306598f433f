"""An answer over a gRPC message limit is `MessageTooLargeError` (RESOURCE_EXHAUSTED, not retryable), never a
retryable rate limit, and the server logs it as RESOURCE_EXHAUSTED, not OK."""

from __future__ import annotations

import io

import grpc
import httpx
import pytest
from modelir import Model, build_request, errors
from modelir.config import ServerSettings
from modelir.errors.rich_status import error_from_rpc
from modelir.http.executor import Executor
from modelir.registry import build_transport
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.telemetry import access_log
from modelir.v1 import service_pb2, service_pb2_grpc

LONG = "x" * 20_000


def _answer(_request: httpx.Request) -> httpx.Response:
    message = {"role": "assistant", "content": LONG}
    return httpx.Response(
        200,
        json={"id": "c", "object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]},
    )  # fmt: skip


@pytest.fixture
async def served():
    executor = Executor("http://big.invalid", transport=httpx.MockTransport(_answer))
    model = Model(build_transport("openai_chat", {"provider_model": "m"}), name="m", executor=executor)
    server, port = await build_server({"m": model}, "127.0.0.1:0", settings=ServerSettings(max_message_bytes=8_000))
    await server.start()
    yield port
    await server.stop(None)
    await executor.aclose()


async def test_an_answer_over_the_servers_limit_is_refused_typed_and_logged(served):
    logged = io.BytesIO()
    log = access_log.configure("text", logged)
    remote = RemoteModel(f"127.0.0.1:{served}", "m")
    try:
        with pytest.raises(errors.MessageTooLargeError) as caught:
            await remote.arun(build_request("m", messages=[("user", "hi")]))
    finally:
        await remote.aclose()
        log.flush()
        access_log.configure()
    assert not caught.value.retryable
    assert "message limit" in caught.value.message
    assert errors.mapping_for(caught.value.reason).grpc_code == grpc.StatusCode.RESOURCE_EXHAUSTED
    lines = logged.getvalue().decode().splitlines()
    assert any("Generate" in line and "status=RESOURCE_EXHAUSTED" in line for line in lines), lines


async def test_an_answer_over_the_clients_limit_is_not_a_rate_limit():
    executor = Executor("http://big.invalid", transport=httpx.MockTransport(_answer))
    model = Model(build_transport("openai_chat", {"provider_model": "m"}), name="m", executor=executor)
    server, port = await build_server({"m": model}, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 4_000)])
    try:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            request = build_request("m", messages=[("user", "hi")])
            await service_pb2_grpc.ModelServiceStub(channel).Generate(service_pb2.GenerateRequest(request=request))
    finally:
        await channel.close()
        await server.stop(None)
        await executor.aclose()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    error = error_from_rpc(caught.value)
    assert isinstance(error, errors.MessageTooLargeError) and not error.retryable
