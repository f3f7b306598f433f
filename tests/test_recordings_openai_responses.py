"""Replaying the real OpenAI Responses recordings; the reasoning round trip through a record file."""

from __future__ import annotations

import json

import pytest
from modelir import accumulate, errors
from modelir.records import files as records
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.openai.responses import OpenAIResponses
from modelir.v1 import content_pb2, record_pb2, request_pb2, response_pb2

from tests.recordings import cassette, vercel_chunks, wire_dir

TRANSPORT = OpenAIResponses()


def _request(**fields) -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
    for key, value in fields.items():
        getattr(request, key).CopyFrom(value)
    return request


def _stream(events, request=None):
    lifter = TRANSPORT.stream_lifter(request or _request())
    lifted = [e for name, data in events for e in lifter.feed(RawEvent(name, data.encode()))]
    return accumulate([*lifted, *lifter.close()])


def _check_against_body(body: dict, response: response_pb2.Response) -> None:
    assert response.id == body["id"] and response.model == body["model"]
    parts = list(response.choices[0].message.parts)
    expected_parts = []
    for item in body["output"]:
        if item["type"] == "reasoning":
            expected_parts.append(("reasoning", item["id"], item.get("encrypted_content")))
        elif item["type"] == "message":
            expected_parts.extend(("text", item["id"], c.get("text")) for c in item["content"])
        elif item["type"] == "function_call":
            expected_parts.append(("call", item["id"], item["arguments"]))
    actual = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "reasoning":
            encrypted = part.artifacts[0].data.decode() if part.artifacts else None
            actual.append(("reasoning", part.item_id, encrypted))
        elif kind == "text":
            actual.append(("text", part.item_id, part.text))
        else:
            actual.append(("call", part.item_id, part.tool_call.arguments_json))
    assert actual == expected_parts
    usage = body["usage"]
    assert response.usage.input_token_count == usage["input_tokens"]
    assert response.usage.output_token_count == usage["output_tokens"]
    assert response.usage.reasoning_token_count == usage["output_tokens_details"]["reasoning_tokens"]


def test_every_cassette_lifts_and_streams_equal_their_final_object():
    seen = 0
    for path in sorted(wire_dir("openai_responses").glob("*.yaml")):
        for exchange in cassette(path):
            seen += 1
            if exchange.status >= 400:
                error = TRANSPORT.error(HttpResponse(exchange.status, exchange.headers, exchange.body))
                assert isinstance(error, errors.ProviderRejectedError), path.name
                continue
            if exchange.sse is None:
                body = json.loads(exchange.body)
                _check_against_body(
                    body, TRANSPORT.lift(_request(), HttpResponse(200, exchange.headers, exchange.body))
                )
                continue
            streamed = _stream(exchange.sse)
            final = next(json.loads(d)["response"] for _, d in exchange.sse if '"response.completed"' in d)
            unary = TRANSPORT.lift(_request(), HttpResponse(200, {}, json.dumps(final).encode()))
            # The real service rounds logprobs in the final object (-1.9e-07 in a delta is -0.0 there), so the
            # values are compared with a tolerance and everything else exactly.
            for a, b in zip(streamed.choices, unary.choices, strict=True):
                assert a.logprobs.token_logprobs == pytest.approx(list(b.logprobs.token_logprobs), abs=1e-4)
                a.logprobs.ClearField("token_logprobs")
                b.logprobs.ClearField("token_logprobs")
            assert streamed == unary, path.name
            _check_against_body(final, streamed)
    assert seen >= 10


def test_encrypted_content_comes_from_done_not_added():
    events = vercel_chunks(
        wire_dir("openai_responses") / "vercel__reasoning_encrypted_content.chunks.jsonl", done=False
    )
    parsed = [json.loads(d) for _, d in events]
    added = next(
        e["item"] for e in parsed if e["type"] == "response.output_item.added" and e["item"]["type"] == "reasoning"
    )
    done = next(
        e["item"] for e in parsed if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    )
    assert added.get("encrypted_content") != done["encrypted_content"]  # the trap the recording shows
    response = _stream(events)
    reasoning = response.choices[0].message.parts[0]
    assert reasoning.artifacts[0].data.decode() == done["encrypted_content"]
    body = (wire_dir("openai_responses") / "vercel__reasoning_encrypted_content.json").read_bytes()
    _check_against_body(json.loads(body), TRANSPORT.lift(_request(), HttpResponse(200, {}, body)))


def test_recorded_stream_error_is_a_soft_error():
    events = vercel_chunks(
        wire_dir("openai_responses") / "vercel__stream_error_insufficient_quota.chunks.jsonl", done=False
    )
    response = _stream(events)
    assert response.errors[0].provider_code == "insufficient_quota"
    assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_ERROR
    body = (wire_dir("openai_responses") / "vercel__error_insufficient_quota.json").read_bytes()
    assert isinstance(TRANSPORT.error(HttpResponse(429, {}, body)), errors.RateLimitedError)


def test_reasoning_and_tool_call_survive_a_record_round_trip_byte_for_byte(tmp_path):
    first, second = cassette(wire_dir("openai_responses") / "pydanticai__reasoning_with_function_calls.yaml")[:2]
    sent_first, sent_second = first.request_body, second.request_body
    request = request_pb2.Request(model="gpt-5")
    request.conversation.messages.add(role=content_pb2.ROLE_SYSTEM).parts.add(text=sent_first["instructions"])
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text=sent_first["input"][0]["content"])
    for tool in sent_first["tools"]:
        request.tools.add().function.CopyFrom(
            request_pb2.FunctionTool(
                name=tool["name"], parameters_json_schema=json.dumps(tool["parameters"]), strict=tool["strict"]
            )
        )
    request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_AUTO
    request.reasoning_controls.effort = request_pb2.REASONING_EFFORT_LOW
    request.reasoning_controls.summary = request_pb2.REASONING_SUMMARY_DETAILED
    transport = OpenAIResponses(provider_model="gpt-5")
    sent = json.loads(transport.lower(request, stream=False).body)
    recorded = {k: v for k, v in sent_first.items() if (k, v) != ("stream", False)}
    for tool in recorded["tools"]:
        assert tool.pop("description") is None  # a null description is the same as none
    assert sent == recorded
    lifted = transport.lift(request, HttpResponse(200, first.headers, first.body))

    # Store the turn as a record and read it back through the SDK.
    path = tmp_path / "turns.jsonl"
    with records.RecordWriter.create(path) as writer:
        writer.append(
            record_pb2.Record(key="turn-1", request=request, response=lifted, status=record_pb2.RECORD_STATUS_OK)
        )
    (stored,) = records.read_records(path)
    assert stored.response == lifted

    follow = request_pb2.Request()
    follow.CopyFrom(stored.request)
    follow.conversation.messages.append(stored.response.choices[0].message)
    output = sent_second["input"][-1]
    result = follow.conversation.messages.add(role=content_pb2.ROLE_TOOL).parts.add().tool_result
    result.tool_call_id = output["call_id"]
    result.content.add(text=output["output"])
    sent = json.loads(transport.lower(follow, stream=False).body)
    assert sent["input"] == sent_second["input"]  # the provider gets back exactly what it sent
