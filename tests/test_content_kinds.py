"""The content-kind registry matches the spec, and every transport has decided on every kind of `Part`."""

from __future__ import annotations

import pytest
from modelir.pipeline import content_kinds
from modelir.pipeline.capabilities import unsupported
from modelir.transports import TRANSPORTS
from modelir.transports.reference import ReferenceModel
from modelir.v1 import content_pb2, request_pb2

# The reference model (in-process, its own lowering) decides through its manifest: it renders text, reasoning,
# tool calls and results into its chat template, and refuses blobs because it claims no IMAGE_INPUT.
REFERENCE_DECISIONS = {
    "text": "carried",
    "refusal": "carried",
    "reasoning": "carried",
    "tool_call": "carried",
    "tool_result": "carried",
}
# Blobs need IMAGE_INPUT; provider-run tools and provider parts need SERVER_TOOL_REPLAY: the manifest lacks both.
REFERENCE_REFUSED_BY_MANIFEST = {"blob", "server_tool_call", "server_tool_result", "provider_part", "compaction"}


def test_the_registry_has_exactly_the_kinds_of_the_spec():
    assert set(content_kinds.KINDS) == set(content_kinds.spec_kinds())


@pytest.mark.parametrize("name", sorted(set(TRANSPORTS) - {"reference"}))
def test_every_transport_decides_on_every_kind(name):
    transport = TRANSPORTS[name]({})
    assert set(transport.part_kinds) == set(content_kinds.spec_kinds()), (
        f"{name} must say, for each Part kind, CARRIED or why it refuses it"
    )


def test_the_reference_model_decides_on_every_kind():
    assert set(REFERENCE_DECISIONS) | REFERENCE_REFUSED_BY_MANIFEST == set(content_kinds.spec_kinds())
    manifest = ReferenceModel().manifest()
    for kind in REFERENCE_REFUSED_BY_MANIFEST:
        capability = content_kinds.KINDS[kind].capability
        assert capability and capability not in manifest.capabilities


def _request_with(part: content_pb2.Part) -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    message = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    message.parts.append(part)
    return request


def test_a_kind_a_transport_refuses_is_rejected_before_any_io():
    openai_chat = TRANSPORTS["openai_chat"]({})
    request = _request_with(content_pb2.Part(reasoning=content_pb2.Reasoning(text="hm")))
    reasons = openai_chat.extra_unsupported(request)
    assert any("cannot replay reasoning (conversation.messages[0].parts[0])" in r for r in reasons)


def test_a_kind_a_transport_has_not_decided_on_is_refused(monkeypatch):
    chat = TRANSPORTS["openai_chat"]({})
    monkeypatch.setattr(type(chat), "part_kinds", {"text": content_kinds.CARRIED})
    request = _request_with(content_pb2.Part(tool_call=content_pb2.ToolCall(id="c", name="f")))
    assert any("has not decided how to carry tool_call parts" in r for r in chat.extra_unsupported(request))


def test_the_capability_check_fails_closed_for_a_kind_it_does_not_know(monkeypatch):
    monkeypatch.setattr(content_kinds, "KINDS", {k: v for k, v in content_kinds.KINDS.items() if k != "blob"})
    request = _request_with(content_pb2.Part(blob=content_pb2.Blob(mime_type="image/png", data=b"x")))
    gaps = unsupported(request, TRANSPORTS["google_genai"]({}).manifest())
    assert gaps is not None and any("'blob' is not known" in r for r in gaps.reasons)


def test_a_lowering_without_a_lowering_for_a_kind_raises_a_typed_error():
    chat = TRANSPORTS["openai_chat"]({})
    request = _request_with(content_pb2.Part(reasoning=content_pb2.Reasoning(text="hm")))
    with pytest.raises(content_kinds.NotCarriedError, match="cannot carry reasoning parts"):
        chat.lower(request, stream=False)


def test_unfolding_a_kind_that_never_streams_is_a_typed_error():
    from modelir import errors
    from modelir.streams.fold import events_from_response
    from modelir.v1 import response_pb2

    response = response_pb2.Response()
    response.choices.add().message.parts.add(tool_result=content_pb2.ToolResult(tool_call_id="c"))
    with pytest.raises(errors.InternalError, match="cannot be sent as stream deltas"):
        list(events_from_response(response))


@pytest.mark.parametrize("name", ["ollama", "openai_responses", "google_genai"])
def test_an_image_in_a_tool_result_is_refused_where_tool_results_are_text_only(name):
    request = request_pb2.Request(model="m")
    message = request.conversation.messages.add(role=content_pb2.ROLE_TOOL)
    result = message.parts.add(tool_result=content_pb2.ToolResult(tool_call_id="c")).tool_result
    result.content.add(blob=content_pb2.Blob(mime_type="image/png", data=b"x"))
    reasons = TRANSPORTS[name]({}).extra_unsupported(request)
    assert any("only text in tool results" in r and "content[0] is blob" in r for r in reasons)
