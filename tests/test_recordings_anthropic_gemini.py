"""Anthropic and Gemini: real recordings replayed, reasoning turns through a record file, cross-issuer policy."""

from __future__ import annotations

import base64
import json

import pytest
from modelir import ForeignArtifactError, accumulate, errors
from modelir.pipeline.prepare import Pipeline
from modelir.records import files as records
from modelir.transports.anthropic.messages import AnthropicMessages
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.google.genai import GoogleGenAI
from modelir.v1 import content_pb2, record_pb2, request_pb2, response_pb2

from tests.recordings import cassette, vercel_chunks, wire_dir


def _request() -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
    return request


def _stream(transport, events, request=None):
    lifter = transport.stream_lifter(request or _request())
    lifted = [e for name, data in events for e in lifter.feed(RawEvent(name, data.encode()))]
    return accumulate([*lifted, *lifter.close()])


def _text(response: response_pb2.Response) -> str:
    return "".join(p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text")


# ---- Anthropic --------------------------------------------------------------------------------------


def _check_anthropic_body(body: dict, response: response_pb2.Response) -> None:
    parts = response.choices[0].message.parts
    assert len(parts) == len(body["content"])
    for block, part in zip(body["content"], parts, strict=True):
        if block["type"] == "thinking":
            assert part.reasoning.text == block["thinking"] and part.artifacts[0].data.decode() == block["signature"]
        elif block["type"] == "redacted_thinking":
            assert part.artifacts[0].data.decode() == block["data"]
        elif block["type"] == "tool_use":
            assert json.loads(part.tool_call.arguments_json) == block["input"] and part.tool_call.id == block["id"]
        else:
            assert part.text == block["text"]
    usage = body["usage"]
    cached = (usage.get("cache_read_input_tokens") or 0) + (usage.get("cache_creation_input_tokens") or 0)
    assert response.usage.input_token_count == usage["input_tokens"] + cached
    assert response.choices[0].raw_finish_reason == body["stop_reason"]


def test_every_anthropic_recording_lifts():
    transport = AnthropicMessages()
    seen = 0
    for path in sorted(wire_dir("anthropic_messages").glob("*.yaml")):
        for exchange in cassette(path):
            seen += 1
            if exchange.status >= 400:
                error = transport.error(HttpResponse(exchange.status, exchange.headers, exchange.body))
                assert isinstance(error, errors.ProviderRejectedError) and error.provider_code.endswith("_error")
            elif exchange.sse is None:
                _check_anthropic_body(
                    json.loads(exchange.body), transport.lift(_request(), HttpResponse(200, {}, exchange.body))
                )
            else:
                response = _stream(transport, exchange.sse)
                assert not bool(response.errors), (path.name, list(response.errors))
                deltas = [json.loads(d) for _, d in exchange.sse]
                text = "".join(d["delta"].get("text", "") for d in deltas if d["type"] == "content_block_delta")
                assert _text(response) == text
                last_usage = [d["usage"] for d in deltas if d["type"] == "message_delta"][-1]
                assert response.usage.output_token_count == last_usage["output_tokens"]  # cumulative, not summed
                for d in deltas:
                    if d["type"] == "content_block_delta" and d["delta"]["type"] == "signature_delta":
                        part = response.choices[0].message.parts[d["index"]]
                        assert part.artifacts[0].data.decode() == d["delta"]["signature"]
    assert seen >= 12


def test_anthropic_vercel_streams_parse_tool_input():
    folder = wire_dir("anthropic_messages")
    for name in (
        "vercel__stream_tool_use_input_json_delta.chunks.jsonl",
        "vercel__stream_text_then_tool_use_no_args.chunks.jsonl",
    ):
        events = vercel_chunks(folder / name, done=False)
        response = _stream(AnthropicMessages(), events)
        calls = [p.tool_call for p in response.choices[0].message.parts if p.WhichOneof("content") == "tool_call"]
        partials = "".join(
            json.loads(d)["delta"].get("partial_json", "") for _, d in events if '"input_json_delta"' in d
        )
        assert calls and json.loads(calls[0].arguments_json) == (json.loads(partials) if partials else {})
    text = _stream(AnthropicMessages(), vercel_chunks(folder / "vercel__stream_text.chunks.jsonl", done=False))
    assert _text(text) and not bool(text.errors)


def _roundtrip_anthropic(path: str, tmp_path) -> None:
    first, second = cassette(wire_dir("anthropic_messages") / path)[:2]
    sent_first, sent_second = first.request_body, second.request_body
    transport = AnthropicMessages(provider_model=sent_first["model"])
    request = request_pb2.Request(model="claude")
    user = request.conversation.messages.add(role=content_pb2.ROLE_USER)
    for block in sent_first["messages"][0]["content"]:
        user.parts.add(text=block["text"])
    request.sampling.max_output_tokens = sent_first["max_tokens"]
    if "thinking" in sent_first:
        request.reasoning_controls.budget_tokens = sent_first["thinking"]["budget_tokens"]
    for tool in sent_first.get("tools", []):
        request.tools.add().function.CopyFrom(
            request_pb2.FunctionTool(
                name=tool["name"],
                description=tool["description"],
                parameters_json_schema=json.dumps(tool["input_schema"]),
            )
        )
    if "tool_choice" in sent_first:
        request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_AUTO
    lifted = transport.lift(request, HttpResponse(200, first.headers, first.body))

    path_ = tmp_path / "turns.binpb"
    with records.RecordWriter.create(path_, fmt=records.BINARY) as writer:
        writer.append(record_pb2.Record(key="t1", request=request, response=lifted, status=record_pb2.RECORD_STATUS_OK))
    (stored,) = records.read_records(path_)

    follow = request_pb2.Request()
    follow.CopyFrom(stored.request)
    follow.conversation.messages.append(stored.response.choices[0].message)
    for message in sent_second["messages"][2:]:
        turn = follow.conversation.messages.add(role=content_pb2.ROLE_USER)
        for block in message["content"]:
            if block["type"] == "tool_result":
                turn.role = content_pb2.ROLE_TOOL
                result = turn.parts.add().tool_result
                result.tool_call_id, result.failed = block["tool_use_id"], block["is_error"]
                result.content.add(text=block["content"])
            else:
                turn.parts.add(text=block["text"])
    sent = json.loads(transport.lower(follow, stream=False).body)
    assert sent["messages"][1] == sent_second["messages"][1]  # the assistant turn, byte for byte in content
    assert sent["messages"] == sent_second["messages"]


@pytest.mark.parametrize(
    "cassette_name",
    [
        "pydanticai__tool_use_with_thinking.yaml",
        "pydanticai__thinking_signature_roundtrip.yaml",
        "pydanticai__redacted_thinking_roundtrip.yaml",
    ],
)
def test_anthropic_reasoning_turn_survives_a_record_round_trip(cassette_name, tmp_path):
    _roundtrip_anthropic(cassette_name, tmp_path)


# ---- Gemini -----------------------------------------------------------------------------------------


def test_every_gemini_recording_lifts():
    transport = GoogleGenAI()
    seen = 0
    for path in sorted(wire_dir("gemini").glob("*.yaml")):
        for exchange in cassette(path):
            seen += 1
            if exchange.sse is not None:
                response = _stream(transport, exchange.sse)
                chunks = [json.loads(d) for _, d in exchange.sse]
                text = "".join(
                    p.get("text", "")
                    for c in chunks
                    for cand in c.get("candidates", [])
                    for p in cand.get("content", {}).get("parts", [])
                    if not p.get("thought")
                )
                assert _text(response) == text and not bool(response.errors), path.name
                signatures = [
                    p["thoughtSignature"]
                    for c in chunks
                    for cand in c.get("candidates", [])
                    for p in cand.get("content", {}).get("parts", [])
                    if "thoughtSignature" in p
                ]
                got = [a.data.decode() for p in response.choices[0].message.parts for a in p.artifacts]
                assert got == signatures
                continue
            if exchange.status >= 400:
                assert isinstance(transport.error(HttpResponse(exchange.status, {}, exchange.body)), errors.ModelError)
                continue
            body = json.loads(exchange.body)
            if "candidates" not in body and "promptFeedback" not in body:
                continue  # not a generateContent answer (e.g. a token count)
            response = transport.lift(_request(), HttpResponse(200, {}, exchange.body))
            for candidate, choice in zip(body["candidates"], response.choices, strict=True):
                assert choice.raw_finish_reason == candidate["finishReason"]
                raw_parts = candidate.get("content", {}).get("parts", [])
                assert len(choice.message.parts) == len(raw_parts)
                if "logprobsResult" in candidate:
                    chosen = candidate["logprobsResult"]["chosenCandidates"]
                    assert list(choice.logprobs.token_ids) == [c["tokenId"] for c in chosen]
            usage = body["usageMetadata"]
            assert response.usage.output_token_count == usage.get("candidatesTokenCount", 0) + usage.get(
                "thoughtsTokenCount", 0
            )
            assert response.usage.input_token_count == usage["promptTokenCount"]
    assert seen >= 10


def test_gemini_vercel_recordings():
    folder = wire_dir("gemini")
    error = GoogleGenAI().error(
        HttpResponse(429, {}, (folder / "vercel__error_429_resource_exhausted_retryinfo.json").read_bytes())
    )
    assert isinstance(error, errors.RateLimitedError) and error.retry_after == pytest.approx(34.4)
    body = (folder / "vercel__gemini3_functionCall_thoughtSignature.json").read_bytes()
    response = GoogleGenAI().lift(_request(), HttpResponse(200, {}, body))
    call = response.choices[0].message.parts[0]
    assert call.WhichOneof("content") == "tool_call" and call.artifacts
    empty = _stream(
        GoogleGenAI(),
        vercel_chunks(folder / "vercel__stream_gemini3_thought_signature_on_empty_text.chunks.jsonl", done=False),
    )
    last = empty.choices[0].message.parts[-1]
    assert last.text == "" and last.artifacts  # the signature stays on its own empty-text part
    streamed_args = _stream(
        GoogleGenAI(), vercel_chunks(folder / "vercel__stream_tool_call_arguments.chunks.jsonl", done=False)
    )
    calls = [p.tool_call for p in streamed_args.choices[0].message.parts if p.WhichOneof("content") == "tool_call"]
    assert [(c.name, json.loads(c.arguments_json)) for c in calls] == [
        ("getWeather", {"location": "Boston"}),
        ("getWeather", {"location": "San Francisco"}),
    ]
    thoughts = _stream(
        GoogleGenAI(),
        vercel_chunks(folder / "vercel__stream_gemini3_thoughtsTokenCount_signature_b.chunks.jsonl", done=False),
    )
    assert thoughts.usage.reasoning_token_count > 0 and not bool(thoughts.errors)


def test_gemini_thought_signature_turn_survives_a_record_round_trip(tmp_path):
    first, second = cassette(wire_dir("gemini") / "pydanticai__thinking_thought_signature_roundtrip.yaml")[:2]
    sent_first, sent_second = first.request_body, second.request_body
    transport = GoogleGenAI(provider_model="gemini-3-pro-preview")
    request = request_pb2.Request(model="gemini")
    request.conversation.messages.add(role=content_pb2.ROLE_SYSTEM).parts.add(
        text=sent_first["systemInstruction"]["parts"][0]["text"]
    )
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(
        text=sent_first["contents"][0]["parts"][0]["text"]
    )
    request.reasoning_controls.include_thoughts = True
    lifted = transport.lift(request, HttpResponse(200, first.headers, first.body))
    path = tmp_path / "turns.jsonl"
    with records.RecordWriter.create(path) as writer:
        writer.append(record_pb2.Record(key="t1", request=request, response=lifted, status=record_pb2.RECORD_STATUS_OK))
    (stored,) = records.read_records(path)
    follow = request_pb2.Request()
    follow.CopyFrom(stored.request)
    follow.conversation.messages.append(stored.response.choices[0].message)
    follow.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(
        text=sent_second["contents"][2]["parts"][0]["text"]
    )
    sent = json.loads(transport.lower(follow, stream=False).body)
    model_turn, recorded_turn = sent["contents"][1], sent_second["contents"][1]
    received = json.loads(first.body)["candidates"][0]["content"]["parts"]
    for ours, theirs, original in zip(model_turn["parts"], recorded_turn["parts"], received, strict=True):
        assert ours.get("text") == theirs.get("text") and ours.get("thought") == theirs.get("thought")
        if "thoughtSignature" in theirs:
            # We send the signature exactly as Gemini sent it; the recorded client re-encoded it URL-safe, and the
            # bytes are the same either way.
            assert ours["thoughtSignature"] == original["thoughtSignature"]
            assert base64.b64decode(ours["thoughtSignature"]) == base64.urlsafe_b64decode(theirs["thoughtSignature"])


# ---- the cross-issuer policy, both ways, on both transports -----------------------------------------


def _turn_with(artifact_kind: int, transport: str, model: str) -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="q")
    turn = request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT)
    part = turn.parts.add()
    part.reasoning.text = "thoughts"
    part.artifacts.add(kind=artifact_kind, data=b"c2ln", issuer=content_pb2.Issuer(transport=transport, model=model))
    turn.parts.add(text="answer")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="again")
    return request


