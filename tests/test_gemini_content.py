"""Gemini v1 content beyond the fixtures: grounding chunk kinds, citation spans, partialArgs paths, replay refusals."""

from __future__ import annotations

import json

import pytest
from modelir.pipeline.prepare import Pipeline
from modelir.transports.base import RawEvent
from modelir.transports.google import genai_stream, parts
from modelir.transports.google.genai import GoogleGenAI
from modelir.v1 import content_pb2, request_pb2


def test_grounding_chunk_kinds_become_citations_of_their_kind():
    grounding = {
        "groundingChunks": [
            {"maps": {"uri": "https://maps.google.com/?cid=1", "title": "Cafe"}},
            {"retrievedContext": {"uri": "gs://bucket/doc.pdf", "title": "doc.pdf"}},
            {"image": {"uri": "https://example.com/a.png"}},
        ],
        "groundingSupports": [
            {"segment": {"startIndex": 2, "endIndex": 5}, "groundingChunkIndices": [0, 1, 2, 7]},
        ],
    }
    cited = parts.citations(grounding, ["abcdef", None])
    assert list(cited) == [0]
    maps, document, other = cited[0]  # the out-of-range chunk index 7 names no source: nothing to cite
    assert (maps.kind, maps.url, maps.title) == (
        content_pb2.CITATION_KIND_URL,
        "https://maps.google.com/?cid=1",
        "Cafe",
    )
    assert (document.kind, document.url) == (content_pb2.CITATION_KIND_DOCUMENT, "gs://bucket/doc.pdf")
    assert (
        other.kind == content_pb2.CITATION_KIND_UNSPECIFIED
        and json.loads(other.native_json) == grounding["groundingChunks"][2]
    )
    assert [(c.start_byte, c.end_byte) for c in cited[0]] == [(2, 5)] * 3


def test_a_span_is_mapped_onto_the_text_parts_it_covers_skipping_other_parts():
    texts = ["héllo ", None, "wörld"]  # bytes 0-7, a code part, bytes 7-13
    grounding = {
        "groundingChunks": [{"web": {"uri": "https://a", "title": "a"}}],
        "groundingSupports": [{"segment": {"startIndex": 3, "endIndex": 10}, "groundingChunkIndices": [0]}],
    }
    cited = parts.citations(grounding, texts)
    assert sorted(cited) == [0, 2]
    assert (cited[0][0].start_byte, cited[0][0].end_byte) == (3, 7)
    assert (cited[2][0].start_byte, cited[2][0].end_byte) == (0, 3)
    assert "héllo ".encode()[3:7].decode() + "wörld".encode()[0:3].decode() == "llo wö"
    assert parts.citations({}, texts) == {} and parts.citations("junk", texts) == {}


@pytest.mark.parametrize(
    ("path", "steps"),
    [
        ("$.a", ["a"]),
        ("$.items[0].name", ["items", 0, "name"]),
        ("$.m[1][2]", ["m", 1, 2]),
        ("$['odd key'].x", ["odd key", "x"]),
        ("a.b", None),
        ("$.a[x]", None),
        ("$", None),
    ],
)
def test_partial_args_paths(path, steps):
    assert genai_stream._path_steps(path) == steps


def test_partial_args_that_cannot_apply_are_reported_not_guessed():
    warnings: list[str] = []
    args: dict = {"a": "text"}
    genai_stream._apply_partial(args, {"jsonPath": "$[0]", "numberValue": 1}, warnings)
    genai_stream._apply_partial(args, {"jsonPath": "$.a[0]", "numberValue": 1}, warnings)
    genai_stream._apply_partial(args, {"jsonPath": "$.b[1]", "stringValue": "x"}, warnings)
    genai_stream._apply_partial(args, {"jsonPath": "$.b[1]", "stringValue": "y"}, warnings)
    assert args == {"a": "text", "b": [None, "xy"]}
    assert len(warnings) == 2 and "not supported" in warnings[0] and "conflicts" in warnings[1]


def test_a_stream_cut_inside_a_streamed_call_is_truncated():
    request = request_pb2.Request(model="g")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="x")
    lifter = GoogleGenAI().stream_lifter(request)
    chunk = {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "willContinue": True}}]}}]}
    lifter.feed(RawEvent("", json.dumps(chunk).encode()))
    (end,) = lifter.close(interrupted=True)
    assert [e.reason for e in end.end.errors] == [12]  # TRUNCATED_STREAM: no finishReason ended the call


def _replay(*assistant_parts: content_pb2.Part) -> request_pb2.Request:
    request = request_pb2.Request(model="gemini-3-flash-preview")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="q")
    request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT).parts.extend(assistant_parts)
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="next")
    return request


def test_replay_refuses_parts_gemini_cannot_rebuild():
    own = content_pb2.Issuer(transport="google_genai", model="gemini-3-flash-preview")
    request = _replay(
        content_pb2.Part(server_tool_call=content_pb2.ServerToolCall(name="code_execution", arguments_json="[1]")),
        content_pb2.Part(server_tool_result=content_pb2.ServerToolResult(name="code_execution", result_json="")),
        content_pb2.Part(
            provider_part=content_pb2.ProviderPart(type="google_genai.toolCall", native_json="[]", issuer=own)
        ),
        content_pb2.Part(
            provider_part=content_pb2.ProviderPart(
                type="anthropic_messages.x", native_json="{}", issuer=content_pb2.Issuer(transport="google_genai")
            )
        ),
    )
    reasons = GoogleGenAI().wire_unsupported(request)
    assert len(reasons) == 4
    assert "arguments must be a JSON object" in reasons[0] and "result_json, a JSON object" in reasons[1]
    assert "native_json must be a JSON object" in reasons[2] and "'anthropic_messages.x'" in reasons[3]


def test_grounding_metadata_is_not_sent_back_but_other_provider_parts_are():
    own = content_pb2.Issuer(transport="google_genai", model="gemini-3-flash-preview")
    request = _replay(
        content_pb2.Part(text="answer"),
        content_pb2.Part(
            provider_part=content_pb2.ProviderPart(
                type="google_genai.groundingMetadata", native_json='{"webSearchQueries":["q"]}', issuer=own
            )
        ),
        content_pb2.Part(
            provider_part=content_pb2.ProviderPart(
                type="google_genai.toolCall", native_json='{"toolCall":{"id":"t"}}', issuer=own
            )
        ),
    )
    prepared = Pipeline(GoogleGenAI(provider_model="gemini-3-flash-preview")).prepare(request)
    body = json.loads(prepared.native.body)
    assert body["contents"][1]["parts"] == [{"text": "answer"}, {"toolCall": {"id": "t"}}]


def test_a_built_in_tool_config_that_is_not_an_object_is_refused():
    request = _replay(content_pb2.Part(text="a"))
    request.tools.add().provider.CopyFrom(
        request_pb2.ProviderTool(transport="google_genai", type="googleSearch", config_json="[1]")
    )
    assert any("config_json must be a JSON object" in r for r in GoogleGenAI().wire_unsupported(request))
    request.tools[0].provider.config_json = '{"timeRangeFilter": {}}'
    body = json.loads(GoogleGenAI().lower(request, stream=False).body)
    assert body["tools"] == [{"googleSearch": {"timeRangeFilter": {}}}]
