"""Building and combining columnar `TokenLogprobs`, and the arithmetic evals need from them.

Everything here works column by column: lists built by comprehensions and handed to `extend` once, never one
sub-message per token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import accumulate, chain

from modelir.v1 import logprobs_pb2

TokenLogprobs = logprobs_pb2.TokenLogprobs

# Engines that cannot send -inf in JSON clamp it; vLLM uses this value. It is read back as -inf.
VLLM_MINUS_INFINITY = -9999.0


def offsets_of(pieces: Sequence[bytes]) -> list[int]:
    """Start offsets of each piece in their concatenation."""
    return [0, *accumulate(map(len, pieces[:-1]))] if pieces else []


def concat(chunks: Iterable[TokenLogprobs]) -> TokenLogprobs:
    """Join consecutive chunks (stream deltas) into one `TokenLogprobs`, shifting the byte offsets."""
    out = TokenLogprobs()
    token_bytes: list[bytes] = []
    top_bytes: list[bytes] = []
    base = top_base = 0
    for chunk in chunks:
        if not out.basis:
            out.basis = chunk.basis
        out.token_ids.extend(chunk.token_ids)
        out.logprobs.extend(chunk.logprobs)
        out.tokens.extend(chunk.tokens)
        out.token_byte_offsets.extend([o + base for o in chunk.token_byte_offsets])
        token_bytes.append(chunk.token_bytes)
        base += len(chunk.token_bytes)
        out.top_counts.extend(chunk.top_counts)
        out.top_token_ids.extend(chunk.top_token_ids)
        out.top_logprobs.extend(chunk.top_logprobs)
        out.top_tokens.extend(chunk.top_tokens)
        out.top_token_byte_offsets.extend([o + top_base for o in chunk.top_token_byte_offsets])
        top_bytes.append(chunk.top_token_bytes)
        top_base += len(chunk.top_token_bytes)
    out.token_bytes = b"".join(token_bytes)
    out.top_token_bytes = b"".join(top_bytes)
    return out


def token_byte_slices(logprobs: TokenLogprobs) -> list[bytes]:
    """Each token's bytes (requires the bytes columns)."""
    blob = logprobs.token_bytes
    offsets = list(logprobs.token_byte_offsets)
    ends = [*offsets[1:], len(blob)]
    return [blob[s:e] for s, e in zip(offsets, ends, strict=True)]


def text_of(logprobs: TokenLogprobs) -> str:
    """The text the tokens spell, from their bytes (never by joining token strings)."""
    return logprobs.token_bytes.decode("utf-8", "replace")


def bits_per_byte(logprob_sum: float, byte_count: int) -> float:
    """Bits per byte of a scored span: -sum(ln p) / ln 2 / bytes."""
    if byte_count <= 0:
        raise ValueError("bits per byte needs at least one byte")
    return -logprob_sum / math.log(2) / byte_count


def from_openai_content(entries: Sequence[dict], *, with_bytes: bool = True) -> TokenLogprobs:
    """Columnar logprobs from the OpenAI-style list `[{token, logprob, bytes, top_logprobs: [...]}, ...]`.

    This shape is shared by OpenAI chat, the Responses API's output_text.logprobs, llama.cpp and Ollama, so
    every such lift uses this one builder.
    """
    out = TokenLogprobs()
    out.tokens.extend([e["token"] for e in entries])
    out.logprobs.extend([e["logprob"] for e in entries])
    if entries and "id" in entries[0]:  # llama.cpp adds token ids to this shape
        out.token_ids.extend([e["id"] for e in entries])
    tops = [e.get("top_logprobs") or () for e in entries]
    flat = [t for top in tops for t in top]
    if flat or any("top_logprobs" in e for e in entries[:1]):
        out.top_counts.extend([len(top) for top in tops])
        out.top_tokens.extend([t["token"] for t in flat])
        out.top_logprobs.extend([t["logprob"] for t in flat])
        if flat and "id" in flat[0]:
            out.top_token_ids.extend([t["id"] for t in flat])
    if with_bytes:
        _fill_bytes(out, entries, flat)
    return out


def _byte_lists(items: Sequence[dict]) -> list[list[int] | bytes]:
    return [b if (b := item.get("bytes")) is not None else item["token"].encode() for item in items]


def _joined(lists: list[list[int] | bytes]) -> tuple[bytes, list[int]]:
    """Concatenate per-token byte lists in one C-level pass (no `bytes()` call per token) with start offsets."""
    lengths = list(map(len, lists))
    return bytes(chain.from_iterable(lists)), [0, *accumulate(lengths[:-1])] if lengths else []


def _fill_bytes(out: TokenLogprobs, entries: Sequence[dict], flat: Sequence[dict]) -> None:
    out.token_bytes, offsets = _joined(_byte_lists(entries))
    out.token_byte_offsets.extend(offsets)
    if flat:
        out.top_token_bytes, top_offsets = _joined(_byte_lists(flat))
        out.top_token_byte_offsets.extend(top_offsets)
