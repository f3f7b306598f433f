"""Over-deep JSON in a request is INVALID_REQUEST, named by field, before any lowering: from the SDK, from
`Validate` (the same limits), and through the server, where undecodable input is INVALID_ARGUMENT, never UNKNOWN."""

from __future__ import annotations

import grpc
import httpx
import orjson
import pytest
from google.rpc import error_details_pb2, status_pb2
from modelir import Model, build_request, errors
from modelir.http.executor import Executor
from modelir.pipeline.limits import MAX_JSON_DEPTH
from modelir.registry import build_transport
from modelir.server import build_server
from modelir.v1 import content_pb2, request_pb2, service_pb2, service_pb2_grpc

DEEP = 300  # past orjson's serialiser (255 levels), short of its parser (1,024)


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _schema(levels: int) -> str:
    inner: dict = {"type": "string"}
    for _ in range(levels):
        inner = {"type": "array", "items": inner}
    return (
        orjson.dumps({"type": "object", "properties": {"x": inner}}).decode()
        if levels < 250
        else (
            '{"type": "object", "properties": {"x": '
            + '{"type": "array", "items": ' * levels
            + "{}"
            + "}" * levels
            + "}}"
        )
    )


def _tool_schema(request: request_pb2.Request, levels: int) -> str:
    request.tools.add().function.CopyFrom(request_pb2.FunctionTool(name="f", parameters_json_schema=_schema(levels)))
    return "tools[0].function.parameters_json_schema"


def _tool_arguments(request: request_pb2.Request, levels: int) -> str:
    request.tools.add().function.CopyFrom(request_pb2.FunctionTool(name="f"))
    message = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    message.parts.add(tool_call=content_pb2.ToolCall(id="c", name="f", arguments_json='{"a": ' + _deep(levels) + "}"))
    result = request.conversation.messages.add(role=content_pb2.ROLE_TOOL).parts.add().tool_result
    result.tool_call_id = "c"
    result.content.add(text="ok")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="and?")
    return "conversation.messages[1].parts[0].tool_call.arguments_json"


def _provider_options(request: request_pb2.Request, levels: int) -> str:
    request.provider_options.add(transport="openai_chat", options_json='{"metadata": ' + _deep(levels) + "}")
    return "provider_options[0].options_json"


def _constraint(request: request_pb2.Request, levels: int) -> str:
    request.constraint.json_schema.schema_json = _schema(levels)
    return "constraint.json_schema.schema_json"


WHERE = [_tool_schema, _tool_arguments, _provider_options, _constraint]


def _request(where, levels: int) -> tuple[request_pb2.Request, str]:
    request = build_request("m", messages=[("user", "hi")])
    return request, where(request, levels)


def _model() -> tuple[Model, Executor]:
    answer = {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
    }
    executor = Executor(
        "http://limits.invalid", transport=httpx.MockTransport(lambda _: httpx.Response(200, json=answer))
    )
    return Model(build_transport("openai_chat", {"provider_model": "m"}), name="m", executor=executor), executor


@pytest.mark.parametrize("levels", [DEEP, 1100])
@pytest.mark.parametrize("where", WHERE, ids=[w.__name__.strip("_") for w in WHERE])
async def test_over_deep_json_is_an_invalid_request_from_the_sdk_and_validate(where, levels):
    model, executor = _model()
    request, field = _request(where, levels)
    try:
        with pytest.raises(errors.InvalidRequestError) as caught:
            await model.arun(request)
        assert field in [v.field for v in caught.value.violations]
        verdict = await model.avalidate(request)
        assert field in [v.field for v in verdict.field_violations]
    finally:
        await executor.aclose()


@pytest.mark.parametrize("where", WHERE, ids=[w.__name__.strip("_") for w in WHERE])
async def test_json_within_the_limit_is_lowered(where):
    model, executor = _model()
    request, _ = _request(where, MAX_JSON_DEPTH - 8)
    try:
        verdict = await model.avalidate(request)
        assert not verdict.field_violations
        await model.arun(request)
    finally:
        await executor.aclose()


@pytest.fixture
async def served():
    model, executor = _model()
    server, port = await build_server({"m": model}, "127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield channel
    await channel.close()
    await server.stop(None)
    await executor.aclose()


def _bad_request(call: grpc.aio.AioRpcError) -> error_details_pb2.BadRequest:
    status = status_pb2.Status.FromString(dict(call.trailing_metadata())["grpc-status-details-bin"])
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            found = error_details_pb2.BadRequest()
            detail.Unpack(found)
            return found
    raise AssertionError(f"no BadRequest in {status}")


@pytest.mark.parametrize("where", WHERE, ids=[w.__name__.strip("_") for w in WHERE])
async def test_over_deep_json_through_the_server_is_invalid_argument(served, where):
    request, field = _request(where, DEEP)
    stub = service_pb2_grpc.ModelServiceStub(served)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Generate(service_pb2.GenerateRequest(request=request))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in [v.field for v in _bad_request(caught.value).field_violations]


# GenerateRequest{request: Request{model: "m", prompt: "a\xffb"}}: a string field that is not UTF-8.
_NOT_UTF8 = b"\x0a\x09" + b"\x0a\x01m" + b"\x12\x03a\xffb"
# Messages nested past protobuf's recursion limit: a Part holding a tool result holding a Part ...
_TRUNCATED = b"\x0a\x05\x0a\x01m\x12"


@pytest.mark.parametrize("payload", [_NOT_UTF8, _TRUNCATED, b"\xff\xff\xff"], ids=["not-utf8", "truncated", "garbage"])
@pytest.mark.parametrize("method", ["Generate", "StreamGenerate", "Validate"])
async def test_undecodable_input_is_invalid_argument_with_details(served, payload, method):
    path = f"/modelir.v1.ModelService/{method}"
    call = (served.unary_stream if method == "StreamGenerate" else served.unary_unary)(
        path, request_serializer=lambda raw: raw, response_deserializer=lambda raw: raw
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        answer = call(payload)
        if method == "StreamGenerate":
            async for _ in answer:
                pass
        else:
            await answer
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value
    assert _bad_request(caught.value).field_violations


@pytest.mark.parametrize("transport", ["anthropic_messages", "google_genai", "ollama"])
@pytest.mark.parametrize("arguments", ["{bad", '"\\ud800"'])
async def test_json_text_a_wire_cannot_carry_is_an_invalid_request_not_an_untyped_error(transport, arguments):
    request = build_request("m", messages=[("user", "hi")])
    request.tools.add().function.CopyFrom(request_pb2.FunctionTool(name="f"))
    call = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    call.parts.add(tool_call=content_pb2.ToolCall(id="c", name="f", arguments_json=arguments))
    result = request.conversation.messages.add(role=content_pb2.ROLE_TOOL).parts.add().tool_result
    result.tool_call_id = "c"
    result.content.add(text="ok")
    executor = Executor("http://limits.invalid", transport=httpx.MockTransport(lambda _: httpx.Response(500)))
    model = Model(build_transport(transport, {"provider_model": "m"}), name="m", executor=executor)
    try:
        with pytest.raises(errors.InvalidRequestError, match="cannot send it"):
            await model.arun(request)
    finally:
        await executor.aclose()
