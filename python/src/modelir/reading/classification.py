"""`classify(model, messages, labels)`: the chosen label, a probability for every label, and how they were found.

`messages` is a conversation, or a plain string for a raw prompt (base models, or engines whose post-sampling
logprobs only come on their completion endpoint). A conversation the model cannot classify exactly as it stands
is rendered through the model's own chat template when the model can say how (`arender_prompt`: llama.cpp's
`/apply-template`), and that prompt is classified instead.

The methods, chosen by what the model's manifest honours and reported in the result with the probability mass
the answer rests on (`coverage`):

- `choice_logprobs`: one call with a choice constraint and post-sampling top-k logprobs, so the alternatives at
  every position are the constrained ones and the answer is exact.
- `top_logprobs`: one call whose alternatives were taken before any constraint (pre-sampling logprobs, or a model
  with no choice constraint at all, such as OpenAI chat), renormalised over the labels at each position;
  `coverage` says how much of the model's own distribution the labels held there.
- `scoring`: each label is scored as a continuation after the conversation (input scoring); the probabilities are
  the softmax of the labels' total logprobs, and `coverage` is the labels' summed probability.

How the logprobs are read (`_walk`): along the sampled tokens, an alternative that begins exactly one label's
remaining text adds its probability (times that of the shared prefix so far) to that label; the sampled token, when
it begins several labels, is their shared prefix and the walk goes on with them. An alternative shared by several
labels that was not sampled ("ne" of "negative" and "neutral" when "positive" was sampled) is a branch: its labels
are classified among themselves by a call of their own, and their probabilities scaled by the branch's, so labels
with shared prefixes are answered whichever branch the sample took. A label that ends where another goes on, or a
label no listed alternative reaches (when the list may be cut short) leave the answer unknown: then scoring is used
if the model has it, and otherwise `classify` refuses with an `UnsupportedCapabilityError` saying why. It never
guesses.

The logprob call carries a fixed seed where the model takes one, so the sampled path, and with it the answer or
the refusal, is the same on every call. An engine that answers a choice as the JSON-quoted label (Ollama's enum
schema) is walked along the quoted labels.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from modelir import errors
from modelir.interface import MessageLike, ModelInterface, build_request
from modelir.sync import run_sync
from modelir.v1 import capabilities_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2
from modelir.writing.names import enum_name

C = capabilities_pb2.Capability


@dataclass(frozen=True, slots=True)
class Classification:
    """The most probable label, every label's probability (summing to 1), the method, and `coverage`: the share of
    the model's probability mass the labels held where the answer was read (see the module's docstring)."""

    label: str
    probabilities: dict[str, float]
    method: str  # "choice_logprobs", "top_logprobs" or "scoring"
    coverage: float


class _Unknown(Exception):
    """The logprobs do not determine the labels' probabilities; the message says why."""


def _softmax(values: dict[str, float]) -> dict[str, float]:
    top = max(values.values())
    weights = {k: math.exp(v - top) for k, v in values.items()}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def _positions(logprobs: logprobs_pb2.TokenLogprobs, asked: int) -> list[tuple[str, list[tuple[str, float]], bool]]:
    """Per sampled position: the sampled token, its alternatives (the sampled one added when the list lacks it),
    and whether the list may have been cut short (it holds as many entries as were `asked` for)."""
    out, offset = [], 0
    for index, token in enumerate(logprobs.tokens):
        count = logprobs.top_counts[index] if index < len(logprobs.top_counts) else 0
        alternatives = list(
            zip(
                logprobs.top_tokens[offset : offset + count],
                logprobs.top_logprobs[offset : offset + count],
                strict=True,
            )
        )
        offset += count
        if token not in {t for t, _ in alternatives}:
            alternatives.append((token, logprobs.token_logprobs[index]))
        out.append((token, alternatives, count >= asked))
    return out


