"""The pipeline walks a request's conversation once (`pipeline.survey`), and every check reads that one walk: the
same verdicts, in the same order, as the generic walks they replaced (#37)."""

from __future__ import annotations

import orjson
import pytest
from google.protobuf import json_format
from modelir import build_request, errors
from modelir.conformance import runner
from modelir.pipeline import content_kinds, media_policy, survey
from modelir.pipeline.prepare import Pipeline
from modelir.registry import build_transport
from modelir.transports.base import HttpTransport
from modelir.transports.llamacpp.chat import LlamaCppChat
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.vllm.chat import VLLMChat
from modelir.v1 import content_pb2, request_pb2


def _conversation() -> request_pb2.Request:
    """A system turn, a user turn with an image and options, an assistant call with an artifact, its result with a
    nested result holding a blob by URI."""
    request = build_request("m", messages=[("system", "be brief"), ("user", "look")])
    user = request.conversation.messages[1]
    user.parts.add(blob=content_pb2.Blob(mime_type="image/png", uri="https://example.com/a.png"))
    user.parts[0].provider_options.add(transport="openai_chat", options_json="{}")
    assistant = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    call = assistant.parts.add(tool_call=content_pb2.ToolCall(id="c1", name="f", arguments_json="{}"))
    call.artifacts.add(kind=content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE, data=b"s").issuer.transport = "other"
    result = request.conversation.messages.add(role=content_pb2.ROLE_TOOL).parts.add().tool_result
    result.tool_call_id = "c1"
    inner = result.content.add().tool_result
    inner.tool_call_id = "c0"
    inner.content.add(blob=content_pb2.Blob(mime_type="image/png", uri="http://169.254.169.254/x.png"))
    return request


def test_one_walk_notes_what_every_check_needs():
    seen = survey.survey(_conversation())
    assert [m.role for m in seen.messages] == [
        content_pb2.ROLE_SYSTEM,
        content_pb2.ROLE_USER,
        content_pb2.ROLE_ASSISTANT,
        content_pb2.ROLE_TOOL,
    ]
    assert [(j, k, kind) for j, k, _, kind, _ in seen.messages[3].parts] == [
        (0, -1, "tool_result"),
        (0, 0, "tool_result"),
    ]
    assert seen.system and seen.artifacts and not seen.token_turns and not seen.cache_breakpoints
    assert [(i, j, k) for i, j, k, _ in seen.provider_options] == [(1, 0, -1)]
    assert [(i, j, kind) for i, j, _, kind in seen.issued] == [(2, 0, "tool_call")]
    assert [(i, j, k, kind) for i, j, k, _, kind in seen.media] == [(1, 1, -1, "blob"), (3, 0, 0, "tool_result")]
    assert seen.present == {"model", "conversation", "sampling"} and seen.sampling == {}
    prompt = survey.survey(build_request("m", prompt="once upon"))
    assert prompt == survey.Survey(present=frozenset({"model", "prompt", "sampling"}))


def test_the_survey_notes_the_fields_set_once():
    """Validation and the capability check read which fields a request sets from the survey (#37): a oneof's
    member by its name, a repeated field when not empty, a scalar when not its zero, an optional one when set."""
    request = build_request("m", prompt="p", temperature=0.0, stop=["x"], max_output_tokens=0)
    request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_UNSPECIFIED  # a oneof member set to its zero
    seen = survey.survey(request)
    assert seen.present == {"model", "prompt", "sampling", "tool_choice"}
    assert dict(seen.sampling.items()) == {"temperature": 0.0, "max_output_tokens": 0, "stop": ["x"]}


def test_the_media_check_on_the_survey_names_what_the_generic_walk_names():
    request = _conversation()
    with pytest.raises(errors.InvalidRequestError) as generic:
        media_policy.check(request)
    with pytest.raises(errors.InvalidRequestError) as surveyed:
        media_policy.check(request, media_policy.DEFAULT_POLICY, survey.survey(request))
    assert list(surveyed.value.violations) == list(generic.value.violations)
    assert [v.field for v in surveyed.value.violations] == [
        "conversation.messages[3].parts[0].tool_result.content[0].tool_result.content[0].blob.uri"
    ]


def test_a_blob_sits_only_where_the_survey_looks():
    """The survey notes blobs and provider-run tools' results, and a tool result's own results: if the spec adds
    another place a `Blob` can sit, this fails until the survey looks there too."""
    assert media_policy._blob_fields(request_pb2.Request) == (("conversation", False),)
    assert media_policy._blob_fields(request_pb2.Conversation) == (("messages", True),)
    assert media_policy._blob_fields(content_pb2.Message) == (("parts", True),)
    assert {name for name, _ in media_policy._blob_fields(content_pb2.Part)} == {
        "blob",
        *survey.MEDIA_KINDS,
        "tool_result",
    }


