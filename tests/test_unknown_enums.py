"""A request carrying a value of a closed enum that this SDK does not know (a newer client's) is refused up front,
typed and named by its path: in `Validate`, before any network call, and over gRPC as INVALID_ARGUMENT."""

from __future__ import annotations

import re
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from modelir import Model, ReferenceModel, errors
from modelir.pipeline import validation
from modelir.pipeline.prepare import Pipeline
from modelir.server import build_server
from modelir.transports.anthropic import AnthropicMessages
from modelir.transports.openai import OpenAIChat
from modelir.v1 import content_pb2, request_pb2, service_pb2, service_pb2_grpc

PROTOS = Path(__file__).resolve().parents[1] / "proto" / "modelir" / "v1"


def _documented_open_enums() -> set[str]:
    """The enums whose comment in the spec says that new values come in minor versions."""
    found = set()
    for proto in PROTOS.glob("*.proto"):
        for comment, name in re.findall(r"((?://[^\n]*\n)+)enum (\w+) \{", proto.read_text()):
            text = " ".join(line.strip("/ ") for line in comment.splitlines())
            if "open enum" in text or "added in minor versions" in text:
                found.add(f"modelir.v1.{name}")
    return found


def test_the_open_enums_are_exactly_those_the_spec_documents_as_open():
    assert validation.OPEN_ENUMS == _documented_open_enums()


def _request(role: int = content_pb2.ROLE_USER, effort: int = 0) -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=role).parts.add(text="hi")
    if effort:
        request.reasoning_controls.effort = effort  # type: ignore[assignment]
    return request


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (_request(role=9), "conversation.messages[0].role"),
        (_request(effort=9), "reasoning_controls.effort"),
    ],
    ids=["role", "effort"],
)
@pytest.mark.parametrize("transport", [AnthropicMessages(), OpenAIChat()], ids=lambda t: t.name)
def test_an_unknown_closed_enum_value_is_a_field_violation_before_any_io(request_, field, transport):
    with pytest.raises(errors.InvalidRequestError) as caught:
        Pipeline(transport).prepare(request_, streaming=False)
    assert [v.field for v in caught.value.violations] == [field]


def test_nested_and_repeated_enums_are_found_by_walking_the_descriptor():
    request = _request()
    request.tool_choice.allowed_tools.mode = 7  # type: ignore[assignment]
    request.logprob_options.basis = 5  # type: ignore[assignment]
    request.conversation.messages[0].phase = 9  # type: ignore[assignment]  # an open enum: tolerated
    fields = sorted(f for f, _ in validation.unknown_values(request))
    assert fields == ["logprob_options.basis", "tool_choice.allowed_tools.mode"]


async def test_validate_and_grpc_refuse_it_as_invalid_argument_with_the_field():
    model = Model(ReferenceModel(), name="reference")
    request = _request(role=9)
    request.model = "reference"
    verdict = await model.avalidate(request)
    assert not verdict.accepted and [v.field for v in verdict.field_violations] == ["conversation.messages[0].role"]
    server, port = await build_server({"reference": model}, "127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.ModelServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.Generate(service_pb2.GenerateRequest(request=request))
    finally:
        await server.stop(None)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    status = rpc_status.from_call(caught.value)
    bad = error_details_pb2.BadRequest()
    assert any(d.Unpack(bad) for d in status.details if d.Is(bad.DESCRIPTOR))
    assert [v.field for v in bad.field_violations] == ["conversation.messages[0].role"]


def test_a_newer_clients_unknown_field_is_a_field_violation_not_silently_dropped():
    request = _request()
    # What a newer client sends: a field this SDK's Request lacks (number 999), nested and at the top.
    request.sampling.temperature = 0.5
    newer = request.SerializeToString() + b"\xba\x3e\x04lora"  # field 999, length-delimited, "lora"
    sampling_with_extra = request.sampling.SerializeToString() + b"\xb8\x3e\x01"  # field 999, varint 1
    received = type(request).FromString(newer)
    received.sampling.MergeFromString(sampling_with_extra)
    found = dict(validation.unknown_values(received))
    assert set(found) == {"request", "sampling"}
    assert "999" in found["request"] and "newer client" in found["request"]
    with pytest.raises(errors.InvalidRequestError) as caught:
        Pipeline(OpenAIChat()).prepare(received, streaming=False)
    assert sorted(v.field for v in caught.value.violations) == ["request", "sampling"]
