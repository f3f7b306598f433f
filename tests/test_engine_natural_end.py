"""A natural end told apart from a requested stop, on every engine transport that names the token it stopped on.

vLLM 0.32 answers a chat model's natural end (an end token from its generation config, `<|im_end|>`) with
`finish_reason: "stop"` and that token's id as `stop_reason`, exactly as for a requested `stop_token_ids` entry
(seen live, ../shared/engines/vllm.md); sglang names its EOS the same way. Only what the request listed is a stop.
"""

from __future__ import annotations

import orjson
import pytest
from modelir import build_request
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.sglang import SGLang
from modelir.transports.vllm import VLLM
from modelir.v1 import content_pb2, response_pb2

IM_END = 355


def _completion(stop_reason) -> bytes:
    choice = {"index": 0, "text": " hi", "finish_reason": "stop", "stop_reason": stop_reason, "token_ids": [5, IM_END]}
    return orjson.dumps({"id": "x", "model": "tiny", "choices": [choice], "usage": {}})


def _chat(stop_reason) -> bytes:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop",
        "stop_reason": stop_reason,
        "token_ids": [5, IM_END],
    }
    return orjson.dumps({"id": "x", "model": "tiny", "object": "chat.completion", "choices": [choice]})


def _requests():
    raw = build_request("tiny", prompt="Hello", max_output_tokens=4)
    chat = build_request("tiny", messages=[("user", "Hello")], max_output_tokens=4)
    return raw, chat


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_an_end_token_the_request_did_not_list_is_a_natural_end(route):
    raw, chat = _requests()
    request, body = (raw, _completion(IM_END)) if route == "completions" else (chat, _chat(IM_END))
    choice = VLLM(provider_model="tiny").lift(request, HttpResponse(200, {}, body)).choices[0]
    assert choice.finish_reason == response_pb2.FINISH_REASON_STOP
    assert choice.WhichOneof("stop") is None


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_a_listed_stop_token_or_string_stays_a_stop_sequence(route):
    raw, chat = _requests()
    request = raw if route == "completions" else chat
    request.sampling.stop_token_ids.append(IM_END)
    request.sampling.stop.append("lo")
    make = _completion if route == "completions" else _chat
    transport = VLLM(provider_model="tiny")
    by_id = transport.lift(request, HttpResponse(200, {}, make(IM_END))).choices[0]
    assert (by_id.finish_reason, by_id.stop_token_id) == (response_pb2.FINISH_REASON_STOP_SEQUENCE, IM_END)
    by_string = transport.lift(request, HttpResponse(200, {}, make("lo"))).choices[0]
    assert (by_string.finish_reason, by_string.stop_sequence) == (response_pb2.FINISH_REASON_STOP_SEQUENCE, "lo")


def test_a_streamed_natural_end_is_a_natural_end():
    raw, _ = _requests()
    lifter = VLLM(provider_model="tiny").stream_lifter(raw)
    chunk = {"id": "x", "model": "tiny", "choices": [orjson.loads(_completion(IM_END))["choices"][0]]}
    events = lifter.feed(RawEvent(event="", data=orjson.dumps(chunk))) + lifter.close()
    finishes = [f for e in events if e.WhichOneof("event") == "end" for f in e.end.finishes]
    assert [(f.finish_reason, f.WhichOneof("stop")) for f in finishes] == [(response_pb2.FINISH_REASON_STOP, None)]


def test_sglang_shares_the_rule():
    raw, _ = _requests()
    raw.sampling.stop.append("lo")
    body = {"text": " hi", "meta_info": {"id": "x", "finish_reason": {"type": "stop", "matched": IM_END}}}
    choice = SGLang(provider_model="tiny").lift(raw, HttpResponse(200, {}, orjson.dumps(body))).choices[0]
    assert choice.finish_reason == response_pb2.FINISH_REASON_STOP
    assert content_pb2.ROLE_ASSISTANT == choice.message.role
