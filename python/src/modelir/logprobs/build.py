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
from typing import Any

from modelir.v1 import errors_pb2, logprobs_pb2

TokenLogprobs = logprobs_pb2.TokenLogprobs

# Engines that cannot send -inf in JSON clamp it; vLLM uses this value. It is read back as -inf.
VLLM_MINUS_INFINITY = -9999.0


def offsets_of(pieces: Sequence[bytes]) -> list[int]:
    """Start offsets of each piece in their concatenation."""
    return [0, *accumulate(map(len, pieces[:-1]))] if pieces else []


_COLUMNS = ("token_ids", "token_logprobs", "tokens", "top_counts", "top_token_ids", "top_logprobs", "top_tokens")
_BYTE_COLUMNS = (("token_bytes", "token_byte_offsets"), ("top_token_bytes", "top_token_byte_offsets"))


def concat(chunks: Iterable[TokenLogprobs]) -> TokenLogprobs:
    """Join consecutive chunks (stream deltas) into one `TokenLogprobs`, shifting the byte offsets."""
    pieces = list(chunks)
    out = TokenLogprobs()
    out.basis = next((c.basis for c in pieces if c.basis), out.basis)
    for column in _COLUMNS:
        getattr(out, column).extend(chain.from_iterable(getattr(c, column) for c in pieces))
    for blob, offsets in _BYTE_COLUMNS:
        shifted: list[int] = []
        base = 0
        for chunk in pieces:
            shifted.extend([o + base for o in getattr(chunk, offsets)])
            base += len(getattr(chunk, blob))
        getattr(out, offsets).extend(shifted)
        setattr(out, blob, b"".join(getattr(c, blob) for c in pieces))
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


def joined(pieces: Sequence[bytes | list[int]]) -> tuple[bytes, list[int]]:
    """Pieces of bytes (bytes, or lists of byte values as JSON gives them) concatenated, with their start offsets.

    Byte lists are packed with `reduce(iadd)`, which extends one list by each piece in C before one `bytes()`:
    much faster than a `bytes()` call per token or iterating a chain.
    """
    try:
        blob = b"".join(pieces)  # type: ignore[arg-type]  # lists raise at once and take the next line
    except TypeError:
        blob = bytes(reduce(iadd, pieces, []))
    offsets = list(accumulate(map(len, pieces), initial=0))
    offsets.pop()  # the end of the last piece
    return blob, offsets


def _floats(column: Any, values: Sequence[float | None]) -> None:
    """Extend a logprob column; a None (a position without a logprob) becomes NaN, never zero."""
    try:
        column.extend(values)  # all or nothing: a None raises before anything is appended
    except TypeError:
        column.extend([math.nan if v is None else v for v in values])


def columns(
    out: TokenLogprobs | None = None,
    *,
    tokens: Sequence[str],
    logprobs: Sequence[float | None],
    token_ids: Sequence[int] | None = None,
    token_bytes: tuple[bytes, list[int]] | None = None,
    top_counts: Sequence[int] | None = None,
    top_tokens: Sequence[str] = (),
    top_logprobs: Sequence[float | None] = (),
    top_token_ids: Sequence[int] | None = None,
    top_token_bytes: tuple[bytes, list[int]] | None = None,
    basis: int = 0,
) -> TokenLogprobs:
    """The one builder of columnar logprobs: every wire extracts its columns and hands them here, whole.

    `token_ids`, `token_bytes` (the joined bytes and offsets, from `joined`) and the top-k columns are written only
    when given (`top_counts` is given whenever alternatives were asked for, even if none came back). Filled into
    `out` when given (a field of the response being built), which saves copying a multi-megabyte message.
    """
    out = TokenLogprobs() if out is None else out
    if basis:
        out.basis = basis  # type: ignore[assignment]
    out.tokens.extend(tokens)
    _floats(out.token_logprobs, logprobs)
    out.token_ids.extend(token_ids or ())
    if token_bytes is not None:
        out.token_bytes, offsets = token_bytes
        out.token_byte_offsets.extend(offsets)
    if top_counts is None:
        return out
    out.top_counts.extend(top_counts)
    out.top_token_ids.extend(top_token_ids or ())
    out.top_tokens.extend(top_tokens)
    _floats(out.top_logprobs, top_logprobs)
    if top_token_bytes is not None:
        out.top_token_bytes, top_offsets = top_token_bytes
        out.top_token_byte_offsets.extend(top_offsets)
    return out


