"""`classify` with labels that share a prefix ("positive", "negative", "neutral"): the branch the sample did not
take is classified by a call of its own, so the answer is complete whichever branch was sampled (before, the
unsampled shared "ne" made classify refuse, at random while it sampled unseeded)."""

from __future__ import annotations

import math

import httpx
import orjson
import pytest
from modelir import Model, UnsupportedCapabilityError, aclassify
from modelir.http.executor import Executor
from modelir.transports.llamacpp import LlamaCpp

LABELS = ["positive", "negative", "neutral"]


def _entry(token: str, probability: float, alternatives: list[tuple[str, float]]) -> dict:
    def one(text: str, p: float) -> dict:
        return {"id": sum(text.encode()), "token": text, "bytes": list(text.encode()), "prob": p}

    return {**one(token, probability), "top_probs": [one(t, p) for t, p in alternatives]}


class FakeLlamaServer:
    """Post-sampling `/completion` under the choice grammar: with every label allowed, "pos" and "ne" are even and
    the seed samples "pos"; with "negative" and "neutral" alone, "ne" is certain and then "gative" has 3/4."""

    def __init__(self) -> None:
        self.grammars: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        assert body.get("post_sampling_probs") and body["seed"] == 0
        self.grammars.append(body["grammar"])
        if "positive" in body["grammar"]:
            positions = [_entry("pos", 0.5, [("pos", 0.5), ("ne", 0.5)]), _entry("itive", 1.0, [("itive", 1.0)])]
            text = "positive"
        else:
            positions = [
                _entry("ne", 1.0, [("ne", 1.0)]),
                _entry("gative", 0.75, [("gative", 0.75), ("utral", 0.25)]),
            ]
            text = "negative"
        answer = {
            "content": text,
            "stop": True,
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


async def test_an_unsampled_shared_branch_is_classified_by_its_own_call(llama):
    model, server = llama
    result = await aclassify(model, "Review: fine. Sentiment:", LABELS)
    assert result.method == "choice_logprobs" and result.label == "positive"
    assert result.probabilities == pytest.approx({"positive": 0.5, "negative": 0.375, "neutral": 0.125})
    assert math.fsum(result.probabilities.values()) == pytest.approx(1.0)
    # One call with every label, one for the branch's labels alone.
    assert len(server.grammars) == 2 and "positive" not in server.grammars[1]


async def test_the_same_input_gives_the_same_answer(llama):
    model, _ = llama
    first = await aclassify(model, "Review: fine. Sentiment:", LABELS)
    for _ in range(3):
        assert await aclassify(model, "Review: fine. Sentiment:", LABELS) == first


async def test_a_label_that_ends_where_another_goes_on_is_still_refused():
    class Prefixed(FakeLlamaServer):
        def __call__(self, request: httpx.Request) -> httpx.Response:
            positions = [_entry("yes", 0.5, [("yes", 0.5), ("no", 0.5)]), _entry(" sir", 1.0, [(" sir", 1.0)])]
            body = {"content": "yes sir", "stop": True, "stop_type": "eos", "tokens_predicted": 2}
            return httpx.Response(200, json={**body, "completion_probabilities": positions})

    executor = Executor("http://llama.test", transport=httpx.MockTransport(Prefixed()))
    model = Model(LlamaCpp(provider_model="tiny"), name="tiny", executor=executor)
    with pytest.raises(UnsupportedCapabilityError, match="ends where"):
        await aclassify(model, "Q:", ["yes", "yes sir", "no"])
    await executor.aclose()
