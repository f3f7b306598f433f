"""Input scoring proven live: the `openai_completions` transport against llama-cpp-python's OpenAI-compatible
server (`llama_cpp.server`, built from PyPI source by `engines/llama_cpp_python/build.sh`) serving the tiny model
the engine tests generate, checked against the same model loaded in-process (`llama_cpp.Llama`, all logits).

Run with `make test-engines`; skipped otherwise. The largest difference from the in-process truth is printed
(`-s` shows it).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from modelir import Model, UnsupportedCapabilityError, accumulate, build_request
from modelir.errors import ProviderRejectedError
from modelir.http.executor import Executor
from modelir.transports.openai.completions import OpenAICompletions
from modelir.v1 import capabilities_pb2, response_pb2

from tests.engines import numpy_truth, recorder
from tests.integrations.lm_eval_tasks import TASKS, documents, responses, run_tasks

PYTHON = os.environ.get("MODELIR_LLAMA_CPP_PYTHON")
pytestmark = pytest.mark.skipif(
    not PYTHON, reason="set MODELIR_LLAMA_CPP_PYTHON (make test-engines builds and sets it)"
)
ROOT = Path(__file__).resolve().parents[2]
C = capabilities_pb2
N_CTX = 256
# Both sides compute logprobs in float32; the server sends them as JSON decimals and the IR keeps float32.
FLOAT32_TOLERANCE = 1e-5
PROMPTS = [
    "The cat sat on the mat.",
    "Le café est très bon, s'il vous plaît.",
    "日本の首都は東京です。 hello 日本",
    "naïve façade — Ünïcödé ✓ 🙂 done",
]
# (context, continuation): a word after a space, multi-byte continuations, a context that ends inside a word (the
# boundary token straddles) and one that ends inside a character's tokens.
PAIRS = [
    ("The cat sat on the", " mat"),
    ("Le café est", " très bon 日本"),
    ("Hello wor", "ld, the cat"),
    ("日本の首都は", "東京です。"),
    ("emoji: 🙂", " ✓ done"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    model = tmp_path_factory.mktemp("llama-cpp-python") / "tiny.gguf"
    subprocess.run([sys.executable, str(ROOT / "engines/llamacpp/tiny_model.py"), str(model)], check=True)
    return model


@pytest.fixture(scope="module")
def server(tiny):
    port = _free_port()
    log = (tiny.parent / "server.log").open("w")
    process = subprocess.Popen(
        [
            *(PYTHON, "-m", "llama_cpp.server", "--model", str(tiny), "--model_alias", "tiny"),
            *("--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(N_CTX), "--n_threads", "2"),
            *("--logits_all", "true", "--verbose", "false"),
            # The KV cache in float32 (llama.cpp's default is float16: ~1.7e-3 from the numpy truth), as the
            # in-process truth's (`truth`).
            *("--type_k", "0", "--type_v", "0"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
    else:
        process.kill()
        raise RuntimeError("llama_cpp.server did not start: " + (tiny.parent / "server.log").read_text()[-2000:])
    yield url
    process.terminate()
    process.wait(10)


def live_manifest() -> capabilities_pb2.CapabilityManifest:
    """What this server honours on the completions wire: OpenAI's surface plus prompt scoring by echo, minus
    FIM (0.3.36 sends token id 0 for every FIM marker: a TODO in its source) and `n` (it returns one choice)."""
    manifest = OpenAICompletions(provider_model="tiny", zero_output_emulated=True).manifest()
    kept = set(manifest.capabilities) - {C.CAPABILITY_FIM, C.CAPABILITY_MULTIPLE_CHOICES}
    del manifest.capabilities[:]
    manifest.capabilities.extend(sorted(kept | {C.CAPABILITY_INPUT_SCORING}))
    return manifest


@pytest.fixture
async def model(server):
    executor = Executor(server + "/v1")
    yield Model(
        recorder.transport("openai_completions", provider_model="tiny", zero_output_emulated=True),
        name="tiny",
        executor=executor,
        manifest=live_manifest(),
    )
    await executor.aclose()


@pytest.fixture(scope="module")
def truth(tiny):
    """Per text: token ids, token bytes and per-position logprobs with top-5, from `llama_cpp.Llama` in-process."""
    texts = PROMPTS + [c + x for c, x in PAIRS] + [d["text"] for d in documents("documents.jsonl")]
    texts += [d["question"] + " " + choice for d in documents("choice.jsonl") for choice in d["choices"]]
    job = json.dumps({"model": str(tiny), "n_ctx": N_CTX, "texts": texts, "top_k": 5, "type_k": 0, "type_v": 0})
    done = subprocess.run(
        [PYTHON, str(ROOT / "engines/llama_cpp_python/truth.py")], input=job, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    entries = dict(zip(texts, json.loads(done.stdout), strict=True))
    for entry in entries.values():  # the one truth of every engine beside it: the numpy forward pass
        ids = entry["tokens"]
        # The same vocabulary: llama.cpp's bytes for each id are the numpy truth's.
        assert [numpy_truth.token_bytes(i).hex() for i in ids[1:]] == entry["bytes"][1:]
        rows = numpy_truth.logprobs(ids)
        for i, position in enumerate(entry["positions"]):
            position["numpy"] = float(rows[i][ids[i + 1]])
    return entries


def _continuation_truth(entry: dict, context: str, key: str = "logprob") -> list[float]:
    """The truth's logprobs of the tokens that end after `context` (a straddling token is the continuation's):
    llama.cpp's in-process (`logprob`) or the numpy forward pass's (`numpy`)."""
    boundary = len(context.encode())
    return [entry["positions"][i - 1][key] for i, (_, end) in enumerate(_spans(entry)) if i and end > boundary]


LARGEST_DIFFERENCE = [0.0]
COMPARED = [0]


NUMPY_LARGEST = [0.0]
# The numpy truth is float64; llama.cpp computes in float32 with its own kernels.
NUMPY_TOLERANCE = 1e-3


def _compare(scored: list[float], expected: list[float], numpy: list[float] | None = None) -> None:
    assert len(scored) == len(expected)
    for got, want in zip(scored, expected, strict=True):
        COMPARED[0] += 1
        LARGEST_DIFFERENCE[0] = max(LARGEST_DIFFERENCE[0], abs(got - want))
        assert got == pytest.approx(want, abs=FLOAT32_TOLERANCE)
    if numpy is None:
        return
    for got, want in zip(scored, numpy, strict=True):
        NUMPY_LARGEST[0] = max(NUMPY_LARGEST[0], abs(got - want))
        assert got == pytest.approx(want, abs=NUMPY_TOLERANCE)


def _spans(entry: dict) -> list[tuple[int, int]]:
    """Each token's byte span in the text (the BOS has none)."""
    spans, at = [], 0
    for hexed in entry["bytes"]:
        n = len(bytes.fromhex(hexed))
        spans.append((at, at + n))
        at += n
    return spans


