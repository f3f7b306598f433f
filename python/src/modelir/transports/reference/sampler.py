"""Sampling from the reference model's table: the sampler settings, their cached distributions, one choice's generator.

One RNG per choice, seeded from the request's seed and the choice index, drives every draw, so a request gives the
same output on every run and every machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from modelir.transports.reference.vocabulary import BOS, EOS, PRINTABLE, VOCAB, logprob_table
from modelir.v1 import response_pb2


@dataclass(frozen=True, slots=True)
class Sampler:
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, additive bias), sorted: hashable for the cache

    def bias_row(self) -> np.ndarray:
        """The additive bias of every token id (zeros without `logit_bias`)."""
        row = np.zeros(VOCAB)
        for token, bias in self.logit_bias:
            row[token] += bias
        return row


@lru_cache(maxsize=64)
def _biased_table(sampler: Sampler) -> np.ndarray:
    """The table's logprobs plus the sampler's logit bias on each next token (the table itself without one)."""
    if not sampler.logit_bias:
        return logprob_table()
    biased: np.ndarray = logprob_table() + sampler.bias_row()[None, :]
    return biased


@lru_cache(maxsize=64)
def free_cdf(sampler: Sampler) -> np.ndarray | None:
    """Cumulative next-token distributions over `PRINTABLE` for free text; None means greedy."""
    if sampler.temperature == 0:
        return None
    logits = _biased_table(sampler)[:, PRINTABLE] / sampler.temperature
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    order = np.argsort(-probs, axis=1, kind="stable")
    ranked = np.take_along_axis(probs, order, axis=1)
    keep = np.ones_like(ranked, dtype=bool)
    if sampler.top_k:
        keep[:, sampler.top_k :] = False
    if sampler.top_p < 1.0:
        before = np.cumsum(ranked, axis=1) - ranked
        keep &= before < sampler.top_p
    if sampler.min_p > 0:
        keep &= ranked >= sampler.min_p * ranked[:, :1]
    keep[:, 0] = True
    ranked = np.where(keep, ranked, 0.0)
    filtered = np.zeros_like(probs)
    np.put_along_axis(filtered, order, ranked, axis=1)
    filtered /= filtered.sum(axis=1, keepdims=True)
    return np.cumsum(filtered, axis=1)


class Generator:
    """Generates one choice: free text, forced bytes, and bytes sampled from a class, on one RNG."""

    def __init__(self, context: list[int], sampler: Sampler, seed: int, budget: int) -> None:
        self.table = _biased_table(sampler)  # what sampling draws from; reported logprobs are the model's own
        self.prev = context[-1] if context else BOS
        self.sampler = sampler
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.budget = budget
        self.emitted: list[int] = []  # every generated token, in order
        self.prevs: list[int] = []  # the token before each emitted one
        self.trimmed: list[int] = []  # sampled tokens whose text was trimmed: a stop string, a stop id, EOS
        self.min_tokens = 0  # EOS and stop ids may not end generation before this many tokens were generated

    def _push(self, token: int) -> None:
        self.prevs.append(self.prev)
        self.emitted.append(token)
        self.prev = token
        self.budget -= 1

    def force(self, data: bytes) -> bool:
        """Emit fixed bytes; False when the token budget ran out first."""
        for b in data:
            if self.budget <= 0:
                return False
            self._push(b)
        return True

    def pick(self, candidates: np.ndarray) -> int:
        """Sample one token among `candidates` from the model's distribution (greedy at temperature 0)."""
        row = self.table[self.prev, candidates]
        if self.sampler.temperature == 0:
            return int(candidates[int(np.argmax(row))])
        weights = np.exp((row - row.max()) / self.sampler.temperature)
        cdf = np.cumsum(weights / weights.sum())
        return int(candidates[min(int(np.searchsorted(cdf, self.rng.random())), len(candidates) - 1)])

    def sample_class(self, candidates: np.ndarray, count: int) -> bool:
        for _ in range(count):
            if self.budget <= 0:
                return False
            self._push(self.pick(candidates))
        return True

    def _best_continuing(self, stop_ids: set[int]) -> int:
        """The likeliest free-text token after the current one that neither is EOS nor a stop id."""
        allowed = np.array([t for t in PRINTABLE.tolist() if t != EOS and t not in stop_ids], dtype=np.int64)
        return int(allowed[int(np.argmax(self.table[self.prev, allowed]))])

    def pick_sequence(self, options: list[bytes]) -> int:
        """Choose among byte sequences by their total logprob under the model (sampled, or argmax at T=0)."""
        scores = np.array(
            [self.table[[self.prev, *o[:-1]], list(o)].sum() for o in options],
            dtype=np.float64,
        )
        if self.sampler.temperature == 0:
            return int(np.argmax(scores))
        weights = np.exp((scores - scores.max()) / self.sampler.temperature)
        return int(self.rng.choice(len(options), p=weights / weights.sum()))

    def free_text(self, limit: int, stop: list[bytes], stop_ids: set[int]) -> tuple[int, str, str | int]:
        """Sample free text until EOS, a stop, or `limit` tokens. Returns (finish, raw finish, stop seq)."""
        cdf = free_cdf(self.sampler)
        start = len(self.emitted)
        draws = self.rng.random(max(limit, 0))
        for i in range(limit):
            if self.budget <= 0:
                return response_pb2.FINISH_REASON_LENGTH, "length", ""
            if cdf is None:
                token = int(PRINTABLE[int(np.argmax(self.table[self.prev, PRINTABLE]))])
            else:
                idx = int(np.searchsorted(cdf[self.prev], draws[i]))
                token = int(PRINTABLE[min(idx, len(PRINTABLE) - 1)])
            if (token == EOS or token in stop_ids) and len(self.emitted) < self.min_tokens:
                token = self._best_continuing(stop_ids)  # too early to end: the likeliest token that does not
            if token == EOS:
                self.budget -= 1
                self.trimmed.append(EOS)
                return response_pb2.FINISH_REASON_STOP, "eos", ""
            if token in stop_ids:
                self.budget -= 1
                self.trimmed.append(token)
                return response_pb2.FINISH_REASON_STOP_SEQUENCE, "stop_token", token
            self._push(token)
            if stop:
                tail = bytes(self.emitted[max(start, len(self.emitted) - 64) :])
                for s in stop:
                    if tail.endswith(s):
                        self.trimmed.extend(self.emitted[-len(s) :])
                        del self.emitted[-len(s) :], self.prevs[-len(s) :]
                        return response_pb2.FINISH_REASON_STOP_SEQUENCE, "stop", s.decode()
        return response_pb2.FINISH_REASON_LENGTH, "length", ""
