"""`classify` over fake llama.cpp and OpenAI chat servers (httpx mock transports speaking their documented shapes):
exact where the logprobs allow it, the method and coverage reported, refused rather than guessed."""

from __future__ import annotations

import math

import httpx
import orjson
import pytest
from modelir import Model, UnsupportedCapabilityError, aclassify
from modelir.http.executor import Executor
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.openai.chat import OpenAIChat

LABELS = [" positive", " negative"]


def _llama_entry(token: str, probability: float, alternatives: list[tuple[str, float]], *, post: bool) -> dict:
    def one(text: str, p: float) -> dict:
        entry = {"id": abs(hash(text)) % 30000, "token": text, "bytes": list(text.encode())}
        entry.update({"prob": p} if post else {"logprob": math.log(p)})
        return entry

    entry = one(token, probability)
    entry["top_probs" if post else "top_logprobs"] = [one(t, p) for t, p in alternatives]
    return entry


class FakeLlamaServer:
    """`/completion` for a prompt whose grammar lets " " come before "positive" / "negative".

    Post-sampling (under the grammar): " " is certain, then positive 1/3, negative 2/3: the exact answer.
    Pre-sampling (raw logits, grammar ignored): the first position lists " positive" and " negative" as whole tokens
    with 2.8% and 7.2% of the mass, the old fallback's 0.28 / 0.72.
    """

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.also_allowed: list[tuple[str, float]] = []  # more second-position tokens the grammar allows

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        self.bodies.append(body)
        if request.url.path == "/apply-template":  # the documented answer: the rendered prompt, nothing generated
            turns = "".join(f"<|{m['role']}|>{m['content']}" for m in body["messages"])
            return httpx.Response(200, json={"prompt": turns + "<|assistant|>"})
        assert request.url.path == "/completion"
        post = bool(body.get("post_sampling_probs"))
        if post:
            positions = [
                _llama_entry(" ", 1.0, [(" ", 1.0)], post=True),
                _llama_entry(
                    "negative", 2 / 3, [("negative", 2 / 3), ("positive", 1 / 3), *self.also_allowed], post=True
                ),
            ]
        else:
            positions = [
                _llama_entry(
                    " ", 0.5, [(" ", 0.5), (" The", 0.3), (" negative", 0.072), (" positive", 0.028)], post=False
                ),
                _llama_entry("negative", 0.4, [("negative", 0.4), ("good", 0.3), ("positive", 0.2)], post=False),
            ]
        answer = {
            "content": " negative",
            "stop": True,
            "model": "tiny.gguf",
            "stop_type": "eos",
            "tokens_predicted": 2,
            "tokens_evaluated": 5,
            "completion_probabilities": positions,
        }
        return httpx.Response(200, json=answer)


@pytest.fixture
async def llama():
    server = FakeLlamaServer()
    executor = Executor("http://llama.test", transport=httpx.MockTransport(server))
    yield Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor), server
    await executor.aclose()


async def test_a_token_shared_by_every_label_is_walked_through_exactly(llama):
    model, server = llama
    result = await aclassify(model, "Review: great film. Sentiment:", LABELS)
    assert result.method == "choice_logprobs"
    assert result.probabilities == pytest.approx({" positive": 1 / 3, " negative": 2 / 3})
    assert result.coverage == pytest.approx(1.0)
    assert result.label == " negative"
    assert [b.get("post_sampling_probs") for b in server.bodies] == [True]  # one call, no pre-sampling fallback


async def test_unconstrained_alternatives_are_renormalised_along_the_path_and_named_so(llama):
    model, _ = llama
    # Without post-sampling logprobs the same walk reads the raw logits: renormalised over the labels at each
    # position (the whole-token " positive" / " negative" branches included), with the mass they held.
    result = await aclassify(_pre_sampling_only(model), "Review: great film. Sentiment:", LABELS)
    assert result.method == "top_logprobs"
    first = 0.5 + 0.072 + 0.028
    shared = 0.5 / first
    expected_negative = 0.072 / first + shared * 0.4 / 0.6
    assert result.probabilities[" negative"] == pytest.approx(expected_negative)
    assert result.coverage == pytest.approx(first * 0.6)


async def test_chat_messages_go_through_the_chat_template_to_exact_logprobs(llama):
    model, server = llama
    result = await aclassify(model, [("user", "Review: great film. Sentiment?")], LABELS)
    assert result.method == "choice_logprobs"
    assert result.probabilities == pytest.approx({" positive": 1 / 3, " negative": 2 / 3})
    rendered, completion = server.bodies
    assert rendered == {"messages": [{"role": "user", "content": "Review: great film. Sentiment?"}]}
    assert completion["prompt"] == "<|user|>Review: great film. Sentiment?<|assistant|>"
    assert completion["post_sampling_probs"] is True


