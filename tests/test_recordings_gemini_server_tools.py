"""Gemini's built-in tools, replayed from the real recordings in ../shared/wire/gemini/server_tools (skipped without).

Code execution parts, grounding citations and candidate metadata, lifted unary and streamed; each stream agrees with
the unary lift of the same candidate; and the second turn we lower equals the one the recorded client sent.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from modelir import accumulate
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.google.genai import GoogleGenAI
from modelir.v1 import content_pb2, request_pb2, response_pb2

from tests.recordings import cassette, wire_dir

RECORDINGS = (
    "pydanticai__executableCode_codeExecutionResult_roundtrip.yaml",
    "pydanticai__groundingMetadata_google_search.yaml",
    "pydanticai__stream_executableCode_codeExecutionResult.yaml",
    "pydanticai__stream_groundingMetadata_google_search.yaml",
    "pydanticai__urlContextMetadata_grounding.yaml",
)


def _exchanges(name: str):
    return cassette(wire_dir("gemini") / "server_tools" / name)


def _request(sent: dict[str, Any]) -> request_pb2.Request:
    """The IR request of a recorded first turn: system text, user text, built-in tools."""
    request = request_pb2.Request(model="gemini")
    for part in sent.get("systemInstruction", {}).get("parts", []):
        request.conversation.messages.add(role=content_pb2.ROLE_SYSTEM).parts.add(text=part["text"])
    for content in sent["contents"]:
        role = content_pb2.ROLE_ASSISTANT if content["role"] == "model" else content_pb2.ROLE_USER
        message = request.conversation.messages.add(role=role)
        for part in content["parts"]:
            message.parts.add(text=part["text"])
    for tool in sent.get("tools", []):
        (kind,) = tool
        request.tools.add().provider.CopyFrom(request_pb2.ProviderTool(transport="google_genai", type=kind))
    return request


def _transport(body: dict[str, Any]) -> GoogleGenAI:
    return GoogleGenAI(provider_model=body.get("modelVersion") or "gemini")


def _lift(request: request_pb2.Request, body: bytes) -> response_pb2.Response:
    return _transport(json.loads(body)).lift(request, HttpResponse(200, {}, body))


def _stream(request: request_pb2.Request, events: list[tuple[str, str]]) -> response_pb2.Response:
    first = json.loads(events[0][1])
    lifter = _transport(first).stream_lifter(request)
    lifted = [e for name, data in events for e in lifter.feed(RawEvent(name, data.encode()))]
    return accumulate([*lifted, *lifter.close()])


def _check_candidate(candidate: dict[str, Any], choice: response_pb2.Choice) -> None:
    """Every native part has its IR part in order, signatures on the same parts, code results paired with their
    code, the candidate metadata verbatim after the parts, and every citation's byte span is the segment text."""
    raw_parts = candidate.get("content", {}).get("parts", [])
    parts = list(choice.message.parts)
    metadata = [k for k in ("groundingMetadata", "urlContextMetadata") if candidate.get(k)]
    assert len(parts) == len(raw_parts) + len(metadata)
    for raw, part in zip(raw_parts, parts, strict=False):
        assert [a.data.decode() for a in part.artifacts] == (
            [raw["thoughtSignature"]] if "thoughtSignature" in raw else []
        )
        if "executableCode" in raw:
            code = raw["executableCode"]
            assert part.server_tool_call.name == "code_execution" and part.server_tool_call.id == code.get("id", "")
            assert json.loads(part.server_tool_call.arguments_json) == {
                "language": code["language"],
                "code": code["code"],
            }
        elif "codeExecutionResult" in raw:
            result = raw["codeExecutionResult"]
            assert json.loads(part.server_tool_result.result_json) == result
            assert part.server_tool_result.tool_call_id == result["id"]
            assert part.server_tool_result.content[0].text == result["output"]
            assert part.server_tool_result.failed == (result["outcome"] != "OUTCOME_OK")
        else:
            assert part.text == raw["text"]
    for key, part in zip(metadata, parts[len(raw_parts) :], strict=True):
        assert part.provider_part.type == f"google_genai.{key}"
        assert json.loads(part.provider_part.native_json) == candidate[key]
    supports = candidate.get("groundingMetadata", {}).get("groundingSupports", [])
    cited = [(part, c) for part in parts for c in part.citations]
    assert len(cited) == sum(len(s["groundingChunkIndices"]) for s in supports)
    chunks = candidate.get("groundingMetadata", {}).get("groundingChunks", [])
    expected = [(s["segment"]["text"], chunks[i]["web"]["uri"]) for s in supports for i in s["groundingChunkIndices"]]
    # Each support lies within one text part here, so its span of that part is exactly the segment's text (bytes:
    # the character offsets would be off after the recordings' "°").
    got = [(part.text.encode()[c.start_byte : c.end_byte].decode(), c.url) for part, c in cited]
    assert sorted(got) == sorted(expected)


