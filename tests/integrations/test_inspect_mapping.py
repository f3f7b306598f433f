"""The Inspect provider's mapping, field by field: GenerateConfig, tools and tool choice into the IR; artifacts on
every kind of part out of it and back, byte for byte; foreign signatures to modelir's artifact policy."""

from __future__ import annotations

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai.model import (
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ContentImage,
    ContentReasoning,
    ContentText,
    GenerateConfig,
    ResponseSchema,
)
from inspect_ai.tool import ToolCallError, ToolFunction, ToolInfo, ToolParam, ToolParams
from inspect_ai.util import JSONSchema
from modelir import Model, ReferenceModel
from modelir.errors import ForeignArtifactError, UnsupportedCapabilityError
from modelir.integrations.inspect_ai import to_output, to_request
from modelir.v1 import content_pb2, request_pb2, response_pb2

ADD = ToolInfo(
    name="add",
    description="Add two integers.",
    parameters=ToolParams(properties={"x": ToolParam(type="integer"), "y": ToolParam(type="integer")}),
)


def test_generate_config_maps_to_the_ir_fields():
    config = GenerateConfig(
        max_tokens=40,
        temperature=0.0,
        top_p=0.9,
        top_k=5,
        seed=0,
        stop_seqs=["\n", "END"],
        num_choices=2,
        presence_penalty=0.5,
        logprobs=True,
        top_logprobs=4,
        reasoning_tokens=128,
        reasoning_summary="concise",
        response_schema=ResponseSchema(name="answer", json_schema=JSONSchema(type="object")),
        max_retries=3,  # carried out by Inspect itself
    )
    request = to_request(
        "m", [ChatMessageSystem(content="Be brief."), ChatMessageUser(content="Hi")], [], "auto", config
    )
    s = request.sampling
    assert (s.max_output_tokens, s.temperature, s.top_k, s.seed, list(s.stop)) == (40, 0.0, 5, 0, ["\n", "END"])
    assert s.HasField("temperature") and s.HasField("seed")  # zero is a real value
    assert s.top_p == pytest.approx(0.9) and s.choice_count == 2 and s.presence_penalty == 0.5
    assert request.logprob_options.top_logprob_count == 4
    assert request.reasoning_controls.budget_tokens == 128 and request.reasoning_controls.include_thoughts
    assert request.reasoning_controls.summary == request_pb2.REASONING_SUMMARY_CONCISE
    assert request.constraint.json_schema.schema_json == '{"type":"object"}'
    assert [m.role for m in request.conversation.messages] == [content_pb2.ROLE_SYSTEM, content_pb2.ROLE_USER]
    assert not request.tools and not request.HasField("tool_choice")


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", request_pb2.ToolChoice(mode=request_pb2.TOOL_CHOICE_MODE_AUTO)),
        ("any", request_pb2.ToolChoice(mode=request_pb2.TOOL_CHOICE_MODE_REQUIRED)),
        ("none", request_pb2.ToolChoice(mode=request_pb2.TOOL_CHOICE_MODE_NONE)),
        (ToolFunction(name="add"), request_pb2.ToolChoice(tool_name="add")),
    ],
)
def test_tools_and_tool_choice(choice, expected):
    request = to_request("m", [ChatMessageUser(content="2+3?")], [ADD], choice, GenerateConfig())
    assert request.tool_choice == expected
    (tool,) = request.tools
    assert tool.function.name == "add" and '"x":{"type":"integer"}' in tool.function.parameters_json_schema


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (GenerateConfig(logit_bias={1: 1.0}), "GenerateConfig.logit_bias"),
        (GenerateConfig(best_of=3), "GenerateConfig.best_of"),
        (GenerateConfig(extra_body={"x": 1}), "GenerateConfig.extra_body"),
        (GenerateConfig(prompt_logprobs=2), "GenerateConfig.prompt_logprobs"),
        (GenerateConfig(reasoning_effort="xhigh"), "'xhigh' is not an IR level"),
        (GenerateConfig(reasoning_effort="low", reasoning_tokens=10), "not both"),
        (GenerateConfig(parallel_tool_calls=False), "parallel_tool_calls"),
    ],
)
def test_what_the_ir_cannot_say_is_refused_by_name(config, named):
    with pytest.raises(UnsupportedCapabilityError, match=named):
        to_request("m", [ChatMessageUser(content="Hi")], [], "auto", config)


