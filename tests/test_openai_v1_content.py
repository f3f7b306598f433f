"""The OpenAI wires on the v1 content kinds: streams fold to the unary lift of their final object, lifted turns
replay to the items they came from, usage conventions, and what the dialects of chat completions inherit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pytest
from google.protobuf import json_format
from modelir import accumulate
from modelir.conformance import runner as conformance
from modelir.pipeline import content_kinds
from modelir.transports import llamacpp, vllm
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.openai import OpenAIChat, OpenAICompletions, OpenAIResponses
from modelir.transports.openai import _wire as wire
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2, response_pb2

FIXTURES = conformance.DEFAULT_FIXTURES


def _fixture(transport: str, name: str) -> dict:
    return json.loads((FIXTURES / transport / f"{name}.json").read_text())


def _request(fixture: dict) -> request_pb2.Request:
    return json_format.ParseDict(fixture["request"], request_pb2.Request())


def _responses_streams():
    for path in sorted((FIXTURES / "openai_responses").glob("*.json")):
        fixture = json.loads(path.read_text())
        finals = [e for e in fixture.get("stream_events", []) if '"response.completed"' in e["data"]]
        if finals:
            yield path.stem, fixture, json.loads(finals[-1]["data"])["response"]


@pytest.mark.parametrize(
    ("name", "fixture", "final"), list(_responses_streams()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_a_responses_stream_folds_to_the_unary_lift_of_its_final_object(name, fixture, final):
    transport = OpenAIResponses(**fixture.get("transport_options", {}))
    request = _request(fixture)
    lifter = transport.stream_lifter(request)
    events = [
        e for raw in fixture["stream_events"] for e in lifter.feed(RawEvent(raw.get("event", ""), raw["data"].encode()))
    ]
    streamed = accumulate([*events, *lifter.close()])
    unary = transport.lift(request, HttpResponse(200, {}, orjson.dumps(final)))
    assert streamed == unary  # the phase included: it streams on a delta of its own (PartDelta.phase, IR 1.1)


def test_a_lifted_turn_replays_as_the_items_it_came_from():
    fixture = _fixture("openai_responses", "hosted_items_refusal_compaction")
    transport = OpenAIResponses(**fixture["transport_options"])
    request = _request(fixture)
    body = fixture["http_response"]["body"]
    lifted = transport.lift(request, HttpResponse(200, {}, orjson.dumps(body)))
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(lifted.choices[0].message)
    assert transport.extra_unsupported(follow) == []
    sent = orjson.loads(transport.lower(follow, stream=False).body)["input"][1:]
    emptied = {"code_interpreter_call": {"outputs": None}, "mcp_call": {"output": None}}
    expected = [{**item, **emptied.get(item["type"], {})} for item in body["output"]]
    for ours, theirs in zip(sent, expected, strict=True):
        assert {k: v for k, v in ours.items() if k in theirs} == theirs
        assert set(ours) - set(theirs) <= {"status"}  # a message item is always sent as completed


def test_chat_refusal_streamed_equals_unary_and_replays_as_refusal():
    chat = OpenAIChat(provider_model="gpt-4o")
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="x")
    body = {
        "id": "c",
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": None, "refusal": "No."}, "finish_reason": "stop"}
        ],
    }
    unary = chat.lift(request, HttpResponse(200, {}, orjson.dumps(body)))
    lifter = chat.stream_lifter(request)
    chunks = [
        {"id": "c", "model": "gpt-4o", "choices": [{"index": 0, "delta": {"role": "assistant", "refusal": "No."}}]},
        {"id": "c", "model": "gpt-4o", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    events = [e for c in chunks for e in lifter.feed(RawEvent("", orjson.dumps(c)))]
    events += lifter.feed(RawEvent("", b"[DONE]"))
    assert accumulate([*events, *lifter.close()]) == unary
    (part,) = unary.choices[0].message.parts
    assert part.refusal == "No." and unary.choices[0].finish_reason == response_pb2.FINISH_REASON_REFUSAL
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(unary.choices[0].message)
    sent = orjson.loads(chat.lower(follow, stream=False).body)["messages"]
    assert sent[-1] == {"role": "assistant", "refusal": "No."}


@pytest.mark.parametrize(
    ("usage", "output"),
    [
        # OpenAI: reasoning is inside completion_tokens (o3-mini recording: 87 with 64 reasoning).
        (
            {
                "prompt_tokens": 10,
                "completion_tokens": 87,
                "total_tokens": 97,
                "completion_tokens_details": {"reasoning_tokens": 64},
            },
            87,
        ),
        # xAI: reasoning beside it (total = prompt + completion + reasoning).
        (
            {
                "prompt_tokens": 14,
                "completion_tokens": 2,
                "total_tokens": 326,
                "completion_tokens_details": {"reasoning_tokens": 310},
            },
            312,
        ),
        # No reasoning: nothing to tell apart.
        (
            {
                "prompt_tokens": 5,
                "completion_tokens": 7,
                "total_tokens": 12,
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
            7,
        ),
        # No total: the body is taken as OpenAI's convention.
        ({"prompt_tokens": 5, "completion_tokens": 7, "completion_tokens_details": {"reasoning_tokens": 3}}, 7),
    ],
)
def test_output_counts_include_reasoning_whichever_convention_the_body_follows(usage, output):
    out = response_pb2.Usage()
    wire.usage_from(usage, out, input_key="prompt_tokens", output_key="completion_tokens")
    assert out.output_token_count == output
    assert out.reasoning_token_count == usage["completion_tokens_details"]["reasoning_tokens"]


def test_dialects_keep_only_what_the_wire_carries_everywhere():
    openai_only = {
        capabilities_pb2.CAPABILITY_LOGIT_BIAS,
        capabilities_pb2.CAPABILITY_ALLOWED_TOOLS,
        capabilities_pb2.CAPABILITY_CONSTRAINT_JSON_OBJECT,
    }
    assert openai_only <= OpenAIChat.capabilities
    assert capabilities_pb2.CAPABILITY_LOGIT_BIAS in OpenAICompletions.capabilities
    # A dialect inherits none of these from the OpenAI wire: the engines claim logit bias and JSON objects on their
    # own (proven by their own fixtures), and neither claims allowed tools.
    for dialect in (vllm.VLLM, llamacpp.LlamaCpp):
        assert capabilities_pb2.CAPABILITY_ALLOWED_TOOLS not in dialect.capabilities, dialect.name
        for capability in openai_only & dialect.capabilities:
            name = capabilities_pb2.Capability.Name(capability).removeprefix("CAPABILITY_")
            fixtures = Path(__file__).parent.parent / "conformance" / "fixtures" / dialect.name
            assert any(name in orjson.loads(f.read_bytes()).get("proves", []) for f in fixtures.glob("*.json"))
    assert vllm.VLLM.part_kinds["refusal"] != ""  # vLLM's chat does not take refusals back
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=content_pb2.ROLE_ASSISTANT).parts.add(refusal="No.")
    # llama.cpp takes OpenAIChat's decisions as its own (llamacpp/transport.py), so its chat lowering refuses, typed.
    with pytest.raises(content_kinds.NotCarriedError):
        llamacpp.LlamaCpp().lower(request, stream=False)


@pytest.mark.parametrize("bias", [math.nan, math.inf, -math.inf, 100.5, -101.0])
def test_an_openai_logit_bias_out_of_range_is_a_field_problem_not_a_crash(bias):
    request = request_pb2.Request(model="m", prompt="x")
    request.sampling.logit_bias[7] = bias
    assert [f for f, _ in OpenAICompletions().field_problems(request)] == ["sampling.logit_bias[7]"]