def _check_usage(usage: dict[str, Any], response: response_pb2.Response) -> None:
    tool_use = usage.get("toolUsePromptTokenCount", 0)
    assert response.usage.input_token_count == usage["promptTokenCount"] + tool_use
    assert response.usage.input_token_count + response.usage.output_token_count == usage["totalTokenCount"]
    if tool_use:
        assert response.usage.details["tool_use_input_token_count"] == tool_use


@pytest.mark.parametrize("name", RECORDINGS)
def test_every_server_tool_recording_lifts(name):
    exchanges = _exchanges(name)
    request = _request(exchanges[0].request_body)  # the lift does not depend on the turn
    for exchange in exchanges:
        if exchange.sse is None:
            body = json.loads(exchange.body)
            response = _lift(request, exchange.body)
        else:
            chunks = [json.loads(d) for _, d in exchange.sse]
            body = _unary_of(chunks)
            response = _stream(request, exchange.sse)
            # The stream folds into exactly what the unary lift gives for the same candidate.
            unary = _lift(request, json.dumps(body).encode())
            assert response.choices == unary.choices and response.usage == unary.usage
        assert not list(response.errors), list(response.errors)
        (candidate,) = body["candidates"]
        _check_candidate(candidate, response.choices[0])
        _check_usage(body["usageMetadata"], response)


def _unary_of(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The unary answer a stream stands for: its parts in order, consecutive unsigned text chunks joined (as one
    text part), the last non-empty candidate metadata, the last finish reason and the last usage."""
    parts: list[dict[str, Any]] = []
    candidate: dict[str, Any] = {}
    for chunk in chunks:
        (native,) = chunk["candidates"]
        for part in native.get("content", {}).get("parts", []):
            joinable = parts and set(parts[-1]) == {"text"} and "text" in part and not part.get("thought")
            if joinable and (part["text"] or "thoughtSignature" not in part):
                parts[-1] = {**part, "text": parts[-1]["text"] + part["text"]}
            else:
                parts.append(dict(part))
        for key in ("groundingMetadata", "urlContextMetadata", "finishReason"):
            if native.get(key):
                candidate[key] = native[key]
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "index": 0, **candidate}],
        "usageMetadata": chunks[-1]["usageMetadata"],
        "modelVersion": chunks[-1]["modelVersion"],
        "responseId": chunks[-1]["responseId"],
    }


def _same_turn(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """Equal native parts, except that a signature is compared by its bytes: the recorded client re-encoded it
    URL-safe, and we send it exactly as Gemini sent it."""
    assert ours.keys() == theirs.keys()
    for key in ours:
        if key == "thoughtSignature":
            assert base64.b64decode(ours[key]) == base64.urlsafe_b64decode(theirs[key])
        else:
            assert ours[key] == theirs[key], key


@pytest.mark.parametrize("name", [n for n in RECORDINGS if "stream_executableCode" not in n and "urlContext" not in n])
def test_the_second_turn_is_lowered_as_recorded(name):
    first, second = _exchanges(name)[:2]
    request = _request(first.request_body)
    if first.sse is None:
        response = _lift(request, first.body)
    else:
        response = _stream(request, first.sse)
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(response.choices[0].message)
    follow.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(
        text=second.request_body["contents"][-1]["parts"][0]["text"]
    )
    transport = GoogleGenAI(provider_model=response.model)
    sent = json.loads(transport.lower(follow, stream=second.sse is not None).body)
    recorded = second.request_body
    assert sent["tools"] == recorded["tools"]
    assert sent["systemInstruction"]["parts"] == recorded["systemInstruction"]["parts"]
    assert len(sent["contents"]) == len(recorded["contents"])
    for ours, theirs in zip(sent["contents"], recorded["contents"], strict=True):
        assert ours["role"] == theirs["role"] and len(ours["parts"]) == len(theirs["parts"])
        for our_part, their_part in zip(ours["parts"], theirs["parts"], strict=True):
            _same_turn(our_part, their_part)