def _walk(
    labels: list[str], logprobs: logprobs_pb2.TokenLogprobs, top_k: int, *, exact: bool
) -> tuple[dict[str, float], list[tuple[list[str], float]], float]:
    """The labels' probabilities read along the sampled path, the branches it did not take that several labels
    share (their labels and the probability of the branch), and the coverage (raises `_Unknown`)."""
    masses = dict.fromkeys(labels, 0.0)
    branches: list[tuple[list[str], float]] = []
    remaining, consumed, prefix, coverage = list(labels), "", 1.0, 1.0
    cut_short = False
    for sampled, alternatives, full in _positions(logprobs, top_k):
        cut_short = cut_short or full
        rest = {label: label[len(consumed) :] for label in remaining}
        if any(not text for text in rest.values()):
            ended = [label for label, text in rest.items() if not text]
            raise _Unknown(f"the label {ended[0]!r} ends where {len(remaining) - 1} other label(s) go on")
        owned = []
        for token, logprob in alternatives:
            owners = [label for label in remaining if token and rest[label].startswith(token)]
            if owners:
                owned.append((token, math.exp(logprob), owners))
        step_mass = sum(p for _, p, _ in owned)
        if step_mass == 0.0:
            raise _Unknown(f"no alternative at position {len(consumed)} of the text begins a label")
        coverage *= step_mass
        shared = None
        for token, p, owners in owned:
            if len(owners) == 1:
                masses[owners[0]] += prefix * p / step_mass
            elif token == sampled:
                shared = (token, p, owners)
            else:  # a branch several labels share that the sample did not take: read by a call of its own
                branches.append((owners, prefix * p / step_mass))
        if shared is None:
            break
        token, p, owners = shared
        prefix *= p / step_mass
        remaining, consumed = owners, consumed + token
    else:
        raise _Unknown("the answer ended before the labels' paths parted")
    branched = {label for owners, _ in branches for label in owners}
    missing = [label for label, mass in masses.items() if mass == 0.0 and label not in branched]
    if missing and (not exact or cut_short):
        raise _Unknown(f"no listed alternative reaches the label(s) {', '.join(map(repr, missing))}")
    total = sum(masses.values()) + sum(share for _, share in branches)
    return (
        {label: mass / total for label, mass in masses.items()},
        [(owners, share / total) for owners, share in branches],
        coverage,
    )


def _request(model: ModelInterface, messages: list[MessageLike] | str, **options: Any) -> request_pb2.Request:
    if isinstance(messages, str):
        return build_request(model.name, prompt=messages, **options)
    return build_request(model.name, messages=messages, **options)


async def _by_logprobs(
    model: ModelInterface, messages: list[MessageLike] | str, labels: list[str], top_k: int, why: list[str]
) -> Classification | None:
    manifest = await model.acapabilities()
    have = set(manifest.capabilities)
    constrained = C.CAPABILITY_CONSTRAINT_CHOICE in have
    # The model's own distribution: no temperature, no nucleus cut (greedy decoding would collapse a
    # post-sampling distribution onto one token). The label reported is the most probable one, not the sample.
    options: dict[str, Any] = {"temperature": 1.0} if C.CAPABILITY_TEMPERATURE in have else {}
    if C.CAPABILITY_SEED in have:
        # The walk follows the sampled path: a fixed seed makes the same input give the same answer on every call.
        options["seed"] = 0
    if constrained:
        options["choices"] = labels
    else:  # no constraint: enough tokens for the labels' paths to part, never the whole answer
        options["max_output_tokens"] = 16

    def build(source: list[MessageLike] | str, basis: logprobs_pb2.LogprobBasis.ValueType) -> request_pb2.Request:
        request = _request(model, source, top_logprobs=top_k, **options)
        if C.CAPABILITY_TOP_P in have:
            request.sampling.top_p = 1.0
        if C.CAPABILITY_MIN_P in have:
            request.sampling.min_p = 0.0
        request.logprob_options.basis = basis
        return request

    bases = [logprobs_pb2.LOGPROB_BASIS_UNSPECIFIED]
    if constrained and logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING in manifest.logprob_bases:
        # After the constraint the alternatives at each position are exactly the labels' continuations.
        bases.insert(0, logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING)
    for basis in bases:
        request = build(messages, basis)
        verdict = await model.avalidate(request)
        if not verdict.accepted and not isinstance(messages, str):
            # Some engines give post-sampling logprobs on raw prompts only (llama.cpp): render the conversation
            # through the model's own chat template, when it can say how, and classify that prompt instead.
            prompt = await model.arender_prompt(request)
            if prompt is not None:
                request = build(prompt, basis)
                verdict = await model.avalidate(request)
        if not verdict.accepted:
            why.extend(verdict.unsupported.reasons)
            continue
        choice = (await model.arun(request)).choices[0]
        logprobs = choice.logprobs
        exact = constrained and logprobs.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
        # Some engines answer a choice as the label JSON-quoted (Ollama's enum schema): walk the quoted labels.
        spelled = {_as_answered(choice, label): label for label in labels}
        try:
            by_spelling, branches, coverage = _walk(list(spelled), logprobs, top_k, exact=exact)
            probabilities = {spelled[text]: p for text, p in by_spelling.items()}
            for owners, share in branches:
                if not constrained or len(owners) == len(labels):  # unconstrained, another call samples the same
                    raise _Unknown(f"the alternative shared by {', '.join(map(repr, owners))} was not sampled")
                # The labels of a branch the sample did not take, classified among themselves (the constraint,
                # or the walk, then parts them), times the branch's probability: exact where the first call was.
                among = await _by_logprobs(model, messages, [spelled[text] for text in owners], top_k, why)
                if among is None:
                    raise _Unknown(f"the labels {', '.join(map(repr, owners))} share a branch that was not sampled")
                for label, p in among.probabilities.items():
                    probabilities[label] = share * p
        except _Unknown as unknown:
            name = enum_name(logprobs_pb2.LogprobBasis, logprobs.basis)
            why.append(f"{name} top-{top_k} logprobs do not determine the labels: {unknown}")
            continue
        method = "choice_logprobs" if exact else "top_logprobs"
        return Classification(max(probabilities, key=probabilities.__getitem__), probabilities, method, coverage)
    return None