def test_prepare_walks_the_conversation_once(monkeypatch):
    walks = []
    real = survey.survey

    def counted(request):
        walks.append(request)
        return real(request)

    def refused(message):
        raise AssertionError("a check walked the parts again")

    monkeypatch.setattr(content_kinds, "parts_of", refused)
    for module in ("prepare", "validation", "capabilities", "artifacts"):
        monkeypatch.setattr(f"modelir.pipeline.{module}.survey", counted)
    monkeypatch.setattr("modelir.transports.base.survey", counted)
    request = build_request("m", messages=[("system", "be brief"), ("user", "Hello!")], max_output_tokens=16)
    prepared = Pipeline(OpenAIChat(provider_model="m"), model="m").prepare(request, media=media_policy.DEFAULT_POLICY)
    assert prepared.native is not None
    assert walks == [request]


def _kinds_of_every_sort() -> request_pb2.Request:
    """A system turn, a user turn with an image, an assistant tool call, and its text result."""
    request = build_request("m", messages=[("system", "be brief"), ("user", "look")], max_output_tokens=16)
    request.conversation.messages[1].parts.add(blob=content_pb2.Blob(mime_type="image/png", data=b"png"))
    assistant = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    assistant.parts.add(tool_call=content_pb2.ToolCall(id="c1", name="f", arguments_json="{}"))
    result = request.conversation.messages.add(role=content_pb2.ROLE_TOOL).parts.add().tool_result
    result.tool_call_id = "c1"
    result.content.add(text="42")
    request.tools.add().function.name = "f"
    return request


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("openai_chat", "modelir.transports.openai.chat"),
        ("openai_responses", "modelir.transports.openai.responses"),
        ("anthropic_messages", "modelir.transports.anthropic.messages"),
        ("google_genai", "modelir.transports.google.genai"),
    ],
)
def test_the_wire_checks_and_the_lowering_read_the_pipelines_walk(monkeypatch, name, module):
    """`prepare` lowers from its own survey (`lower_surveyed`): the transport neither surveys nor walks the parts
    again, and the bytes are those `lower` makes from a survey of its own."""
    transport = build_transport(name, {})
    request = _kinds_of_every_sort()
    direct = transport.lower(request, stream=False)

    def refused(request):
        raise AssertionError("the transport walked the conversation again")

    monkeypatch.setattr(f"{module}.survey", refused)
    monkeypatch.setattr("modelir.transports.base.survey", refused)
    prepared = Pipeline(transport).prepare(request)
    assert prepared.native == direct


def test_every_fixture_lowers_to_the_same_bytes_from_the_pipelines_walk():
    """On every conformance fixture of every HTTP transport, `prepare` (the lowering reading the pipeline's
    survey) sends the bytes `lower` (its own walk) sends; a dialect that extends only `body` (vLLM's and
    llama-server's chat) is lowered through its `body`."""
    compared = 0
    for path in sorted(runner.DEFAULT_FIXTURES.glob("*/*.json")):
        fixture = orjson.loads(path.read_bytes())
        if (
            "request" not in fixture
            or "expected_rejection" in fixture
            or fixture.get("operation") in ("tokenize", "embed")
        ):
            continue
        transport = build_transport(path.parent.name, fixture.get("transport_options", {}))
        assert isinstance(transport, HttpTransport)
        request = json_format.Parse(orjson.dumps(fixture["request"]), request_pb2.Request())
        streaming = fixture.get("mode") == "stream"
        prepared = Pipeline(transport).prepare(request, streaming=streaming)
        if prepared.native is not None:
            assert prepared.native == transport.lower(prepared.request, stream=streaming), path
            compared += 1
    assert compared > 150  # every exchange fixture (192 when written)
    for dialect in (VLLMChat(), LlamaCppChat()):
        request = build_request("m", messages=[("user", "Hello!")], max_output_tokens=16)
        request.sampling.stop.append("x")
        assert Pipeline(dialect).prepare(request).native == dialect.lower(request, stream=False)


def test_a_refused_media_uri_comes_before_the_field_violations():
    request = build_request("m", messages=[("user", "look")])
    request.conversation.messages[0].parts.add(blob=content_pb2.Blob(mime_type="image/png", uri="file:///etc/passwd"))
    request.conversation.messages.add()  # no role: a field violation
    pipeline = Pipeline(OpenAIChat(provider_model="m"), model="m")
    with pytest.raises(errors.InvalidRequestError) as caught:
        pipeline.check(request, media=media_policy.DEFAULT_POLICY)
    assert [v.field for v in caught.value.violations] == ["conversation.messages[0].parts[1].blob.uri"]
    report = pipeline.report(request, media=media_policy.DEFAULT_POLICY)
    assert [v.field for v in report.field_violations] == ["conversation.messages[0].parts[1].blob.uri"]
    assert [v.field for v in pipeline.report(request).field_violations] == ["conversation.messages[1].role"]
