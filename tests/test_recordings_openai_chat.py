"""Replaying the real OpenAI chat recordings through the openai_chat transport (lift, stream lift, lower)."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from modelir import accumulate, errors
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import request_pb2

from tests.recordings import cassette, vercel_chunks, wire_dir

CHAT = OpenAIChat()


def _plain_request(**extra) -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=3).parts.add(text="hi")
    for key, value in extra.items():
        getattr(request, key).CopyFrom(value)
    return request


def _check_unary(body: dict, response) -> None:
    assert response.id == body["id"] and response.model == body["model"]
    for raw, choice in zip(body["choices"], response.choices, strict=True):
        texts = [p.text for p in choice.message.parts if p.WhichOneof("content") == "text"]
        calls = [p.tool_call for p in choice.message.parts if p.WhichOneof("content") == "tool_call"]
        assert texts == [t for t in (raw["message"].get("content"), raw["message"].get("refusal")) if t is not None]
        assert [(c.id, c.name, c.arguments_json) for c in calls] == [
            (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in raw["message"].get("tool_calls") or []
        ]
        assert choice.raw_finish_reason == raw["finish_reason"]
    usage = body["usage"]
    assert response.usage.input_token_count == usage["prompt_tokens"]
    assert response.usage.output_token_count == usage["completion_tokens"]
    details = usage.get("completion_tokens_details") or {}
    if "reasoning_tokens" in details:
        assert response.usage.reasoning_token_count == details["reasoning_tokens"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is not None:
        assert response.usage.cache_read_token_count == cached


def _cassettes():
    folder = wire_dir("openai_chat")
    return [(path.name, exchange) for path in sorted(folder.glob("*.yaml")) for exchange in cassette(path)]


def test_every_cassette_lifts():
    seen = 0
    for name, exchange in _cassettes():
        seen += 1
        if exchange.status >= 400:
            error = CHAT.error(HttpResponse(exchange.status, exchange.headers, exchange.body))
            assert isinstance(error, errors.ProviderRejectedError), name
            envelope = json.loads(exchange.body)["error"]
            assert error.provider_code == (envelope["code"] or envelope["type"]), name  # code may be null
        elif exchange.sse is not None:
            lifter = CHAT.stream_lifter(_plain_request())
            events = [e for ev, data in exchange.sse for e in lifter.feed(RawEvent(ev, data.encode()))]
            response = accumulate([*events, *lifter.close()])
            chunks = [json.loads(d) for _, d in exchange.sse if d != "[DONE]"]
            text = "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
            args = "".join(
                t["function"].get("arguments", "")
                for ch in chunks
                for c in ch["choices"]
                for t in c["delta"].get("tool_calls") or []
            )
            parts = response.choices[0].message.parts
            assert "".join(p.text for p in parts if p.WhichOneof("content") == "text") == text, name
            assert "".join(p.tool_call.arguments_json for p in parts if p.WhichOneof("content") == "tool_call") == args
            usage = next(c["usage"] for c in chunks if c.get("usage"))
            assert response.usage.input_token_count == usage["prompt_tokens"]
            assert not bool(response.errors), (name, list(response.errors))
            assert response.id == chunks[0]["id"]
        else:
            _check_unary(
                json.loads(exchange.body),
                CHAT.lift(_plain_request(), HttpResponse(200, exchange.headers, exchange.body)),
            )
    assert seen >= 8


def test_vercel_bodies_and_streams_lift():
    folder = wire_dir("openai_chat")
    body = (folder / "vercel__text_response.json").read_bytes()
    _check_unary(json.loads(body), CHAT.lift(_plain_request(), HttpResponse(200, {}, body)))
    error = CHAT.error(HttpResponse(400, {}, (folder / "vercel__error_400_unsupported_parameter.json").read_bytes()))
    assert isinstance(error, errors.ProviderRejectedError) and "max_tokens" in error.message
    for name in ("vercel__text_stream.chunks.jsonl", "vercel__azure_model_router_stream.chunks.jsonl"):
        events = vercel_chunks(folder / name)
        lifter = CHAT.stream_lifter(_plain_request())
        lifted = [e for ev, d in events for e in lifter.feed(RawEvent(ev, d.encode()))]
        response = accumulate([*lifted, *lifter.close()])
        chunks = [json.loads(d) for _, d in events if d != "[DONE]"]
        text = "".join(c["delta"].get("content") or "" for ch in chunks for c in ch["choices"])
        assert response.choices[0].message.parts[0].text == text and len(text) > 10
        assert response.id and response.id == next(c["id"] for c in chunks if c["id"])
        assert (
            response.usage.output_token_count == next(c["usage"] for c in chunks if c.get("usage"))["completion_tokens"]
        )


@pytest.mark.parametrize("index", [0, 1])
def test_lower_matches_the_recorded_tool_round_trip(index):
    exchanges = cassette(wire_dir("openai_chat") / "pydanticai__tool_calls_roundtrip.yaml")
    recorded = exchanges[index].request_body
    request = request_pb2.Request(model="gpt-4o")
    for message in recorded["messages"]:
        entry = request.conversation.messages.add(role={"user": 3, "assistant": 4, "tool": 5}[message["role"]])
        if message["role"] == "tool":
            entry.parts.add().tool_result.CopyFrom(
                json_format.ParseDict(
                    {"toolCallId": message["tool_call_id"], "content": [{"text": message["content"]}]},
                    entry.parts[0].tool_result,
                )
            )
        elif message.get("content"):
            entry.parts.add(text=message["content"])
        for call in message.get("tool_calls") or []:
            tc = entry.parts.add().tool_call
            tc.id, tc.name, tc.arguments_json = call["id"], call["function"]["name"], call["function"]["arguments"]
    for tool in recorded["tools"]:
        function = tool["function"]
        request.tools.add().function.CopyFrom(
            request_pb2.FunctionTool(
                name=function["name"],
                description=function["description"],
                parameters_json_schema=json.dumps(function["parameters"]),
            )
        )
    request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_REQUIRED
    sent = json.loads(CHAT.lower(request, stream=False).body)
    # Defaults the recording spells out and we leave implicit.
    expected = {k: v for k, v in recorded.items() if (k, v) not in (("n", 1), ("stream", False))}
    for tool in expected["tools"]:
        if tool["function"]["description"] == "":
            del tool["function"]["description"]  # an empty description is the same as none
    assert sent == expected