def _pre_sampling_only(model: Model) -> Model:
    manifest = model.capabilities.__class__()
    manifest.CopyFrom(model.capabilities)
    del manifest.logprob_bases[:]
    return Model(model.transport, name=model.name, executor=model.executor, manifest=manifest)


async def test_labels_that_cannot_be_told_apart_are_refused_not_guessed(llama):
    model, server = llama
    # " neg" and " negative" share the unsampled alternative "neg": one call cannot split them, and llama.cpp
    # cannot score; the pre-sampling list does not reach " neg" at all.
    server.also_allowed = [("neg", 0.1)]
    with pytest.raises(UnsupportedCapabilityError) as refused:
        await aclassify(model, "Sentiment:", [" negative", " neg", " positive"])
    reasons = " ".join(refused.value.unsupported.reasons)
    assert "does not guess" in reasons and "post_sampling" in reasons


def _openai_chat_handler(bodies: list[dict]):
    def handle(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        bodies.append(body)
        assert request.url.path == "/v1/chat/completions"
        top = [("neg", -0.2), ("pos", -1.9), ("Neg", -3.5)]
        content = [
            {
                "token": "neg",
                "logprob": -0.2,
                "bytes": list(b"neg"),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top],
            }
        ]
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "negative"},
                    "logprobs": {"content": content, "refusal": None},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21},
        }
        return httpx.Response(200, json=answer)

    return handle


async def test_openai_chat_classifies_by_first_token_top_logprobs():
    bodies: list[dict] = []
    executor = Executor("http://openai.test/v1", transport=httpx.MockTransport(_openai_chat_handler(bodies)))
    model = Model(OpenAIChat(provider_model="gpt-4o-mini"), name="gpt", executor=executor)
    try:
        result = await aclassify(
            model, [("user", "Sentiment of 'dull film'? positive or negative")], ["positive", "negative"]
        )
    finally:
        await executor.aclose()
    assert result.method == "top_logprobs"
    total = math.exp(-0.2) + math.exp(-1.9)
    assert result.probabilities == pytest.approx(
        {"negative": math.exp(-0.2) / total, "positive": math.exp(-1.9) / total}
    )
    assert result.coverage == pytest.approx(total)
    assert bodies[0]["logprobs"] is True and bodies[0]["top_logprobs"] == 20


def _ollama_entry(token: str, logprob: float, alternatives: list[tuple[str, float]]) -> dict:
    def one(text: str, value: float) -> dict:
        return {"token": text, "logprob": value, "bytes": list(text.encode())}

    return {**one(token, logprob), "top_logprobs": [one(t, v) for t, v in alternatives]}


async def test_ollamas_json_quoted_choice_is_walked_as_quoted_labels_with_a_fixed_seed():
    """Ollama's enum schema answers `"negative" ` (quoted, JSON whitespace after): the walk reads the quoted labels;
    pre-sampling logprobs renormalised at the position where the labels part. The request carries a seed."""
    from modelir.transports.ollama import Ollama

    bodies: list[dict] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/show":  # the manifest asks what the model reads (once)
            return httpx.Response(200, json={"capabilities": ["completion"]})
        bodies.append(orjson.loads(request.content))
        positions = [
            _ollama_entry('"', -3.0, [("Hello", -0.1)]),
            _ollama_entry("neg", -0.5, [("neg", -0.5), ("pos", -1.5), ("maybe", -2.0)]),
            _ollama_entry('ative"', -0.01, [('ative"', -0.01)]),
            _ollama_entry(" ", -0.1, [(" ", -0.1)]),
        ]
        answer = {
            "model": "tiny",
            "message": {"role": "assistant", "content": '"negative" '},
            "done": True,
            "done_reason": "stop",
            "logprobs": positions,
        }
        return httpx.Response(200, json=answer)

    executor = Executor("http://ollama.test", transport=httpx.MockTransport(handle))
    model = Model(Ollama(provider_model="tiny"), name="tiny", executor=executor)
    try:
        result = await aclassify(model, [("user", "dull film?")], ["positive", "negative"])
    finally:
        await executor.aclose()
    total = math.exp(-0.5) + math.exp(-1.5)
    assert result.probabilities == pytest.approx(
        {"negative": math.exp(-0.5) / total, "positive": math.exp(-1.5) / total}
    )
    assert result.method == "top_logprobs" and result.label == "negative"
    assert bodies[0]["options"]["seed"] == 0
