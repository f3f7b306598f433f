"""vLLM's `prompt_logprobs` as input scores (both endpoints), and where a continuation's tokens start in a rendered
prompt."""

from __future__ import annotations

from typing import Any

from modelir.logprobs import build as lp
from modelir.logprobs import continuation as prompt_split
from modelir.transports.vllm import dialect
from modelir.v1 import logprobs_pb2


def continuation_start(entries: Any, prompt_ids: Any, continuation: str) -> int | None:
    """Where a continuation's tokens start in the rendered prompt, by the shared rule (`logprobs.continuation`) over
    the tokens' decoded text (this route has no offsets). 0 without a continuation; None when the rendered prompt
    does not end with it."""
    if not continuation:
        return 0
    if not entries or not prompt_ids or len(entries) != len(prompt_ids):
        return None
    texts = []
    for token_id, entry in zip(prompt_ids, entries, strict=True):
        actual = entry.get(str(token_id)) if isinstance(entry, dict) else None
        if entry is not None and actual is None:
            return None
        texts.append((actual or {}).get("decoded_token") or "")
    offsets = prompt_split.offsets_of(texts)
    split = prompt_split.continuation_start(offsets, texts, offsets[-1] + len(texts[-1]), continuation)
    return None if split is None else split.start


def of_prompt_logprobs(entries: Any, prompt_ids: Any, top_k: int, start: int = 0) -> logprobs_pb2.InputScores | None:
    """`prompt_logprobs` (null, then `{id: {logprob, rank, decoded_token}}` per position) -> input scores of the
    positions from `start` on.

    The actual token at each position is `prompt_token_ids[i]`; the other keys are its top-k alternatives.
    """
    if not entries or not prompt_ids or len(entries) != len(prompt_ids):
        return None
    entries, prompt_ids = entries[start:], prompt_ids[start:]
    scored = logprobs_pb2.TokenLogprobs()
    unscored = 0
    tops_count: list[int] = []
    top_ids: list[int] = []
    top_lps: list[float] = []
    top_tokens: list[str] = []
    ids: list[int] = []
    values: list[float] = []
    tokens: list[str] = []
    for token_id, entry in zip(prompt_ids, entries, strict=True):
        if entry is None:
            unscored += 1
            continue
        actual = entry.get(str(token_id))
        if actual is None:
            return None
        ids.append(token_id)
        values.append(dialect.unclamp(actual["logprob"]))
        tokens.append(actual.get("decoded_token") or "")
        # The dict holds the actual token plus the top-k; the top-k are the entries ranked 1..k.
        alternatives = sorted(
            ((int(k), v) for k, v in entry.items() if 1 <= v.get("rank", 0) <= top_k),
            key=lambda kv: kv[1]["rank"],
        )
        tops_count.append(len(alternatives))
        top_ids.extend(k for k, _ in alternatives)
        top_lps.extend(dialect.unclamp(v["logprob"]) for _, v in alternatives)
        top_tokens.extend(v.get("decoded_token") or "" for _, v in alternatives)
    lp.columns(
        scored,
        tokens=tokens,
        logprobs=values,
        token_ids=ids,
        top_counts=tops_count if any(tops_count) else None,
        top_tokens=top_tokens,
        top_logprobs=top_lps,
        top_token_ids=top_ids,
    )
    text = "".join(tokens)
    return logprobs_pb2.InputScores(
        tokens=scored,
        logprob_sum=float(sum(values)),
        scored_token_count=len(ids),
        scored_byte_count=len(text.encode()),
        scored_char_count=len(text),
        unscored_token_count=unscored,
    )