async def _score(model, prompt: str, continuation: str | None = None, top_k: int = 0) -> response_pb2.Response:
    # max_tokens 0 means "until the context is full" to llama-cpp-python, so one token is generated and set aside.
    request = build_request("tiny", prompt=prompt, max_output_tokens=1)
    request.input_scoring.SetInParent()
    if continuation is not None:
        request.input_scoring.continuations.add(text=continuation)
    request.input_scoring.top_logprob_count = top_k
    response = await model.arun(request)
    assert not bool(response.errors), response.errors[0].message
    return response


@pytest.mark.parametrize("prompt", PROMPTS)
async def test_whole_prompt_scores_and_bits_per_byte_equal_the_in_process_truth(model, truth, prompt):
    entry = truth[prompt]
    scores = (await _score(model, prompt)).input_scores[0]
    # The server echoes no BOS and gives the first prompt token no logprob (OpenAI's convention): unscored.
    assert scores.unscored_token_count == 1
    expected = [p["logprob"] for p in entry["positions"][1:]]
    _compare(list(scores.tokens.token_logprobs), expected, [p["numpy"] for p in entry["positions"][1:]])
    first_scored_byte = _spans(entry)[2][0]
    assert scores.span_start_byte == first_scored_byte
    assert scores.scored_byte_count == len(prompt.encode()) - first_scored_byte
    assert scores.scored_char_count == len(prompt.encode()[first_scored_byte:].decode())
    assert scores.scored_token_count == len(expected)
    # The requested span is the whole prompt, its unscored first token included.
    assert (scores.span_byte_count, scores.span_char_count) == (len(prompt.encode()), len(prompt))
    true_bpb = -math.fsum(expected) / math.log(2) / (len(prompt.encode()) - first_scored_byte)
    bpb = -scores.logprob_sum / math.log(2) / scores.scored_byte_count
    LARGEST_DIFFERENCE[0] = max(LARGEST_DIFFERENCE[0], abs(bpb - true_bpb))
    assert bpb == pytest.approx(true_bpb, abs=FLOAT32_TOLERANCE)


