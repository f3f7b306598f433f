"""Building and combining columnar `TokenLogprobs`, and the arithmetic evals need from them.

Everything here works column by column: lists built by comprehensions and handed to `extend` once, never one
sub-message per token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import reduce
from itertools import accumulate, chain
from operator import iadd, itemgetter

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


_TOKEN = itemgetter("token")
_LOGPROB = itemgetter("logprob")
_ID = itemgetter("id")
_TOPS = itemgetter("top_logprobs")
_BYTES = itemgetter("bytes")


def from_openai_content(
    entries: Sequence[dict], *, with_bytes: bool = True, into: TokenLogprobs | None = None
) -> TokenLogprobs:
    """Columnar logprobs from the OpenAI-style list `[{token, logprob, bytes, top_logprobs: [...]}, ...]`.

    This shape is shared by OpenAI chat, the Responses API's output_text.logprobs, llama.cpp and Ollama, so
    every such lift uses this one builder. Filled into `into` when given (a field of the response being built),
    which saves copying a multi-megabyte message.

    The columns are built with `map(itemgetter(...))` and C-level joins: the common, complete shape never runs a
    Python-level step per token. Entries with a missing or null `top_logprobs` or `bytes` take a slower path.
    """
    out = TokenLogprobs() if into is None else into
    out.tokens.extend(list(map(_TOKEN, entries)))
    out.logprobs.extend(list(map(_LOGPROB, entries)))
    if entries and "id" in entries[0]:  # llama.cpp adds token ids to this shape
        out.token_ids.extend(list(map(_ID, entries)))
    tops, flat = _alternatives(entries)
    if flat or (entries and "top_logprobs" in entries[0]):
        out.top_counts.extend(list(map(len, tops)))
        out.top_tokens.extend(list(map(_TOKEN, flat)))
        out.top_logprobs.extend(list(map(_LOGPROB, flat)))
        if flat and "id" in flat[0]:
            out.top_token_ids.extend(list(map(_ID, flat)))
    if with_bytes:
        out.token_bytes, offsets = _joined_bytes(entries)
        out.token_byte_offsets.extend(offsets)
        if flat:
            out.top_token_bytes, top_offsets = _joined_bytes(flat)
            out.top_token_byte_offsets.extend(top_offsets)
    return out


def _alternatives(entries: Sequence[dict]) -> tuple[list, list[dict]]:
    """Each entry's alternatives (empty where absent or null) and all of them flattened."""
    try:
        tops = list(map(_TOPS, entries))
        return tops, list(chain.from_iterable(tops))
    except (KeyError, TypeError):  # an entry without alternatives
        tops = [e.get("top_logprobs") or () for e in entries]
        return tops, list(chain.from_iterable(tops))


def _joined_bytes(items: Sequence[dict]) -> tuple[bytes, list[int]]:
    """All items' bytes concatenated, with each item's start offset.

    `reduce(iadd)` extends one list by each item's byte list in C, then `bytes()` packs it: much faster than
    a `bytes()` call per token or iterating a chain. An item without `bytes` (or with null) uses its token's UTF-8.
    """
    try:
        pieces = list(map(_BYTES, items))
        flat = reduce(iadd, pieces, [])
    except (KeyError, TypeError):
        pieces = [b if (b := item.get("bytes")) is not None else item["token"].encode() for item in items]
        flat = reduce(iadd, pieces, [])
    offsets = list(accumulate(map(len, pieces), initial=0))
    offsets.pop()  # the end of the last piece
    return bytes(flat), offsets


def chunks(logprobs: TokenLogprobs, size: int) -> list[TokenLogprobs]:
    """Cut `logprobs` into consecutive pieces of at most `size` tokens (the inverse of `concat`)."""
    n = len(logprobs.logprobs)
    has_bytes = bool(logprobs.token_byte_offsets)
    ends = [*logprobs.token_byte_offsets[1:], len(logprobs.token_bytes)] if has_bytes else []
    top_starts = [0, *accumulate(logprobs.top_counts)]
    top_ends = [*logprobs.top_token_byte_offsets[1:], len(logprobs.top_token_bytes)]
    out = []
    for start in range(0, n, size):
        stop = min(n, start + size)
        chunk = TokenLogprobs(basis=logprobs.basis)
        if logprobs.token_ids:
            chunk.token_ids.extend(logprobs.token_ids[start:stop])
        chunk.logprobs.extend(logprobs.logprobs[start:stop])
        chunk.tokens.extend(logprobs.tokens[start:stop])
        if has_bytes:
            b0 = logprobs.token_byte_offsets[start]
            chunk.token_bytes = logprobs.token_bytes[b0 : ends[stop - 1]]
            chunk.token_byte_offsets.extend([o - b0 for o in logprobs.token_byte_offsets[start:stop]])
        if logprobs.top_counts:
            t0, t1 = top_starts[start], top_starts[stop]
            chunk.top_counts.extend(logprobs.top_counts[start:stop])
            if logprobs.top_token_ids:
                chunk.top_token_ids.extend(logprobs.top_token_ids[t0:t1])
            chunk.top_logprobs.extend(logprobs.top_logprobs[t0:t1])
            chunk.top_tokens.extend(logprobs.top_tokens[t0:t1])
            if logprobs.top_token_byte_offsets and t1 > t0:
                tb0 = logprobs.top_token_byte_offsets[t0]
                chunk.top_token_bytes = logprobs.top_token_bytes[tb0 : top_ends[t1 - 1]]
                chunk.top_token_byte_offsets.extend([o - tb0 for o in logprobs.top_token_byte_offsets[t0:t1]])
        out.append(chunk)
    return out