def _issued(kind: int, data: bytes) -> content_pb2.OpaqueArtifact:
    return content_pb2.OpaqueArtifact(
        kind=kind, data=data, issuer=content_pb2.Issuer(transport="google_genai", model="gemini")
    )


def test_artifacts_on_every_kind_of_part_survive_the_turn_byte_for_byte():
    signature = content_pb2.OPAQUE_ARTIFACT_KIND_THOUGHT_SIGNATURE
    message = content_pb2.Message(
        role=content_pb2.ROLE_ASSISTANT,
        parts=[
            content_pb2.Part(
                reasoning=content_pb2.Reasoning(text="thinking", summary=["s1", "s2"]),
                artifacts=[_issued(signature, b"\x00sig")],
            ),
            content_pb2.Part(text="Let me add.", artifacts=[_issued(signature, b"\xfftext")], item_id="msg_1"),
            content_pb2.Part(
                tool_call=content_pb2.ToolCall(id="call_1", name="add", arguments_json='{"x": 2, "y": 3}'),
                artifacts=[_issued(signature, b"call")],
            ),
        ],
    )
    response = response_pb2.Response(model="gemini", choices=[response_pb2.Choice(message=message)])
    response.choices[0].finish_reason = response_pb2.FINISH_REASON_TOOL_CALLS
    output = to_output(response, "gemini")
    assistant = output.message
    assert output.stop_reason == "tool_calls" and assistant.tool_calls[0].arguments == {"x": 2, "y": 3}
    reasoning = assistant.content[0]
    assert isinstance(reasoning, ContentReasoning) and reasoning.summary == "s1\n\ns2"
    # Back into the IR, as the next turn's history: the same parts, artifacts and item ids.
    replayed = to_request("gemini", [ChatMessageUser(content="2+3?"), assistant], [ADD], "auto", GenerateConfig())
    back = replayed.conversation.messages[1]
    for original, again in zip(message.parts, back.parts, strict=True):
        assert list(again.artifacts) == list(original.artifacts) and again.item_id == original.item_id
    assert back.parts[2].tool_call.name == "add" and back.parts[1].text == "Let me add."


def test_images_travel_as_blobs_and_a_detail_level_is_refused():
    pixel = "data:image/png;base64,iVBORw0KGgo="
    request = to_request("m", [ChatMessageUser(content=[ContentImage(image=pixel)])], [], "auto", GenerateConfig())
    blob = request.conversation.messages[0].parts[0].blob
    assert blob.mime_type == "image/png" and blob.data == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(UnsupportedCapabilityError, match=r"ContentImage\.detail 'low'"):
        to_request(
            "m", [ChatMessageUser(content=[ContentImage(image=pixel, detail="low")])], [], "auto", GenerateConfig()
        )


def test_tool_results_and_failures():
    messages = [
        ChatMessageTool(content="5", tool_call_id="call_1", function="add"),
        ChatMessageTool(content="", tool_call_id="call_2", function="add", error=ToolCallError("parsing", "bad x")),
    ]
    request = to_request("m", messages, [ADD], "auto", GenerateConfig())
    ok, failed = (m.parts[0].tool_result for m in request.conversation.messages)
    assert (ok.tool_call_id, ok.name, ok.content[0].text, ok.failed) == ("call_1", "add", "5", False)
    assert (failed.content[0].text, failed.failed) == ("bad x", True)


async def test_a_signature_modelir_did_not_issue_meets_the_foreign_artifact_policy():
    history = [
        ChatMessageUser(content="Hi"),
        ChatMessageAssistant(
            content=[ContentReasoning(reasoning="hmm", signature="EqQBCkYIBhgCKkBa"), ContentText(text="Hello")],
            model="claude-sonnet",
        ),
        ChatMessageUser(content="Again"),
    ]
    request = to_request("reference", history, [], "auto", GenerateConfig(reasoning_effort="low"))
    (artifact,) = request.conversation.messages[1].parts[0].artifacts
    assert artifact.issuer.transport == "inspect" and artifact.data == b"EqQBCkYIBhgCKkBa"
    with pytest.raises(ForeignArtifactError, match="inspect/claude-sonnet"):
        await Model(ReferenceModel(), name="reference").arun(request)