@pytest.mark.parametrize(("context", "continuation"), PAIRS)
async def test_a_continuation_is_scored_from_the_servers_own_token_offsets(model, truth, context, continuation):
    entry = truth[context + continuation]
    boundary = len(context.encode())
    first = next(i for i, (_, end) in enumerate(_spans(entry)) if i and end > boundary)
    expected = _continuation_truth(entry, context)
    scores = (await _score(model, context, continuation)).input_scores[0]
    _compare(list(scores.tokens.token_logprobs), expected, _continuation_truth(entry, context, "numpy"))
    start = _spans(entry)[first][0]
    assert scores.span_start_byte == start
    assert scores.scored_byte_count == len((context + continuation).encode()) - start
    assert (scores.span_byte_count, scores.span_char_count) == (len(continuation.encode()), len(continuation))
    assert scores.first_token_straddles_context == (start < boundary)
    assert scores.logprob_sum == pytest.approx(math.fsum(expected), abs=FLOAT32_TOLERANCE * len(expected))


async def test_top_k_alternatives_are_the_models_most_likely_tokens(model, truth):
    prompt = PROMPTS[1]
    entry = truth[prompt]
    tokens = (await _score(model, prompt, top_k=3)).input_scores[0].tokens
    start = 0
    for i, count in enumerate(tokens.top_counts):
        end = start + count
        got = dict(zip(tokens.top_tokens[start:end], tokens.top_logprobs[start:end], strict=True))
        start = end
        # The wire's alternatives are a dict keyed by token text (decoded, partial characters dropped): the top 3,
        # then the scored token itself. Build the same dict from the truth.
        position = entry["positions"][i + 1]
        expected = {bytes.fromhex(alt).decode("utf-8", "ignore"): lp for alt, lp in position["top"][:3]}
        expected[bytes.fromhex(entry["bytes"][i + 2]).decode("utf-8", "ignore")] = position["logprob"]
        assert set(got) == set(expected)
        _compare([got[k] for k in sorted(got)], [expected[k] for k in sorted(expected)])


async def test_generation_with_sampled_logprobs_and_a_stop_sequence(model):
    request = build_request(
        "tiny", prompt="Hello world, the", max_output_tokens=24, temperature=0, stop=["e"], top_logprobs=2
    )
    response = await model.arun(request)
    choice = response.choices[0]
    text = choice.message.parts[0].text
    assert "e" not in text
    assert choice.finish_reason in (response_pb2.FINISH_REASON_STOP, response_pb2.FINISH_REASON_STOP_SEQUENCE)
    assert len(choice.logprobs.token_logprobs) == len(choice.logprobs.tokens) > 0
    assert all(c <= 3 for c in choice.logprobs.top_counts)
    assert response.usage.output_token_count == len(choice.logprobs.token_logprobs)


