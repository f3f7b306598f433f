"""The gRPC ModelService on a free local port, through the raw generated stub."""

from __future__ import annotations

import io

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from modelir import Model, ReferenceModel, accumulate, build_request
from modelir.server import build_server
from modelir.server.servicer import serialize_generate_response
from modelir.telemetry import access_log
from modelir.v1 import capabilities_pb2, errors_pb2, response_pb2, service_pb2, service_pb2_grpc

C = capabilities_pb2.Capability


@pytest.fixture
async def stub():
    server, port = await build_server({"reference": Model(ReferenceModel(), name="reference")}, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield service_pb2_grpc.ModelServiceStub(channel), channel
    await channel.close()
    await server.stop(None)


def _details(error: grpc.aio.AioRpcError):
    status = rpc_status.from_call(error)
    found = {}
    for detail in status.details:
        for cls in (error_details_pb2.ErrorInfo, error_details_pb2.BadRequest, errors_pb2.UnsupportedCapabilities):
            if detail.Is(cls.DESCRIPTOR):
                message = cls()
                detail.Unpack(message)
                found[cls.__name__] = message
    return found


async def test_every_rpc_on_the_reference_model(stub):
    stub, channel = stub
    models = await stub.ListModels(service_pb2.ListModelsRequest())
    assert [m.name for m in models.models] == ["reference"]
    assert C.CAPABILITY_INPUT_SCORING in models.models[0].manifest.capabilities

    request = build_request("reference", messages=[("user", "hi")], max_output_tokens=20, top_logprobs=2)
    unary = (await stub.Generate(service_pb2.GenerateRequest(request=request))).response
    assert unary.choices[0].message.parts[0].text
    events = [m.event async for m in stub.StreamGenerate(service_pb2.StreamGenerateRequest(request=request))]
    streamed = accumulate(events)
    unary.ClearField("timing")
    streamed.ClearField("timing")
    assert streamed == unary

    tokens = await stub.Tokenize(service_pb2.TokenizeRequest(model="reference", text="hé"))
    assert list(tokens.token_ids) == [104, 0xC3, 0xA9]
    verdict = await stub.Validate(service_pb2.ValidateRequest(request=request))
    assert verdict.accepted and C.CAPABILITY_TOP_K_LOGPROBS in verdict.required

    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service="reference"))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_rejected_capabilities_arrive_as_failed_precondition_naming_all(stub):
    stub, _ = stub
    request = build_request("reference", prompt="def f(", n=40)
    request.fim.suffix = ")"
    request.constraint.regex = "a+"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(service_pb2.GenerateRequest(request=request))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = _details(caught.value)
    info = details["ErrorInfo"]
    assert info.reason == "UNSUPPORTED_CAPABILITY" and info.domain == "modelir.dev"
    assert set(info.metadata["missing_capabilities"].split(",")) == {"FIM", "CONSTRAINT_REGEX"}
    unsupported = details["UnsupportedCapabilities"]
    assert set(unsupported.missing) == {C.CAPABILITY_FIM, C.CAPABILITY_CONSTRAINT_REGEX}
    assert unsupported.limit_violations[0].limit == "max_choices"


async def test_invalid_request_arrives_with_field_violations(stub):
    stub, _ = stub
    request = build_request("reference", prompt="x", temperature=-2, top_p=7)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(service_pb2.GenerateRequest(request=request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = {v.field for v in _details(caught.value)["BadRequest"].field_violations}
    assert fields == {"sampling.temperature", "sampling.top_p"}


async def test_unknown_model_is_not_found(stub):
    stub, _ = stub
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(service_pb2.GenerateRequest(request=build_request("nope", prompt="x")))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert _details(caught.value)["ErrorInfo"].reason == "UNKNOWN_MODEL"


@pytest.mark.parametrize("text_length", [0, 1, 120, 126, 127, 128, 16_370, 16_383, 16_384, 2_100_000])
def test_generate_answers_are_wrapped_on_the_wire_exactly_as_the_message_would_be(text_length):
    # The servicer returns the bare Response and the serializer writes the GenerateResponse framing; the bytes
    # must be those of the real message at every varint length boundary.
    response = response_pb2.Response(id="r", choices=[response_pb2.Choice()])
    response.choices[0].message.parts.add(text="x" * text_length)
    expected = service_pb2.GenerateResponse(response=response).SerializeToString()
    assert serialize_generate_response(response) == expected
    assert service_pb2.GenerateResponse.FromString(expected).response == response


async def test_each_call_logs_the_status_its_caller_sees():
    class Broken(ReferenceModel):
        async def run(self, request):
            raise RuntimeError("a bug, not a ModelError")

    lines = io.BytesIO()
    access_log.configure("text", lines)

    def logged() -> str:
        access_log.access_log().flush()
        return lines.getvalue().decode()

    models = {"reference": Model(ReferenceModel(), name="reference"), "broken": Model(Broken(), name="broken")}
    server, port = await build_server(models, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.ModelServiceStub(channel)
            for name, code in (("reference", grpc.StatusCode.OK), ("nope", grpc.StatusCode.NOT_FOUND)):
                request = service_pb2.GenerateRequest(request=build_request(name, prompt="x", max_output_tokens=2))
                try:
                    await stub.Generate(request)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == code
                assert f"Generate model={name} " in logged() and f"status={code.name}" in logged()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Generate(
                    service_pb2.GenerateRequest(request=build_request("broken", prompt="x", max_output_tokens=2))
                )
            assert caught.value.code() == grpc.StatusCode.UNKNOWN
            assert "Generate model=broken transport=reference status=UNKNOWN" in logged()
    finally:
        await server.stop(None)
        access_log.configure("text")


async def test_get_server_info_names_the_ir_version_and_the_transports(stub):
    stub, _ = stub
    from modelir.version import IR_VERSION, SDK_VERSION

    info = await stub.GetServerInfo(service_pb2.GetServerInfoRequest())
    assert info.ir_version == IR_VERSION and info.server_version == SDK_VERSION
    assert [(t.name, list(t.model_names)) for t in info.transports] == [("reference", ["reference"])]
    assert info.transports[0].version == ReferenceModel.version


async def test_detokenize_inverts_tokenize_and_names_negative_ids(stub):
    stub, _ = stub
    tokens = await stub.Tokenize(service_pb2.TokenizeRequest(model="reference", text="hé!", add_special_tokens=True))
    text = await stub.Detokenize(service_pb2.DetokenizeRequest(model="reference", token_ids=tokens.token_ids))
    assert text.text == "hé!"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Detokenize(service_pb2.DetokenizeRequest(model="reference", token_ids=[104, -1, -7]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    fields = [v.field for v in _details(caught.value)["BadRequest"].field_violations]
    assert fields == ["token_ids[1]", "token_ids[2]"]
