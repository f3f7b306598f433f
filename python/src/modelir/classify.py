"""`classify(model, messages, labels)`: the chosen label and a probability for every label.

Two methods, chosen by what the model's manifest honours, and reported in the result:

- `choice_logprobs`: one call with a choice constraint and top-k logprobs. Each label's probability is the
  probability of its first token at the first position, renormalised over the labels. It needs labels whose first
  tokens differ; when two labels share a first token, the scoring method is used if the model has it.
- `scoring`: each label is scored as a continuation after the conversation (input scoring); the probabilities are
  the softmax of the labels' total logprobs.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from modelir import errors
from modelir.interface import MessageLike, ModelInterface, build_request
from modelir.v1 import capabilities_pb2, errors_pb2

C = capabilities_pb2.Capability


@dataclass(frozen=True, slots=True)
class Classification:
    label: str
    probabilities: dict[str, float]
    method: str  # "choice_logprobs" or "scoring"


def _softmax(values: dict[str, float]) -> dict[str, float]:
    top = max(values.values())
    weights = {k: math.exp(v - top) for k, v in values.items()}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


async def _by_choice(model: ModelInterface, messages: list, labels: list[str], top_k: int) -> Classification | None:
    request = build_request(model.name, messages=messages, choices=labels, temperature=0, top_logprobs=top_k)
    response = await model.arun(request)
    choice = response.choices[0]
    label = "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")
    logprobs = choice.logprobs
    count = logprobs.top_counts[0] if logprobs.top_counts else 0
    firsts = dict(zip(logprobs.top_tokens[:count], logprobs.top_logprobs[:count], strict=True))
    starts: dict[str, float] = {}
    for candidate in labels:
        matches = [(token, lp) for token, lp in firsts.items() if token and candidate.startswith(token)]
        if len(matches) != 1:
            return None  # no alternative, or an ambiguous one, for this label's first token
        starts[candidate] = matches[0][1]
    if len({token for candidate in labels for token in firsts if candidate.startswith(token)}) != len(labels):
        return None  # labels share a first token
    return Classification(label, _softmax(starts), "choice_logprobs")


async def _by_scoring(model: ModelInterface, messages: list, labels: list[str]) -> Classification:
    async def score(label: str) -> float:
        request = build_request(model.name, messages=messages, max_output_tokens=0)
        request.input_scoring.continuation_text = label
        return (await model.arun(request)).input_scores.logprob_sum

    sums = dict(zip(labels, await asyncio.gather(*(score(label) for label in labels)), strict=True))
    probabilities = _softmax(sums)
    return Classification(max(probabilities, key=probabilities.__getitem__), probabilities, "scoring")


async def aclassify(model: ModelInterface, messages: Iterable[MessageLike], labels: Sequence[str]) -> Classification:
    labels = list(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise ValueError("classify needs at least two distinct labels")
    messages = list(messages)
    manifest = await model.acapabilities()
    have = set(manifest.capabilities)
    if {C.CAPABILITY_CONSTRAINT_CHOICE, C.CAPABILITY_TOP_K_LOGPROBS} <= have:
        top_k = min(20, manifest.limits.max_top_logprobs or 20)
        result = await _by_choice(model, messages, labels, top_k)
        if result is not None:
            return result
    if C.CAPABILITY_INPUT_SCORING in have:
        return await _by_scoring(model, messages, labels)
    missing = [
        c
        for c in (C.CAPABILITY_CONSTRAINT_CHOICE, C.CAPABILITY_TOP_K_LOGPROBS, C.CAPABILITY_INPUT_SCORING)
        if c not in have
    ]
    gaps = errors_pb2.UnsupportedCapabilities(model=model.name, missing=missing)
    gaps.reasons.append(
        "classify needs a choice constraint with top-k logprobs (labels with distinct first tokens), or input scoring."
    )
    raise errors.UnsupportedCapabilityError(gaps)


def classify(model: ModelInterface, messages: Iterable[MessageLike], labels: Sequence[str]) -> Classification:
    from modelir.interface import _sync

    return _sync(aclassify(model, messages, labels))