async def test_stream_accumulates_to_the_unary_answer(model):
    request = build_request("tiny", prompt="The cat", max_output_tokens=10, temperature=0, top_logprobs=1)
    unary = await model.arun(request)
    streamed = accumulate([event async for event in model.astream(request)])
    assert streamed.choices[0].message.parts[0].text == unary.choices[0].message.parts[0].text
    # The engine computes a stream's tokens in other batches than the unary answer's: float32 noise, no more.
    assert list(streamed.choices[0].logprobs.token_logprobs) == pytest.approx(
        list(unary.choices[0].logprobs.token_logprobs), abs=FLOAT32_TOLERANCE
    )
    assert streamed.choices[0].finish_reason == unary.choices[0].finish_reason


async def test_what_this_server_lacks_is_rejected_before_any_request(model):
    fim = build_request("tiny", prompt="def f(")
    fim.fim.suffix = "):\n    return 1"
    with pytest.raises(UnsupportedCapabilityError, match="FIM"):
        await model.arun(fim)
    with pytest.raises(UnsupportedCapabilityError, match="streams"):
        scoring = build_request("tiny", prompt="The cat", max_output_tokens=1)
        scoring.input_scoring.SetInParent()
        async for _ in model.astream(scoring):
            pass


def test_lm_eval_tasks_on_the_live_engine(server, truth, monkeypatch):
    """The repository's three lm-eval tasks, scored and generated by the live server, checked against the truth."""
    pytest.importorskip("lm_eval")
    from modelir.integrations.lm_eval import ModelirLM

    executor = Executor(server + "/v1")
    live = Model(
        recorder.transport("openai_completions", provider_model="tiny", zero_output_emulated=True),
        name="tiny",
        executor=executor,
        manifest=live_manifest(),
    )
    lm = ModelirLM(model=live, concurrency=2, seed=1)
    try:
        results = run_tasks("", TASKS, monkeypatch, model=lm)
    finally:
        lm._loop.run_until_complete(executor.aclose())  # the executor's session lives on the LM's loop
        lm.close()
    for doc, resps in zip(documents("choice.jsonl"), responses(results, "modelir_choice"), strict=True):
        for choice, resp in zip(doc["choices"], resps, strict=True):
            entry = truth[doc["question"] + " " + choice]
            _compare([resp[0][0]], [math.fsum(_continuation_truth(entry, doc["question"]))])
            # Greedy: every continuation token was the in-process model's most likely one.
            boundary = len(doc["question"].encode())
            positions = [entry["positions"][i - 1] for i, (_, end) in enumerate(_spans(entry)) if i and end > boundary]
            assert resp[0][1] == all(p["logprob"] >= p["top"][0][1] - FLOAT32_TOLERANCE for p in positions)
    # Rolling: every document's sum is the truth's, less its first token (this wire gives that one no logprob).
    for doc, resps in zip(documents("documents.jsonl"), responses(results, "modelir_rolling"), strict=True):
        _compare([resps[0][0]], [math.fsum(p["logprob"] for p in truth[doc["text"]]["positions"][1:])])
    assert results["results"]["modelir_rolling"]["bits_per_byte,none"] > 0
    generated = responses(results, "modelir_generate")
    assert all(isinstance(r[0][0], str) and "\n" not in r[0][0] and "." not in r[0][0] for r in generated)


def test_largest_difference_from_the_in_process_truth():
    """Runs last in this module: prints the largest difference any comparison above saw."""
    if not COMPARED[0]:
        pytest.skip("reports on the comparisons of the tests above; run the whole module")
    print(
        f"\nllama-cpp-python live scoring: {COMPARED[0]} values compared, "
        f"largest |modelir - in-process| = {LARGEST_DIFFERENCE[0]:.3g}, "
        f"largest |llama-cpp-python - numpy truth| = {NUMPY_LARGEST[0]:.3g}"
    )
    assert LARGEST_DIFFERENCE[0] < FLOAT32_TOLERANCE and 0 < NUMPY_LARGEST[0] < NUMPY_TOLERANCE


async def test_an_over_long_prompt_is_a_typed_rejection(model):
    # llama-cpp-python refuses a prompt longer than its context (a 400 naming the context length), never cuts it.
    with pytest.raises(ProviderRejectedError, match="maximum context length is 256"):
        await model.arun(build_request("tiny", prompt="the cat " * 400, max_output_tokens=1))
