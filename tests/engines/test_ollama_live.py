"""The ollama transport against a real Ollama (built from the Go module proxy by `engines/ollama/build.sh`) serving
the project's tiny model (`engines/llamacpp/tiny_model.py`). Run with `make test-engines`; skipped otherwise.

Each test names the capability of the manifest it exercises; what this Ollama does differently from the other
engines (pre-sampling logprobs without token ids, `num_predict: 0` meaning no limit, silent truncation) is in
`../shared/engines/ollama.md`."""

from __future__ import annotations

import base64
import os

import httpx
import jsonschema
import numpy as np
import orjson
import pytest
from modelir import Model, UnsupportedCapabilityError, accumulate, aclassify, build_request, errors
from modelir.http.executor import Executor
from modelir.transports import zero_output
from modelir.transports.ollama import TRUNCATION_WARNING
from modelir.v1 import content_pb2, logprobs_pb2, request_pb2, response_pb2

from tests.engines import launch, numpy_truth, recorder

OLLAMA = os.environ.get("MODELIR_OLLAMA")
pytestmark = pytest.mark.skipif(not OLLAMA, reason="set MODELIR_OLLAMA (make test-engines builds and sets it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    assert OLLAMA is not None
    with launch.ollama(OLLAMA, tmp_path_factory.mktemp("ollama")) as url:
        yield url


@pytest.fixture
async def model(server):
    executor = Executor(server)
    yield Model(recorder.transport("ollama", provider_model="tiny"), name="tiny", executor=executor)
    await executor.aclose()


def _text(response: response_pb2.Response) -> str:
    return "".join(p.text for p in response.choices[0].message.parts if p.WhichOneof("content") == "text")


def _greedy(**kwargs):
    request = build_request("tiny", temperature=0.0, seed=1, **kwargs)
    request.sampling.repetition_penalty = 1.0  # Ollama's default is 1.1: greedy must be greedy
    return request


async def test_chat_unary_and_streamed_agree(model):
    request = _greedy(messages=[("user", "Hello")], max_output_tokens=8)
    unary = await model.arun(request)
    streamed = accumulate([event async for event in model.astream(request)])
    assert _text(unary) and _text(unary) == _text(streamed)
    assert unary.usage.output_token_count == streamed.usage.output_token_count > 0
    assert unary.usage.input_token_count > 0
    assert unary.choices[0].finish_reason in (response_pb2.FINISH_REASON_LENGTH, response_pb2.FINISH_REASON_STOP)


async def test_raw_prompt_completion_with_sampled_and_top_logprobs(model):
    request = _greedy(prompt="Hello world, the", max_output_tokens=5, top_logprobs=3)
    response = await model.arun(request)
    logprobs = response.choices[0].logprobs
    assert len(logprobs.token_logprobs) == response.usage.output_token_count == 5
    assert logprobs.basis == logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
    assert list(logprobs.top_counts) == [3] * 5
    # Greedy: every sampled token is the most likely of its alternatives.
    offset = 0
    for position, count in enumerate(logprobs.top_counts):
        best = max(logprobs.top_logprobs[offset : offset + count])
        assert logprobs.token_logprobs[position] == pytest.approx(best, abs=1e-4)
        offset += count


async def test_json_schema_constraint_gives_valid_json(model):
    schema = {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}
    request = _greedy(messages=[("user", "JSON:")], json_schema=orjson.dumps(schema).decode(), max_output_tokens=40)
    jsonschema.validate(orjson.loads(_text(await model.arun(request))), schema)


async def test_choice_constraint_gives_a_label(model):
    response = await model.arun(_greedy(messages=[("user", "Answer:")], choices=["yes", "no", "maybe"]))
    assert response.choices[0].constrained_label in {"yes", "no", "maybe"}


async def test_what_the_manifest_lacks_is_refused_before_any_call(model):
    with pytest.raises(UnsupportedCapabilityError, match="TOKEN_INPUT"):
        await model.arun(build_request("tiny", token_ids=[1, 2, 3], max_output_tokens=2))


async def test_raw_prompt_streamed_fold_equals_the_unary_answer_with_logprobs(model):
    request = _greedy(prompt="Hello world, the", max_output_tokens=6, top_logprobs=2)
    unary = await model.arun(request)
    streamed = accumulate([event async for event in model.astream(request)])
    assert _text(unary) == _text(streamed)
    assert streamed.choices[0].logprobs.basis == logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
    assert list(unary.choices[0].logprobs.token_logprobs) == list(streamed.choices[0].logprobs.token_logprobs)
    assert unary.choices[0].logprobs.token_bytes == streamed.choices[0].logprobs.token_bytes


async def test_max_output_tokens_zero_generates_nothing_and_says_how(model):
    """Ollama reads `num_predict: 0` as no limit (76 tokens): modelir asks for one and drops it, with a warning."""
    request = _greedy(prompt="Hello world, the", max_output_tokens=0, top_logprobs=1)
    for response in (
        await model.arun(request),
        accumulate([event async for event in model.astream(request)]),
    ):
        assert _text(response) == ""
        assert not response.choices[0].logprobs.token_logprobs
        assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_LENGTH
        assert response.usage.output_token_count == 1  # what the engine really did
        assert [w.code for w in response.warnings] == [zero_output.WARNING_CODE]


async def test_max_output_tokens_one_generates_one_token(model):
    response = await model.arun(_greedy(prompt="Hello world, the", max_output_tokens=1, top_logprobs=1))
    assert response.usage.output_token_count == len(response.choices[0].logprobs.token_logprobs) == 1
    assert _text(response) and not response.warnings


async def test_an_over_long_prompt_is_an_error_not_a_silent_cut(model):
    """Ollama cuts a prompt longer than num_ctx (256) with a 200 unless `truncate` is false, which modelir sends."""
    long_prompt = "hello world " * 400
    with pytest.raises(errors.ModelError, match=r"(?i)context|length|exceed"):
        await model.arun(_greedy(prompt=long_prompt, max_output_tokens=2))
    allowed = _greedy(prompt=long_prompt, max_output_tokens=2)
    allowed.provider_options.add(transport="ollama", options_json=b'{"truncate": true}')
    response = await model.arun(allowed)
    assert [w.code for w in response.warnings] == [TRUNCATION_WARNING]
    assert 0 < response.usage.input_token_count <= 256


async def test_truncate_must_be_a_boolean(model):
    request = _greedy(prompt="Hello", max_output_tokens=1)
    request.provider_options.add(transport="ollama", options_json=b'{"truncate": "yes"}')
    with pytest.raises(UnsupportedCapabilityError, match="truncate"):
        await model.arun(request)


async def test_prefill_is_refused_before_any_call(model):
    """Ollama continues a final assistant message only when the model's template leaves it open, and says nothing
    when it does not: the manifest does not claim PREFILL, so a prefill is refused rather than silently closed."""
    request = _greedy(messages=[("user", "Hello")], max_output_tokens=4)
    request.prefill = "Hello world"
    with pytest.raises(UnsupportedCapabilityError, match="PREFILL"):
        await model.arun(request)


async def test_stop_string_ends_the_output_before_it(model):
    free = _text(await model.arun(_greedy(prompt="Hello world, the", max_output_tokens=12)))
    stop = free.strip().split()[1] if len(free.split()) > 1 else free.strip()[:2]
    stopped = await model.arun(_greedy(prompt="Hello world, the", max_output_tokens=12, stop=[stop]))
    assert stop not in _text(stopped) and free.startswith(_text(stopped))
    assert stopped.choices[0].finish_reason == response_pb2.FINISH_REASON_STOP


async def test_a_seed_makes_sampling_repeatable(model):
    def sampled(seed: int) -> request_pb2.Request:
        return build_request("tiny", prompt="Hello world, the", max_output_tokens=12, temperature=1.0, seed=seed)

    first, again = await model.arun(sampled(7)), await model.arun(sampled(7))
    assert _text(first) == _text(again)


@pytest.mark.parametrize(
    "extra",
    [
        {"prompt": "def f(", "fim_suffix": "return 1"},
        {"messages": [("user", "Hi")], "reasoning": True},
        {"messages": [("user", "Hi")], "tools": "weather"},
    ],
    ids=["fim", "thinking", "tools"],
)
async def test_what_the_template_lacks_is_a_typed_unsupported_error(model, extra):
    """Ollama answers a 400 when the model's template has no insert (FIM), thinking or tools slot."""
    request = _greedy(max_output_tokens=2, **{k: v for k, v in extra.items() if k in ("prompt", "messages")})
    if "fim_suffix" in extra:
        request.fim.suffix = extra["fim_suffix"]
    if extra.get("reasoning"):
        request.reasoning_controls.include_thoughts = True
    if extra.get("tools"):
        request.tools.add().function.name = extra["tools"]
    with pytest.raises(UnsupportedCapabilityError, match=r"(?i)support"):
        await model.arun(request)


async def test_classify_walks_ollamas_json_quoted_choice_and_is_repeatable(model):
    """Ollama answers a choice as the JSON-quoted label (`"yes" `): classify walks the quoted labels (before, it
    stopped at the quote: "no alternative at position 0"); its seed makes the same input give the same outcome on
    every call (before, it sampled at temperature 1 unseeded). This random tiny model's unconstrained top-20 rarely
    holds both labels after the quote, so the outcome may be an honest refusal: the same one each time."""

    async def outcome():
        try:
            return await aclassify(model, [("user", "Hello")], ["yes", "no"])
        except UnsupportedCapabilityError as refused:
            assert "position 0" not in str(refused)
            return str(refused)

    first = await outcome()
    for _ in range(3):
        assert await outcome() == first


async def test_classify_succeeds_on_labels_the_model_can_say(model):
    """Ollama's logprobs are pre-sampling (the whole vocabulary's top 20, whatever the constraint): classify walks
    the JSON-quoted answer (`"label"`) and reads each label's mass among them. The labels here are two tokens the
    model itself ranks high after the opening quote, so its top 20 hold both: classify answers, every time the
    same (before, it stopped at the quote: "no alternative at position 0")."""
    probe = _greedy(messages=[("user", "Hello")], choices=["x", "y"], top_logprobs=20)
    logprobs = (await model.arun(probe)).choices[0].logprobs
    assert logprobs.tokens[0].strip() == '"'
    start, count = logprobs.top_counts[0], logprobs.top_counts[1]
    candidates = [
        t
        for t in logprobs.top_tokens[start : start + count]
        if t.strip() and t.isalpha() and '"' not in t and "\\" not in t
    ]
    labels: list[str] = []
    for token in candidates:  # two labels, neither the start of the other
        if not any(token.startswith(x) or x.startswith(token) for x in labels):
            labels.append(token)
    labels = labels[:2]
    assert len(labels) == 2, candidates
    first = await aclassify(model, [("user", "Hello")], labels)
    assert first.method == "top_logprobs" and set(first.probabilities) == set(labels)
    assert sum(first.probabilities.values()) == pytest.approx(1.0) and 0 < first.coverage <= 1
    again = await aclassify(model, [("user", "Hello")], labels)
    assert again.label == first.label and again.probabilities == pytest.approx(first.probabilities, abs=1e-5)


# ---- one truth: the numpy forward pass (`numpy_truth.py`) --------------------------------------------------

TRUTH_TEXTS = ["The cat sat on the mat. Le café", "Hello world, café ü 日本 🙂 it's 123", "naïve façade — Ünïcödé ✓"]
# Ollama keeps its KV cache in float16 (OLLAMA_KV_CACHE_TYPE offers nothing wider; llama-server's tests set float32):
# ~1.4e-3 from the float64 truth.
TRUTH_TOLERANCE = 2e-3
LARGEST = [0.0]


def _close(got: float, want: float) -> None:
    LARGEST[0] = max(LARGEST[0], abs(got - want))
    assert got == pytest.approx(want, abs=TRUTH_TOLERANCE)


@pytest.mark.parametrize("text", TRUTH_TEXTS)
async def test_sampled_and_top_logprobs_equal_the_truth_and_the_raw_answer(model, text):
    """Greedy with repetition_penalty 1 (Ollama's default repeat_penalty is 1.1, which changes what greedy samples):
    each sampled token's and each alternative's logprob is the truth's, the prompt's token count is the model's own
    tokenization's, and modelir's columns are the raw answer's exactly. Ollama gives no token ids: the truth's ids
    are read from each token's bytes, up to the first token Ollama spelled as U+FFFD (one that ends inside a UTF-8
    character: its bytes are lost, which modelir's warning names)."""
    request = _greedy(prompt=text, max_output_tokens=8, top_logprobs=3)
    request.include_raw = True
    out = await model.arun(request)
    raw = orjson.loads(out.raw.body)
    logprobs = out.choices[0].logprobs
    entries = raw["logprobs"]
    assert list(logprobs.tokens) == [e["token"] for e in entries]
    assert list(logprobs.token_logprobs) == [float(np.float32(e["logprob"])) for e in entries]
    assert logprobs.token_bytes == b"".join(bytes(e["bytes"]) for e in entries)
    prompt = numpy_truth.tokenize(text)
    assert raw["prompt_eval_count"] == len(prompt)
    replaced = [i for i, e in enumerate(entries) if "\ufffd" in e["token"]]
    assert bool(replaced) == any(w.code == "token_bytes_replaced" for w in out.warnings)
    known = entries[: replaced[0]] if replaced else entries
    ids = [numpy_truth.id_of_bytes(bytes(e["bytes"])) for e in known]
    rows = numpy_truth.logprobs(prompt + ids)
    for i, entry in enumerate(known):
        row = rows[len(prompt) + i - 1]
        _close(entry["logprob"], row[ids[i]])
        for alternative in entry["top_logprobs"]:
            alternative_id = numpy_truth.id_of_bytes(bytes(alternative["bytes"]))
            if alternative_id is not None:  # not a U+FFFD rendering
                _close(alternative["logprob"], row[alternative_id])


def test_largest_difference_from_the_truth():
    """Runs after the comparisons above: prints the largest difference they saw."""
    if not LARGEST[0]:
        pytest.skip("reports on the comparisons of the tests above; run the whole module")
    print(f"\nOllama live: largest |Ollama - numpy truth| = {LARGEST[0]:.3g}")
    assert LARGEST[0] < TRUTH_TOLERANCE


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


async def test_an_image_to_a_model_without_vision_is_refused_from_its_capabilities(server):
    """The tiny model has no vision and Ollama answers an image with a 200, ignoring it. modelir asks `/api/show`
    once per model (only for a request with an image) and refuses the image before the generation call, unary and
    streamed; the `vision` option overrides it: `true` sends the image without asking, `false` refuses it without
    asking."""
    async with httpx.AsyncClient() as client:
        shown = (await client.post(server + "/api/show", json={"model": "tiny"})).json()
    assert shown["capabilities"] == ["completion"]
    request = _greedy(messages=[("user", "What is this?")], max_output_tokens=2)
    request.conversation.messages[0].parts.add().blob.CopyFrom(content_pb2.Blob(mime_type="image/png", data=PNG))
    executor = Executor(server)
    paths: list[str] = []
    send, stream_batches = executor.send, executor.stream_batches

    async def counted_send(native, **kwargs):
        paths.append(native.path)
        return await send(native, **kwargs)

    def counted_stream(native, **kwargs):
        paths.append(native.path)
        return stream_batches(native, **kwargs)

    # `Model` streams through `stream_batches` (`stream` unbatches it for other callers)
    executor.send, executor.stream_batches = counted_send, counted_stream  # type: ignore[method-assign]
    learned = Model(recorder.transport("ollama", provider_model="tiny"), name="tiny", executor=executor)
    refused = r"IMAGE_INPUT; Ollama: model 'tiny' has no vision \(its /api/show capabilities are completion\)"
    with pytest.raises(UnsupportedCapabilityError, match=refused):
        await learned.arun(request)
    with pytest.raises(UnsupportedCapabilityError, match=refused):
        accumulate([e async for e in learned.astream(request)])
    assert paths == ["/api/show"]  # learned once, and no generation call
    assert _text(await learned.arun(_greedy(messages=[("user", "Hi")], max_output_tokens=2)))
    assert paths == ["/api/show", "/api/chat"]  # a request without an image asks nothing
    sent = Model(recorder.transport("ollama", provider_model="tiny", vision=True), name="tiny", executor=executor)
    for response in (await sent.arun(request), accumulate([e async for e in sent.astream(request)])):
        assert not [w for w in response.warnings if w.code == "image_input_unverified"] and _text(response)
    configured = Model(
        recorder.transport("ollama", provider_model="tiny", vision=False), name="tiny", executor=executor
    )
    with pytest.raises(UnsupportedCapabilityError, match="missing capabilities: IMAGE_INPUT"):
        await configured.arun(request)
    assert paths == ["/api/show", "/api/chat", "/api/chat", "/api/chat"]
    await executor.aclose()


async def test_greedy_without_a_repetition_penalty_is_told_of_ollamas_default(model):
    """Ollama applies repeat_penalty 1.1 unless told otherwise, even at temperature 0: the sampled tokens are then
    not always the model's most likely (its pre-sampling logprobs show a better alternative), and modelir says why;
    with sampling.repetition_penalty 1 the output is plain greedy and there is no warning."""
    request = build_request("tiny", prompt=TRUTH_TEXTS[0], max_output_tokens=12, temperature=0.0, top_logprobs=1)
    penalised = await model.arun(request)
    assert [w.code for w in penalised.warnings if w.code == "default_repeat_penalty"] == ["default_repeat_penalty"]
    logprobs = penalised.choices[0].logprobs
    assert any(
        best > sampled + 1e-6 for sampled, best in zip(logprobs.token_logprobs, logprobs.top_logprobs, strict=True)
    )
    plain = await model.arun(_greedy(prompt=TRUTH_TEXTS[0], max_output_tokens=12, top_logprobs=1))
    assert not [w for w in plain.warnings if w.code == "default_repeat_penalty"]
    greedy = plain.choices[0].logprobs
    assert all(best <= sampled + 1e-6 for sampled, best in zip(greedy.token_logprobs, greedy.top_logprobs, strict=True))
