"""Anthropic server tools and citations: every recording in shared/wire/anthropic_messages/server_tools replayed.

Unary answers lift into server tool calls and results (opaque members as pointed artifacts), cited text parts and
the message facts; each stream accumulates to exactly what the unary lift gives for the message the stream
describes (rebuilt here by Anthropic's documented accumulation rules, independently of the lifter); and the
second turn of each round trip lowers to the request the client really sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from modelir import accumulate
from modelir.transports import opaque_json
from modelir.transports.anthropic.messages import AnthropicMessages
from modelir.transports.base import HttpResponse, RawEvent
from modelir.v1 import content_pb2, request_pb2, response_pb2

from tests.recordings import Exchange, cassette, wire_dir

ENCRYPTED_CITATION = content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_CITATION


def _recordings() -> list[tuple[str, int, Exchange]]:
    folder = wire_dir("anthropic_messages") / "server_tools"
    return [
        (path.name, i, exchange) for path in sorted(folder.glob("*.yaml")) for i, exchange in enumerate(cassette(path))
    ]


def _first_turn(sent: dict[str, Any]) -> request_pb2.Request:
    """The IR request a caller writes for the recorded first request (provider tools with their config)."""
    request = request_pb2.Request(model="claude")
    if "system" in sent:
        system = sent["system"]
        text = system if isinstance(system, str) else "".join(block["text"] for block in system)
        request.conversation.messages.add(role=content_pb2.ROLE_SYSTEM).parts.add(text=text)
    for block in sent["messages"][0]["content"]:
        request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text=block["text"])
    request.sampling.max_output_tokens = sent["max_tokens"]
    if "thinking" in sent:
        request.reasoning_controls.budget_tokens = sent["thinking"]["budget_tokens"]
    for tool in sent.get("tools", []):
        config = {k: v for k, v in tool.items() if k not in ("type", "name")}
        request.tools.add().provider.CopyFrom(
            request_pb2.ProviderTool(
                transport="anthropic_messages",
                type=tool["type"],
                name=tool["name"],
                config_json=json.dumps(config) if config else "",
            )
        )
    if sent.get("tool_choice") == {"type": "auto"}:
        request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_AUTO
    return request


def _message_from_stream(events: list[tuple[str, str]]) -> dict[str, Any]:
    """The message a stream describes, by Anthropic's streaming rules: blocks from `content_block_start`, text,
    thinking, signatures and citations appended by their deltas, tool inputs parsed from the joined partials, the
    stop and usage (cumulative) from `message_delta`."""
    message: dict[str, Any] = {}
    partials: dict[int, list[str]] = {}
    for _, data in events:
        event = json.loads(data)
        if event["type"] == "message_start":
            message = event["message"]
        elif event["type"] == "content_block_start":
            message["content"].append(json.loads(json.dumps(event["content_block"])))
        elif event["type"] == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "citations_delta":
                block.setdefault("citations", []).append(delta["citation"])
            elif delta["type"] == "input_json_delta":
                partials.setdefault(event["index"], []).append(delta["partial_json"])
        elif event["type"] == "message_delta":
            message.update({k: v for k, v in event["delta"].items()})
            message["usage"].update(event["usage"])
    for index, pieces in partials.items():
        message["content"][index]["input"] = json.loads("".join(pieces) or "{}")
    return message


def _check_lift(body: dict[str, Any], response: response_pb2.Response) -> None:
    parts = list(response.choices[0].message.parts)
    facts = [p for p in parts if p.WhichOneof("content") == "provider_part"]
    assert len(parts) == len(body["content"]) + len(facts)
    calls: dict[str, str] = {}
    for block, part in zip(body["content"], parts, strict=False):
        kind = part.WhichOneof("content")
        if block["type"] == "server_tool_use":
            assert kind == "server_tool_call" and part.server_tool_call.id == block["id"]
            assert json.loads(part.server_tool_call.arguments_json) == block["input"]
            calls[block["id"]] = block["name"]
        elif block["type"].endswith("_tool_result"):
            result = part.server_tool_result
            assert kind == "server_tool_result" and result.name == calls[block["tool_use_id"]]
            assert "encrypted_content" not in result.result_json
            assert opaque_json.restore(result.result_json, part.artifacts) == block  # verbatim, opaque members back
            if block["type"] == "web_fetch_tool_result":
                assert result.content[0].text == block["content"]["content"]["source"]["data"]
            if "stdout" in block["content"]:
                assert result.content[0].text == block["content"]["stdout"]
        elif block["type"] == "text":
            assert kind == "text" and part.text == block["text"]
            assert len(part.citations) == len(block.get("citations") or [])
            for native, citation in zip(block.get("citations") or [], part.citations, strict=True):
                assert citation.kind == content_pb2.CITATION_KIND_URL and citation.url == native["url"]
                assert citation.cited_text == native["cited_text"]
                assert not citation.HasField("start_byte")  # Anthropic citations cover the whole part
                assert citation.artifacts[0].kind == ENCRYPTED_CITATION
                assert citation.artifacts[0].data.decode() == native["encrypted_index"]
    usage = body["usage"]
    server = usage.get("server_tool_use")
    if server is not None:
        assert response.usage.details["web_search_request_count"] == server["web_search_requests"]
        assert response.usage.details["web_fetch_request_count"] == server["web_fetch_requests"]
    else:
        assert "web_search_request_count" not in response.usage.details
    if body.get("container"):
        container = json.loads(facts[-1].provider_part.native_json)
        assert facts[-1].provider_part.type == "anthropic_messages.container" and container == body["container"]


def test_every_unary_server_tool_recording_lifts_verbatim():
    seen = 0
    for name, _, exchange in _recordings():
        if exchange.sse is not None:
            continue
        seen += 1
        transport = AnthropicMessages(provider_model=exchange.request_body["model"])
        request = _first_turn(exchange.request_body)
        body = json.loads(exchange.body)
        response = transport.lift(request, HttpResponse(200, {}, exchange.body))
        _check_lift(body, response)
        assert response.service_tier == body["usage"]["service_tier"], name
    assert seen >= 5


def test_every_server_tool_stream_accumulates_to_the_unary_lift():
    seen = 0
    for name, _, exchange in _recordings():
        if exchange.sse is None:
            continue
        seen += 1
        transport = AnthropicMessages(provider_model=exchange.request_body["model"])
        request = _first_turn(exchange.request_body)
        lifter = transport.stream_lifter(request)
        events = [e for event, data in exchange.sse for e in lifter.feed(RawEvent(event, data.encode()))]
        streamed = accumulate([*events, *lifter.close()])
        message = _message_from_stream(exchange.sse)
        unary = transport.lift(request, HttpResponse(200, {}, json.dumps(message).encode()))
        assert not list(streamed.errors), (name, list(streamed.errors))
        _check_lift(message, unary)
        assert streamed == unary, name
        whole = [e.delta for e in events if e.HasField("delta") and e.delta.WhichOneof("content") == "part"]
        assert whole and all(d.part.WhichOneof("content").startswith("server_tool") for d in whole)
    assert seen >= 3


@pytest.mark.parametrize(
    "cassette_name",
    ["pydanticai__web_search_citations_roundtrip.yaml", "pydanticai__web_fetch_tool_result_roundtrip.yaml"],
)
def test_the_second_turn_replays_server_tools_as_the_client_sent_them(cassette_name):
    first, second = cassette(wire_dir("anthropic_messages") / "server_tools" / cassette_name)[:2]
    transport = AnthropicMessages(provider_model=first.request_body["model"])
    request = _first_turn(first.request_body)
    lifted = transport.lift(request, HttpResponse(200, {}, first.body))
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(lifted.choices[0].message)
    for message in second.request_body["messages"][2:]:
        turn = follow.conversation.messages.add(role=content_pb2.ROLE_USER)
        for block in message["content"]:
            turn.parts.add(text=block["text"])
    sent = json.loads(transport.lower(follow, stream=False).body)

    # The recorded client dropped the citations of the replayed text blocks; this transport sends them back as
    # the request form of each citation (Anthropic asks for `encrypted_index` back in later turns).
    answer = json.loads(first.body)
    for ours, theirs in zip(sent["messages"][1]["content"], answer["content"], strict=True):
        if theirs.get("citations"):
            assert ours.pop("citations") == theirs["citations"]
        else:
            assert "citations" not in ours
    recorded = {k: v for k, v in second.request_body.items() if k != "stream"}
    # The recorded client's SDK re-serialized the fetched document with `citations: null` added; this transport
    # replays the block exactly as received, so absent and null optional members are the one difference allowed.
    assert _without_nulls(sent) == _without_nulls(recorded)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
