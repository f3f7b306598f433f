"""Replaying the real llama.cpp, Ollama and sglang recordings (lift, stream lift, tokenize, errors, lower)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from modelir import accumulate, errors
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.transports.sglang import SGLang
from modelir.v1 import content_pb2, logprobs_pb2, request_pb2, service_pb2

from tests.recordings import cassette, parse_sse, wire_dir

LLAMA = LlamaCpp()


def _llama(name: str) -> tuple[dict | None, Path]:
    folder = wire_dir("llama_cpp")
    request = folder / f"{name}.request.json"
    response = (
        next(folder.glob(f"{name}.response.*[!s]"))
        if list(folder.glob(f"{name}.response.json"))
        else folder / f"{name}.response.sse"
    )
    return (json.loads(request.read_text()) if request.exists() else None), response


def _ir_from_native(native: dict) -> request_pb2.Request:
    request = request_pb2.Request(model="tiny")
    if isinstance(native["prompt"], list):
        request.token_ids.ids.extend(native["prompt"])
    else:
        request.prompt = native["prompt"]
    if "seed" in native:
        request.sampling.seed = native["seed"]
    if "n_predict" in native:
        request.sampling.max_output_tokens = native["n_predict"]
    if "temperature" in native:
        request.sampling.temperature = native["temperature"]
    if "stop" in native:
        request.sampling.stop.extend(native["stop"])
    if "n_probs" in native:
        request.logprob_options.top_logprob_count = native["n_probs"]
        if native.get("post_sampling_probs"):
            request.logprob_options.basis = logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
    if "grammar" in native:
        request.constraint.grammar.dialect = request_pb2.GRAMMAR_DIALECT_GBNF
        request.constraint.grammar.text = native["grammar"]
    if "json_schema" in native:
        request.constraint.json_schema.schema_json = json.dumps(native["json_schema"])
    return request


NATIVE = [
    "completion__plain",
    "completion__n_probs",
    "completion__n_probs_post_sampling",
    "completion__n_probs_greedy",
    "completion__n_probs_greedy_post_sampling",
    "completion__return_tokens",
    "completion__grammar",
    "completion__grammar_post_sampling",
    "completion__json_schema",
    "completion__stop_word",
    "completion__prompt_token_ids",
]


@pytest.mark.parametrize("name", NATIVE)
def test_llamacpp_native_completion_lower_and_lift(name):
    native, response_path = _llama(name)
    request = _ir_from_native(native)
    sent = json.loads(LLAMA.lower(request, stream=False).body)
    # We always ask for the sampled ids (return_tokens); everything the recording sent, we send the same.
    assert {k: v for k, v in sent.items() if k != "return_tokens"} == {
        k: v for k, v in native.items() if k != "return_tokens"
    }
    body = json.loads(response_path.read_text())
    response = LLAMA.lift(request, HttpResponse(200, {}, response_path.read_bytes()))
    choice = response.choices[0]
    assert choice.message.parts[0].text == body["content"]
    assert choice.raw_finish_reason == body["stop_type"]
    assert response.usage.output_token_count == body["tokens_predicted"]
    if "completion_probabilities" in body:
        probabilities = body["completion_probabilities"]
        assert list(choice.logprobs.token_ids) == [p["id"] for p in probabilities]
        assert choice.logprobs.token_bytes == b"".join(bytes(p["bytes"]) for p in probabilities)
        post = "prob" in probabilities[0]
        assert choice.logprobs.basis == (
            logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING if post else logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
        )
    if body["stop_type"] == "word":
        assert choice.stop_sequence == body["stopping_word"]


def test_llamacpp_native_stream_equals_the_final_totals():
    native, path = _llama("completion__stream_n_probs")
    request = _ir_from_native(native)
    events = parse_sse(path.read_text())
    lifter = LLAMA.stream_lifter(request)
    lifted = [e for name, data in events for e in lifter.feed(RawEvent(name, data.encode()))]
    response = accumulate([*lifted, *lifter.close()])
    chunks = [json.loads(d) for _, d in events]
    assert response.choices[0].message.parts[0].text == "".join(c["content"] for c in chunks)
    assert list(response.choices[0].logprobs.token_ids) == [
        p["id"] for c in chunks for p in c.get("completion_probabilities", [])
    ]
    assert not bool(response.errors) and response.model == chunks[-1]["model"]
    # Each event's sampled id rides on its delta, attributed to the one text part (the limit ended it: no EOS).
    ids = [t for c in chunks for t in c.get("tokens", [])]
    assert list(response.choices[0].sampled_tokens.token_ids) == ids
    assert list(response.choices[0].sampled_tokens.part_indexes) == [0] * len(ids)


def test_llamacpp_recorded_sampled_ids_are_the_answers_tokens():
    native, path = _llama("completion__return_tokens")
    body = json.loads(path.read_text())
    response = LLAMA.lift(_ir_from_native(native), HttpResponse(200, {}, path.read_bytes()))
    tokens = response.choices[0].sampled_tokens
    # `tokens` (return_tokens, which we always send) is the truth, whether or not logprobs were asked for; the
    # limit ended this answer, so every id belongs to the one text part.
    assert body["stop_type"] == "limit" and list(tokens.token_ids) == body["tokens"] and len(body["tokens"]) == 6
    assert list(tokens.part_indexes) == [0] * 6
    assert not response.choices[0].HasField("logprobs")


@pytest.mark.parametrize(
    "name",
    [
        "v1_chat_completions__logprobs",
        "v1_chat_completions__response_format_json_schema",
        "v1_chat_completions__qwen25_tool_call_prefill",
    ],
)
def test_llamacpp_chat_bodies_lift(name):
    _, path = _llama(name)
    body = json.loads(path.read_text())
    request = request_pb2.Request(model="tiny")
    request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
    response = LLAMA.lift(request, HttpResponse(200, {}, path.read_bytes()))
    message = body["choices"][0]["message"]
    texts = [p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text"]
    # `content: ""` (the tool-call answer's) is no content, as in the stream, which sends none: no text part.
    assert texts == ([message["content"]] if message.get("content") else [])
    if body["choices"][0].get("logprobs"):
        content = body["choices"][0]["logprobs"]["content"]
        assert list(response.choices[0].logprobs.token_ids) == [e["id"] for e in content]
    calls = [p.tool_call for p in response.choices[0].message.parts if p.WhichOneof("content") == "tool_call"]
    assert [c.name for c in calls] == [t["function"]["name"] for t in message.get("tool_calls") or []]


def test_llamacpp_chat_stream_recordings():
    for name in (
        "v1_chat_completions__stream_include_usage",
        "v1_chat_completions__stream_logprobs",
        "v1_chat_completions__qwen25_tool_call_prefill_stream",
    ):
        _, path = _llama(name)
        events = parse_sse(path.read_text())
        request = request_pb2.Request(model="tiny")
        request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="hi")
        lifter = LLAMA.stream_lifter(request)
        lifted = [e for n, d in events for e in lifter.feed(RawEvent(n, d.encode()))]
        response = accumulate([*lifted, *lifter.close()])
        assert not bool(response.errors), (name, list(response.errors))
        assert response.choices[0].raw_finish_reason


def test_llamacpp_tokenize_and_detokenize_recordings():
    request = service_pb2.TokenizeRequest(model="tiny", text="Hello world, café ü 日本 <|im_start|>")
    _, path = _llama("tokenize__with_pieces")
    body = json.loads(path.read_text())
    tokens = LLAMA.lift_tokenize(request, [HttpResponse(200, {}, path.read_bytes())])
    assert list(tokens.token_ids) == [t["id"] for t in body["tokens"]]
    assert tokens.token_bytes.decode() == request.text  # byte-list pieces ("ü" as 195, 188) rejoin exactly
    _, detok = _llama("detokenize__plain")
    assert LLAMA.lift_detokenize(HttpResponse(200, {}, detok.read_bytes())).startswith("<s>Hello")


@pytest.mark.parametrize(
    ("name", "error_type"),
    [
        ("error__completion_invalid_json", errors.ProviderUnavailableError),
        ("error__completion_missing_prompt", errors.ProviderRejectedError),
        ("error__completion_prompt_too_long", errors.ProviderRejectedError),
        ("error__completion_invalid_grammar", errors.ProviderRejectedError),
        ("error__v1_chat_top_logprobs_without_logprobs", errors.ProviderRejectedError),
        ("error__embedding_not_enabled", errors.ProviderRejectedError),  # 501: not started with --embeddings
        ("error__not_found", errors.ProviderRejectedError),
    ],
)
def test_llamacpp_error_recordings(name, error_type):
    folder = wire_dir("llama_cpp")
    path = folder / f"{name}.response.json"
    status = int((folder / f"{name}.response.headers").read_text().split()[1])
    error = LLAMA.error(HttpResponse(status, {}, path.read_bytes()))
    assert isinstance(error, error_type) and error.message


def test_llamacpp_echo_is_ignored_so_scoring_is_rejected():
    # The recording shows echo silently ignored (the same body as without it): hence no INPUT_SCORING claim.
    _, with_echo = _llama("v1_completions__echo_logprobs")
    _, without = _llama("v1_completions__logprobs3")
    strip = lambda b: {k: v for k, v in json.loads(b.read_text()).items() if k not in ("id", "created", "timings")}  # noqa: E731
    assert strip(with_echo)["choices"] == strip(without)["choices"]
    from modelir.v1 import capabilities_pb2

    assert capabilities_pb2.CAPABILITY_INPUT_SCORING not in LLAMA.manifest().capabilities


# ---- Ollama ------------------------------------------------------------------------------------------


def test_ollama_recordings():
    transport = Ollama()
    folder = wire_dir("ollama")
    seen = 0
    for path in sorted(folder.glob("openllmetry__*.yaml")):
        for exchange in cassette(path):
            seen += 1
            sent = exchange.request_body
            request = request_pb2.Request(model=sent["model"])
            if "messages" in sent:
                request.conversation.messages.add(role=content_pb2.ROLE_USER).parts.add(text="x")
            else:
                request.prompt = sent["prompt"]
            if exchange.sse is None and b'"done":false' in exchange.body:
                lines = [("", line) for line in exchange.body.decode().splitlines() if line.strip()]
                lifter = transport.stream_lifter(request)
                lifted = [e for n, d in lines for e in lifter.feed(RawEvent(n, d.encode()))]
                response = accumulate([*lifted, *lifter.close()])
                chunks = [json.loads(d) for _, d in lines]
                key = "response" if "prompt" in sent else "message"
                text = "".join(c[key] if key == "response" else c[key]["content"] for c in chunks)
                assert response.choices[0].message.parts[-1].text == text and not bool(response.errors)
                assert response.usage.output_token_count == chunks[-1]["eval_count"]
                continue
            body = json.loads(exchange.body)
            response = transport.lift(request, HttpResponse(200, {}, exchange.body))
            text = body["message"]["content"] if "message" in body else body["response"]
            assert [p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text"] == [text]
            assert response.usage.input_token_count == body["prompt_eval_count"]
            assert response.timing.provider_output_duration.ToNanoseconds() == body["eval_duration"]
    assert seen >= 4


# ---- sglang ------------------------------------------------------------------------------------------


def test_sglang_recorded_plain_generate():
    excerpt = json.loads((wire_dir("sglang") / "sglang_docs_ci__generate_plain_meta_info.excerpt.json").read_text())
    body = ast.literal_eval(excerpt["response_python_repr_verbatim"])  # a printed dict, not raw JSON bytes
    request = request_pb2.Request(model="qwen", prompt=excerpt["request_json"]["text"])
    assert json.loads(SGLang().lower(request, stream=False).body) == {**excerpt["request_json"], "sampling_params": {}}
    response = SGLang().lift(request, HttpResponse(200, {}, json.dumps(body).encode()))
    choice = response.choices[0]
    assert choice.message.parts[0].text == body["text"]
    assert choice.raw_finish_reason == '{"type":"length","length":128}'
    assert response.usage.output_token_count == 128 and response.id == body["meta_info"]["id"]
