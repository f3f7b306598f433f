"""Replaying the real OpenAI completions and vLLM recordings (lift, stream lift, lower)."""

from __future__ import annotations

import json

from modelir import accumulate
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.openai.completions import OpenAICompletions
from modelir.transports.vllm import VLLM
from modelir.v1 import request_pb2

from tests.recordings import cassette, parse_sse, vercel_chunks, wire_dir


def _lift_stream(transport, request, events):
    lifter = transport.stream_lifter(request)
    lifted = [e for name, data in events for e in lifter.feed(RawEvent(name, data.encode()))]
    return accumulate([*lifted, *lifter.close()])


def test_recorded_instruct_stream_with_logprobs():
    folder = wire_dir("openai_completions")
    events = parse_sse((folder / "simonw_llm_issue284__instruct_stream_logprobs2.sse.txt").read_text())
    request = request_pb2.Request(model="m", prompt="say hi, one word")
    request.logprob_options.top_logprob_count = 2
    response = _lift_stream(OpenAICompletions(), request, events)
    chunks = [json.loads(d) for _, d in events if d.strip() != "[DONE]"]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert response.choices[0].message.parts[0].text == text
    logprobs = response.choices[0].logprobs
    tokens = [t for c in chunks for t in (c["choices"][0]["logprobs"] or {}).get("tokens", [])]
    assert list(logprobs.tokens) == tokens
    # The sampled "Hi" scores below the alternative "Hello": kept as sent, never re-sorted.
    hi = tokens.index("Hi")
    start = sum(logprobs.top_counts[:hi])
    alternatives = dict(
        zip(logprobs.top_tokens[start : start + 2], logprobs.top_logprobs[start : start + 2], strict=True)
    )
    assert alternatives["Hello"] > logprobs.token_logprobs[hi]


def test_recorded_instruct_body_and_stream():
    folder = wire_dir("openai_completions")
    body = (folder / "vercel__completion_text.json").read_bytes()
    response = OpenAICompletions().lift(request_pb2.Request(model="m", prompt="x"), HttpResponse(200, {}, body))
    raw = json.loads(body)
    assert response.choices[0].message.parts[0].text == raw["choices"][0]["text"]
    assert response.usage.input_token_count == raw["usage"]["prompt_tokens"]
    events = vercel_chunks(folder / "vercel__completion_text_stream.chunks.jsonl")
    streamed = _lift_stream(OpenAICompletions(), request_pb2.Request(model="m", prompt="x"), events)
    chunks = [json.loads(d) for _, d in events if d != "[DONE]"]
    assert streamed.choices[0].message.parts[0].text == "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert not bool(streamed.errors)


def test_recorded_vllm_completion_lower_and_lift():
    (exchange,) = cassette(wire_dir("vllm") / "openllmetry__v1_completions_opt125m.yaml")
    recorded = exchange.request_body
    request = request_pb2.Request(model="opt", prompt=recorded["prompt"][0])
    request.sampling.max_output_tokens = recorded["max_tokens"]
    request.sampling.temperature = recorded["temperature"]
    request.sampling.top_p = recorded["top_p"]
    request.sampling.presence_penalty = recorded["presence_penalty"]
    request.sampling.frequency_penalty = recorded["frequency_penalty"]
    vllm = VLLM(provider_model="facebook/opt-125m")
    sent = json.loads(vllm.lower(request, stream=False).body)
    # The recording sends a one-prompt list and spells out defaults (n 1, logit_bias null) that we leave implicit.
    expected = {k: v for k, v in recorded.items() if (k, v) not in (("n", 1), ("logit_bias", None))}
    expected["prompt"] = recorded["prompt"][0]
    assert sent.pop("return_token_ids") is True  # we always ask vLLM for the sampled ids (RL token fidelity)
    assert sent == expected
    response = vllm.lift(request, HttpResponse(200, exchange.headers, exchange.body))
    raw = json.loads(exchange.body)
    choice = response.choices[0]
    assert choice.message.parts[0].text == raw["choices"][0]["text"]
    assert choice.raw_finish_reason == "length" and not choice.stop_sequence  # stop_reason null
    assert response.usage.output_token_count == 20