def _as_answered(choice: response_pb2.Choice, label: str) -> str:
    """The label as this answer spells labels: JSON-quoted (after the whitespace JSON allows before it) when the
    chosen label came back quoted."""
    text = "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")
    quoted = bool(choice.constrained_label) and text.strip() == orjson.dumps(choice.constrained_label).decode()
    return text[: len(text) - len(text.lstrip())] + orjson.dumps(label).decode() if quoted else label


async def _by_scoring(model: ModelInterface, messages: list[MessageLike] | str, labels: list[str]) -> Classification:
    async def score(label: str) -> float:
        request = _request(model, messages, max_output_tokens=0)
        request.input_scoring.continuations.add(text=label)
        return (await model.arun(request)).input_scores[0].logprob_sum

    sums = dict(zip(labels, await asyncio.gather(*(score(label) for label in labels)), strict=True))
    probabilities = _softmax(sums)
    coverage = min(1.0, sum(math.exp(s) for s in sums.values()))
    return Classification(max(probabilities, key=probabilities.__getitem__), probabilities, "scoring", coverage)


async def aclassify(
    model: ModelInterface, messages: Iterable[MessageLike] | str, labels: Sequence[str]
) -> Classification:
    labels = list(labels)
    if len(labels) < 2 or len(set(labels)) != len(labels) or not all(labels):
        raise ValueError("classify needs at least two distinct, non-empty labels")
    messages = messages if isinstance(messages, str) else list(messages)
    manifest = await model.acapabilities()
    have = set(manifest.capabilities)
    why: list[str] = []
    if C.CAPABILITY_TOP_K_LOGPROBS in have:
        top_k = min(20, manifest.limits.max_top_logprobs or 20)
        result = await _by_logprobs(model, messages, labels, top_k, why)
        if result is not None:
            return result
    if C.CAPABILITY_INPUT_SCORING in have:
        return await _by_scoring(model, messages, labels)
    wanted = (C.CAPABILITY_CONSTRAINT_CHOICE, C.CAPABILITY_TOP_K_LOGPROBS, C.CAPABILITY_INPUT_SCORING)
    missing = [c for c in wanted if c not in have]
    gaps = errors_pb2.UnsupportedCapabilities(model=model.name, missing=missing)
    gaps.reasons.extend(why)
    gaps.reasons.append(
        "classify needs top-k logprobs that determine every label (a choice constraint with post-sampling "
        "logprobs is exact), or input scoring; it does not guess."
    )
    raise errors.UnsupportedCapabilityError(gaps)


def classify(model: ModelInterface, messages: Iterable[MessageLike] | str, labels: Sequence[str]) -> Classification:
    return run_sync(aclassify(model, messages, labels))