def from_openai_content(
    entries: Sequence[dict[str, Any]], *, with_bytes: bool = True, into: TokenLogprobs | None = None
) -> TokenLogprobs:
    """Columnar logprobs from the OpenAI-style list `[{token, logprob, bytes, top_logprobs: [...]}, ...]`.

    This shape is shared by OpenAI chat, the Responses API's output_text.logprobs, llama.cpp and Ollama. The
    columns are taken with `map(itemgetter(...))`: the common, complete shape never runs a Python-level step per
    token. Entries with a missing or null `top_logprobs` or `bytes` take a slower path.
    """
    tops, flat = _alternatives(entries)
    has_tops = bool(flat) or bool(entries and "top_logprobs" in entries[0])
    return columns(
        into,
        tokens=list(map(_TOKEN, entries)),
        logprobs=list(map(_LOGPROB, entries)),
        token_ids=list(map(_ID, entries)) if entries and "id" in entries[0] else None,  # llama.cpp adds ids
        token_bytes=_joined_bytes(entries) if with_bytes else None,
        top_counts=list(map(len, tops)) if has_tops else None,
        top_tokens=list(map(_TOKEN, flat)),
        top_logprobs=list(map(_LOGPROB, flat)),
        top_token_ids=list(map(_ID, flat)) if flat and "id" in flat[0] else None,
        top_token_bytes=_joined_bytes(flat) if with_bytes and flat else None,
    )


def _alternatives(entries: Sequence[dict[str, Any]]) -> tuple[list[Any], list[dict[str, Any]]]:
    """Each entry's alternatives (empty where absent or null) and all of them flattened."""
    try:
        tops = list(map(_TOPS, entries))
        return tops, list(chain.from_iterable(tops))
    except (KeyError, TypeError):  # an entry without alternatives
        tops = [e.get("top_logprobs") or () for e in entries]
        return tops, list(chain.from_iterable(tops))


def _joined_bytes(items: Sequence[dict[str, Any]]) -> tuple[bytes, list[int]]:
    """All items' `bytes` joined, with offsets; an item without them (or with null) uses its token's UTF-8."""
    try:
        return joined(list(map(_BYTES, items)))
    except (KeyError, TypeError):
        return joined([b if (b := item.get("bytes")) is not None else item["token"].encode() for item in items])


def chunks(logprobs: TokenLogprobs, size: int) -> list[TokenLogprobs]:
    """Cut `logprobs` into consecutive pieces of at most `size` tokens (the inverse of `concat`)."""
    n = len(logprobs.token_logprobs)
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
        chunk.token_logprobs.extend(logprobs.token_logprobs[start:stop])
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


REPLACED_BYTES_WARNING = "token_bytes_replaced"


def replaced_bytes_warning(tokens: Sequence[str], engine: str) -> errors_pb2.Warning | None:
    """A warning naming the sampled positions whose token came as U+FFFD instead of its bytes (Ollama renders a
    token that ends inside a UTF-8 character so, in `token` and `bytes` alike, and gives no id to recover them from);
    None when there are none. Those positions' bytes are the replacement's, not the token's."""
    positions = [i for i, token in enumerate(tokens) if "\ufffd" in token]
    if not positions:
        return None
    return errors_pb2.Warning(
        code=REPLACED_BYTES_WARNING,
        message=f"{engine} gave U+FFFD in place of the bytes of the token(s) at logprob position(s) "
        f"{', '.join(map(str, positions))} (each ends inside a UTF-8 character); their own bytes are not in its answer",
    )
