"""Bearer auth: the scheme is case-insensitive, the server's health is open, a named model's health is not."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from modelir import Model, ReferenceModel
from modelir.server import build_server
from modelir.v1 import service_pb2, service_pb2_grpc


@pytest.fixture
async def target():
    models = {"reference": Model(ReferenceModel(), name="reference")}
    server, port = await build_server(models, "127.0.0.1:0", auth_tokens=frozenset({"s3cret"}))
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(None)


@pytest.mark.parametrize("header", ["Bearer s3cret", "bearer s3cret", "BEARER  s3cret ", "bEaReR s3cret"])
async def test_the_bearer_scheme_is_case_insensitive(target, header):
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.ModelServiceStub(channel)
        answer = await stub.ListModels(service_pb2.ListModelsRequest(), metadata=[("authorization", header)])
        assert [m.name for m in answer.models] == ["reference"]


@pytest.mark.parametrize("header", ["Basic s3cret", "Bearer wrong", "s3cret", "Bearer"])
async def test_other_schemes_and_tokens_are_refused(target, header):
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.ModelServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ListModels(service_pb2.ListModelsRequest(), metadata=[("authorization", header)])
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("service", ["", "modelir.v1.ModelService"])
async def test_the_servers_own_health_needs_no_token(target, service):
    async with grpc.aio.insecure_channel(target) as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("service", ["reference", "no-such-model"])
async def test_a_named_models_health_needs_the_token(target, service):
    """Without it, probing names would tell which models exist (NOT_FOUND vs SERVING)."""
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in health.Watch(health_pb2.HealthCheckRequest(service=service)):
                pass
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answer = await health.Check(
            health_pb2.HealthCheckRequest(service="reference"), metadata=[("authorization", "Bearer s3cret")]
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