@pytest.mark.parametrize(
    ("transport", "own_kind", "foreign"),
    [
        (
            AnthropicMessages(provider_model="claude-sonnet-4-0"),
            content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE,
            ("google_genai", "gemini-2.5-pro"),
        ),
        (
            GoogleGenAI(provider_model="gemini-2.5-pro"),
            content_pb2.OPAQUE_ARTIFACT_KIND_THOUGHT_SIGNATURE,
            ("anthropic_messages", "claude-sonnet-4-0"),
        ),
    ],
    ids=["anthropic", "gemini"],
)
async def test_cross_issuer_policy_both_ways(transport, own_kind, foreign):
    pipeline = Pipeline(transport)
    request = _turn_with(own_kind, *foreign)
    with pytest.raises(ForeignArtifactError, match="another issuer"):
        pipeline.check(request)
    request.foreign_artifact_policy = request_pb2.FOREIGN_ARTIFACT_POLICY_DROP
    cleaned, warnings = pipeline.check(request)
    assert [w.code for w in warnings] == ["foreign_reasoning_dropped"]
    body = json.loads(transport.lower(cleaned, stream=False).body)
    assert "thoughts" not in json.dumps(body)  # reasoning never goes out without its issuer's signature
    own = _turn_with(own_kind, transport.name, transport.provider_model)
    same, none = pipeline.check(own)
    assert not none and "thoughts" in json.dumps(json.loads(transport.lower(same, stream=False).body))


async def test_artifacts_name_the_model_they_were_sent_to_so_replay_is_not_foreign():
    """Without a configured provider model the request's name is sent; the provider reports a dated variant
    (claude-sonnet-4-0 -> claude-sonnet-4-20250514). The artifact names what was sent, so it replays cleanly."""
    exchange = cassette(wire_dir("anthropic_messages") / "pydanticai__tool_use_with_thinking.yaml")[0]
    transport = AnthropicMessages()
    request = request_pb2.Request(model="claude-sonnet-4-0")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="q")
    lifted = transport.lift(request, HttpResponse(200, {}, exchange.body))
    assert lifted.model == "claude-sonnet-4-20250514"
    assert lifted.choices[0].message.parts[0].artifacts[0].issuer.model == "claude-sonnet-4-0"
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(lifted.choices[0].message)
    follow.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="again")
    _, warnings = Pipeline(transport).check(follow)
    assert warnings == []
