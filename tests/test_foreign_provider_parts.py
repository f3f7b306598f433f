"""Provider-run tool parts and citation artifacts travel only to their issuer: rejected, or dropped whole with
their pair, under the request's foreign-artifact policy."""

from __future__ import annotations

import pytest
from modelir.errors import ForeignArtifactError
from modelir.pipeline.artifacts import apply_foreign_artifact_policy, foreign_artifact_count
from modelir.v1 import content_pb2, request_pb2

ANTHROPIC = content_pb2.Issuer(transport="anthropic_messages", model="claude")
SEARCH = content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_SEARCH_RESULT


def _turn(policy=request_pb2.FOREIGN_ARTIFACT_POLICY_UNSPECIFIED) -> request_pb2.Request:
    request = request_pb2.Request(model="m", foreign_artifact_policy=policy)
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="Who was Shannon?")
    turn = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    turn.parts.add(server_tool_call=content_pb2.ServerToolCall(id="s1", name="web_search", issuer=ANTHROPIC))
    result = turn.parts.add(server_tool_result=content_pb2.ServerToolResult(tool_call_id="s1", issuer=ANTHROPIC))
    result.artifacts.add(kind=SEARCH, data=b"Eq", issuer=ANTHROPIC, json_pointer="/content/0/encrypted_content")
    text = turn.parts.add(text="A mathematician.")
    text.citations.add(url="https://a").artifacts.add(
        kind=content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_CITATION, data=b"ix", issuer=ANTHROPIC
    )
    return request


def test_the_issuer_takes_its_own_parts_back():
    request = _turn()
    assert foreign_artifact_count(request, transport="anthropic_messages", model="claude") == 0
    assert apply_foreign_artifact_policy(request, transport="anthropic_messages", model="claude") == (request, [])


def test_another_transport_refuses_them_naming_each_by_default():
    with pytest.raises(ForeignArtifactError) as caught:
        apply_foreign_artifact_policy(_turn(), transport="openai_responses", model="gpt-5")
    message = str(caught.value)
    assert "parts[0] (a server_tool_call of anthropic_messages)" in message
    assert "parts[1].artifacts[0]" in message and "parts[2].citations[0].artifacts[0]" in message


def test_drop_removes_the_call_and_result_pair_and_the_foreign_citation():
    request = _turn(request_pb2.FOREIGN_ARTIFACT_POLICY_DROP)
    cleaned, warnings = apply_foreign_artifact_policy(request, transport="openai_responses", model="gpt-5")
    (kept,) = cleaned.conversation.messages[1].parts
    assert kept.text == "A mathematician." and not kept.citations
    codes = [w.code for w in warnings]
    assert codes.count("foreign_provider_part_dropped") == 2 and "foreign_citation_dropped" in codes


def test_another_model_of_the_same_transport_drops_a_result_whose_payload_it_cannot_read():
    request = _turn(request_pb2.FOREIGN_ARTIFACT_POLICY_DROP)
    cleaned, _ = apply_foreign_artifact_policy(request, transport="anthropic_messages", model="claude-other")
    kinds = [p.WhichOneof("content") for p in cleaned.conversation.messages[1].parts]
    assert kinds == ["text"]  # the result lost its encrypted payload, so it and its call go
