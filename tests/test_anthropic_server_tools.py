"""Anthropic Messages: the edges of server tools, provider parts, message facts and block options."""

from __future__ import annotations

import json
from typing import Any

from modelir import accumulate
from modelir.transports.anthropic.messages import AnthropicMessages
from modelir.transports.base import HttpResponse, RawEvent
from modelir.v1 import content_pb2, request_pb2, response_pb2

MODEL = "claude-sonnet-4-5"


def _request() -> request_pb2.Request:
    request = request_pb2.Request(model="c")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
    return request


def _message(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 7},
        **extra,
    }


def _lift(body: dict[str, Any]) -> response_pb2.Response:
    transport = AnthropicMessages(provider_model=MODEL)
    return transport.lift(_request(), HttpResponse(200, {}, json.dumps(body).encode()))


def _stream(events: list[dict[str, Any]], *, interrupted: bool = False) -> response_pb2.Response:
    lifter = AnthropicMessages(provider_model=MODEL).stream_lifter(_request())
    lifted = [e for event in events for e in lifter.feed(RawEvent(event["type"], json.dumps(event).encode()))]
    return accumulate([*lifted, *lifter.close(interrupted=interrupted)])


def _replayed(message: content_pb2.Message) -> dict[str, Any]:
    """The request body that replays `message` as the assistant turn of a follow-up."""
    follow = _request()
    follow.conversation.messages.append(message)
    follow.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="more")
    return json.loads(AnthropicMessages(provider_model=MODEL).lower(follow, stream=False).body)


def _start(message_extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "message_start", "message": {**_message([]), "stop_reason": None, **(message_extra or {})}}


MCP_CALL = {
    "type": "mcp_tool_use",
    "id": "mcptoolu_1",
    "name": "echo",
    "server_name": "example",
    "input": {"text": "hello"},
}
MCP_RESULT = {
    "type": "mcp_tool_result",
    "tool_use_id": "mcptoolu_1",
    "is_error": True,
    "content": [{"type": "text", "text": "boom"}],
}
UNKNOWN = {"type": "future_block", "payload": {"a": [1, None]}}


def test_mcp_calls_results_and_unknown_blocks_lift_and_replay_verbatim():
    response = _lift(_message([MCP_CALL, MCP_RESULT, UNKNOWN]))
    call, result, unknown = response.choices[0].message.parts
    assert call.server_tool_call.server_label == "example" and call.server_tool_call.name == "echo"
    assert result.server_tool_result.failed and result.server_tool_result.name == "echo"
    assert unknown.provider_part.type == "anthropic_messages.future_block"
    assert unknown.provider_part.issuer == content_pb2.Issuer(transport="anthropic_messages", model=MODEL)
    assert _replayed(response.choices[0].message)["messages"][1]["content"] == [MCP_CALL, MCP_RESULT, UNKNOWN]


def test_an_error_result_is_failed_and_keeps_its_json():
    error = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
    }
    (part,) = _lift(_message([error])).choices[0].message.parts
    assert part.server_tool_result.failed and json.loads(part.server_tool_result.result_json) == error
    assert part.server_tool_result.name == "web_search"  # no call seen: named after the block type


def test_stop_details_and_container_from_a_stream_equal_the_unary_lift():
    details = {"type": "refusal", "category": "cyber", "explanation": "Not this."}
    container = {"id": "container_1", "expires_at": "2026-01-01T00:00:00Z"}
    streamed = _stream(
        [
            _start({"stop_details": None}),
            {"type": "content_block_start", "index": 0, "content_block": UNKNOWN},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "refusal",
                    "stop_sequence": None,
                    "stop_details": details,
                    "container": container,
                },
                "usage": {"output_tokens": 7},
            },
            {"type": "message_stop"},
        ]
    )
    unary = _lift({**_message([UNKNOWN]), "stop_reason": "refusal", "stop_details": details, "container": container})
    assert streamed == unary
    parts = unary.choices[0].message.parts
    assert [p.WhichOneof("content") for p in parts] == ["provider_part", "refusal", "provider_part", "provider_part"]
    assert parts[1].refusal == "Not this." and unary.choices[0].finish_reason == response_pb2.FINISH_REASON_REFUSAL
    body = _replayed(unary.choices[0].message)
    assert body["container"] == "container_1"
    assert body["messages"][1]["content"] == [UNKNOWN]  # the refusal and stop details have no input form


def test_a_stream_cut_inside_a_server_tool_call_keeps_the_partial_call():
    streamed = _stream(
        [
            _start(),
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
            },
            {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"qu'}},
        ],
        interrupted=True,
    )
    (part,) = streamed.choices[0].message.parts
    assert part.server_tool_call.id == "srvtoolu_1" and part.server_tool_call.arguments_json == '{"qu'
    assert streamed.errors  # partial, and said so


def test_an_unknown_delta_type_is_warned_about():
    streamed = _stream(
        [
            _start(),
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "future_delta", "x": 1}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
            {"type": "message_stop"},
        ]
    )
    assert [w.code for w in streamed.warnings] == ["unknown_stream_delta"]


def test_message_options_go_on_the_last_block_and_part_options_on_their_block():
    request = _request()
    message = request.conversation.messages[0]
    message.parts.add(text="second")
    message.parts[0].provider_options.add(transport="anthropic_messages", options_json='{"title": "x"}')
    message.parts[0].provider_options.add(transport="openai_chat", options_json='{"ignored": true}')
    message.provider_options.add(
        transport="anthropic_messages", options_json='{"cache_control": {"type": "ephemeral"}}'
    )
    body = json.loads(AnthropicMessages().lower(request, stream=False).body)
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "hi", "title": "x"},
        {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}},
    ]


def test_a_cache_ttl_with_a_fraction_of_a_second_is_refused():
    request = _request()
    request.conversation.messages[0].parts[0].cache_breakpoint.ttl.FromMilliseconds(300_500)
    problems = AnthropicMessages().field_problems(request)
    assert [f for f, _ in problems] == ["conversation.messages[0].parts[0].cache_breakpoint.ttl"]


def test_the_beta_option_sends_the_anthropic_beta_header():
    assert AnthropicMessages(beta="web-fetch-2025-09-10").auth_headers("k")["anthropic-beta"] == "web-fetch-2025-09-10"
    assert "anthropic-beta" not in AnthropicMessages().auth_headers("k")
