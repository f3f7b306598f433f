"""`classify(model, messages, labels)`: the chosen label and a probability for every label.

`messages` is a conversation, or a plain string for a raw prompt (base models, or engines whose post-sampling
logprobs only come on their completion endpoint).

Two methods, chosen by what the model's manifest honours, and reported in the result:

- `choice_logprobs`: one call with a choice constraint and top-k logprobs (post-sampling where the model can give
  them, so that the alternatives are the constrained ones). Each label's probability is the mass of the
  first-position alternatives that begin it, renormalised over the labels. When an alternative begins two labels,
  or a label has no alternative, the scoring method is used if the model has it.
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
from modelir.sync import run_sync
from modelir.v1 import capabilities_pb2, errors_pb2, logprobs_pb2


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


def _first_position_masses(labels: list[str], tokens, logprobs) -> dict[str, float] | None:
    """Each label's probability mass among the first-position alternatives: the alternatives that begin it.

    An alternative that begins two labels makes the split ambiguous, and a label no alternative begins has no
    mass to report: both return None, so another method is used.
    """
    masses = dict.fromkeys(labels, 0.0)
    for token, logprob in zip(tokens, logprobs, strict=True):
        owners = [label for label in labels if token and label.startswith(token)]
        if len(owners) > 1:
            return None
        if owners:
            masses[owners[0]] += math.exp(logprob)
    if any(mass == 0.0 for mass in masses.values()):
        return None
    total = sum(masses.values())
    return {label: mass / total for label, mass in masses.items()}


def _request(model: ModelInterface, messages: list | str, **options):
    if isinstance(messages, str):
        return build_request(model.name, prompt=messages, **options)
    return build_request(model.name, messages=messages, **options)


async def _by_choice(
    model: ModelInterface, messages: list | str, labels: list[str], top_k: int
) -> Classification | None:
    manifest = await model.acapabilities()
    have = set(manifest.capabilities)
    # The model's own distribution: no temperature, no nucleus cut (greedy decoding would collapse a
    # post-sampling distribution onto one token). The label reported is the most probable one, not the sample.
    options = {"temperature": 1.0} if capabilities_pb2.CAPABILITY_TEMPERATURE in have else {}
    request = _request(model, messages, choices=labels, top_logprobs=top_k, **options)
    if capabilities_pb2.CAPABILITY_TOP_P in have:
        request.sampling.top_p = 1.0
    if capabilities_pb2.CAPABILITY_MIN_P in have:
        request.sampling.min_p = 0.0
    bases = [0]
    if logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING in manifest.logprob_bases:
        # After the constraint the alternatives at the first position are exactly the labels' beginnings.
        bases.insert(0, logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING)
    for basis in bases:
        request.logprobs.basis = basis
        if not (await model.avalidate(request)).accepted:
            continue
        logprobs = (await model.arun(request)).choices[0].logprobs
        count = logprobs.top_counts[0] if logprobs.top_counts else 0
        masses = _first_position_masses(labels, logprobs.top_tokens[:count], logprobs.top_logprobs[:count])
        if masses is not None:
            return Classification(max(masses, key=masses.__getitem__), masses, "choice_logprobs")
    return None


async def _by_scoring(model: ModelInterface, messages: list | str, labels: list[str]) -> Classification:
    async def score(label: str) -> float:
        request = _request(model, messages, max_output_tokens=0)
        request.input_scoring.continuation_text = label
        return (await model.arun(request)).input_scores.logprob_sum

    sums = dict(zip(labels, await asyncio.gather(*(score(label) for label in labels)), strict=True))
    probabilities = _softmax(sums)
    return Classification(max(probabilities, key=probabilities.__getitem__), probabilities, "scoring")


async def aclassify(
    model: ModelInterface, messages: Iterable[MessageLike] | str, labels: Sequence[str]
) -> Classification:
    labels = list(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels):
        raise ValueError("classify needs at least two distinct labels")
    messages = messages if isinstance(messages, str) else list(messages)
    manifest = await model.acapabilities()
    have = set(manifest.capabilities)
    if {capabilities_pb2.CAPABILITY_CONSTRAINT_CHOICE, capabilities_pb2.CAPABILITY_TOP_K_LOGPROBS} <= have:
        top_k = min(20, manifest.limits.max_top_logprobs or 20)
        result = await _by_choice(model, messages, labels, top_k)
        if result is not None:
            return result
    if capabilities_pb2.CAPABILITY_INPUT_SCORING in have:
        return await _by_scoring(model, messages, labels)
    missing = [
        c
        for c in (
            capabilities_pb2.CAPABILITY_CONSTRAINT_CHOICE,
            capabilities_pb2.CAPABILITY_TOP_K_LOGPROBS,
            capabilities_pb2.CAPABILITY_INPUT_SCORING,
        )
        if c not in have
    ]
    gaps = errors_pb2.UnsupportedCapabilities(model=model.name, missing=missing)
    gaps.reasons.append(
        "classify needs a choice constraint with top-k logprobs (labels with distinct first tokens), or input scoring."
    )
    raise errors.UnsupportedCapabilityError(gaps)


def classify(model: ModelInterface, messages: Iterable[MessageLike] | str, labels: Sequence[str]) -> Classification:
    return run_sync(aclassify(model, messages, labels))
