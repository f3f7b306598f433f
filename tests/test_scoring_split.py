"""One rule for where a scored continuation starts (`logprobs.continuation`), on every echo-scoring route: from the
engine's own tokens of the prompt, walking back from its end, never from `text_offset`.

The answers below are the shapes seen live (issue #31): vLLM 0.32 counts the BOS text `<s>` in `text_offset` and,
under `return_token_ids`, leaves the prompt out of the echoed text; llama-cpp-python spells control tokens "" and
its offsets skip their text.
"""

from __future__ import annotations

import orjson
import pytest
from modelir import build_request
from modelir.logprobs.continuation import continuation_start, offsets_of
from modelir.transports.base import HttpResponse
from modelir.transports.openai.completions import OpenAICompletions
from modelir.transports.vllm import VLLM


def _answer(text, tokens, offsets, logprobs, generated=1, **extra) -> HttpResponse:
    choice = {
        "index": 0,
        "text": text,
        "finish_reason": "length",
        "logprobs": {"tokens": tokens, "token_logprobs": logprobs, "text_offset": offsets, "top_logprobs": None},
        **extra,
    }
    usage = {"prompt_tokens": len(tokens) - generated, "completion_tokens": generated}
    return HttpResponse(200, {}, orjson.dumps({"id": "x", "model": "tiny", "choices": [choice], "usage": usage}))


def _scoring(prompt: str, continuation: str):
    request = build_request("tiny", prompt=prompt, max_output_tokens=1)
    request.input_scoring.continuations.add(text=continuation)
    return request


def test_vllm_scores_the_continuations_tokens_though_its_offsets_count_the_bos_text():
    # score("The cat sat on", " the mat"): offsets start at 3 after `<s>`, the echo text is only what was generated.
    tokens = ["<s>", "The", " cat", " sat", " on", " the", " mat", " world"]
    offsets = [0, 3, 6, 10, 14, 17, 21, 25]
    answer = _answer(" world", tokens, offsets, [None, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0],
                     prompt_token_ids=[352, 84, 300, 301, 302, 257, 303], token_ids=[304])  # fmt: skip
    out = VLLM(provider_model="tiny").lift(_scoring("The cat sat on", " the mat"), answer)
    scores = out.input_scores[0]
    assert list(scores.tokens.tokens) == [" the", " mat"]
    assert scores.logprob_sum == -11.0
    assert (scores.scored_byte_count, scores.span_start_byte) == (8, len(b"The cat sat on"))
    assert not scores.first_token_straddles_context
    # The generated text survives, and an echo that leaves the prompt out is this engine's way, not a mismatch.
    assert out.choices[0].message.parts[0].text == " world"
    assert [w.code for w in out.warnings] == []


def test_control_tokens_before_the_continuation_cannot_move_it():
    # llama-cpp-python: control tokens are spelled "" and the offsets skip their text.
    context = "<|im_start|>user\nhi</s>\n"
    tokens = ["", "user", "\n", "hi", "", "\n", " yes", "Z"]
    offsets = [0, 0, 4, 5, 7, 7, 8, 12]
    answer = _answer(context + " yesZ", tokens, offsets, [None, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0])
    out = OpenAICompletions(provider_model="tiny", echo_scoring=True).lift(_scoring(context, " yes"), answer)
    scores = out.input_scores[0]
    assert list(scores.tokens.token_logprobs) == [-6.0]  # never the generated "Z", never 0 tokens
    assert (scores.scored_token_count, scores.scored_byte_count) == (1, 4)
    assert out.choices[0].message.parts[0].text == "Z"


@pytest.mark.parametrize(
    ("texts", "continuation", "start", "straddles"),
    [
        (["<s>", "Hello", " wor", "ld", ",", " the"], "ld, the", 3, False),
        (["<s>", "Hello", " wor", "ld"], "orld", 2, True),  # " wor" straddles: it is the continuation's
        (["<s>", "Le", " caf", "", "é"], "é", 3, False),  # "é" split over two tokens, the first spelled ""
        (["<s>", "</s>", " yes"], " yes", 2, False),
        (["ab"], "xyzab", None, None),  # the prompt's tokens do not reach back that far
    ],
)
def test_the_rule(texts, continuation, start, straddles):
    offsets = offsets_of(texts)
    split = continuation_start(offsets, texts, offsets[-1] + len(texts[-1]), continuation)
    if start is None:
        assert split is None
    else:
        assert (split.start, split.straddles) == (start, straddles)


@pytest.mark.parametrize("kind", [{"prompt": "Hi"}, {"messages": [("user", "Hi")]}])
def test_vllm_scores_without_generating_by_asking_for_one_token_and_dropping_it(kind):
    request = build_request("tiny", max_output_tokens=0, **kind)
    transport = VLLM(provider_model="tiny")
    body = transport._route(request).body(request, stream=False)
    assert body.get("max_tokens", body.get("max_completion_tokens")) == 1  # 0 is a 400 on vLLM's chat route
    raw = {"index": 0, "finish_reason": "length", "stop_reason": None, "token_ids": [5]}
    if "prompt" in kind:
        raw["text"] = "x"
    else:
        raw["message"] = {"role": "assistant", "content": "x"}
    answer = {"id": "x", "model": "tiny", "object": "chat.completion", "choices": [raw]}
    out = transport.lift(request, HttpResponse(200, {}, orjson.dumps(answer)))
    assert out.choices[0].message.parts[0].text == "" and not out.choices[0].sampled_tokens.token_ids
    assert [w.code for w in out.warnings] == ["generated_token_dropped"]
