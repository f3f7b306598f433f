"""Logprobs read off the reference model's table: the columns of sampled or scored tokens, and input scores.

Columns are gathered from the table with numpy in one pass, in the packed layout the IR defines (ids, logprobs,
pieces, concatenated bytes with offsets, top-k alternatives flattened with a count per position).
"""

from __future__ import annotations

import numpy as np

from modelir.pipeline import continuations
from modelir.transports.reference.vocabulary import PIECE_BYTES, PIECE_LEN, PIECES, logprob_table, token_ids, top_table
from modelir.v1 import logprobs_pb2, request_pb2


def columns(prev: list[int], ids: list[int], top_k: int) -> logprobs_pb2.TokenLogprobs:
    """Columnar logprobs of `ids`, each after its `prev`, gathered from the table in one go."""
    out = logprobs_pb2.TokenLogprobs(basis=logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING)
    prev_arr = np.asarray(prev, dtype=np.int64)
    id_arr = np.asarray(ids, dtype=np.int64)
    out.token_ids.extend(ids)
    out.token_logprobs.extend(logprob_table()[prev_arr, id_arr].tolist())
    out.tokens.extend([PIECES[i] for i in ids])
    out.token_bytes = bytes(id_arr[id_arr < 256].astype(np.uint8))
    out.token_byte_offsets.extend(_offsets(id_arr))
    if top_k:
        top_ids, top_lps = top_table()
        flat_ids = top_ids[prev_arr, :top_k].ravel()
        out.top_counts.extend([top_k] * len(ids))
        out.top_token_ids.extend(flat_ids.tolist())
        out.top_logprobs.extend(top_lps[prev_arr, :top_k].ravel().tolist())
        out.top_tokens.extend([PIECES[i] for i in flat_ids.tolist()])
        out.top_token_bytes = bytes(flat_ids[flat_ids < 256].astype(np.uint8))
        out.top_token_byte_offsets.extend(_offsets(flat_ids))
    return out


def _offsets(ids: np.ndarray) -> list[int]:
    lengths = PIECE_LEN[ids]
    offsets: list[int] = (np.cumsum(lengths) - lengths).tolist()
    return offsets


def spans(request: request_pb2.Request) -> list[list[int]]:
    """The tokens of each continuation to score after the input, in order (none when the whole input is scored)."""
    out = []
    for span in continuations.of(request):
        out.append(list(span.token_ids.ids) if span.WhichOneof("content") == "token_ids" else token_ids(span.text))
    return out


def _char_count(data: bytes) -> int:
    """Unicode code points in UTF-8 `data`: the bytes that do not continue a character."""
    return int(np.count_nonzero((np.frombuffer(data, np.uint8) & 0xC0) != 0x80))


def _bytes_of(ids: list[int]) -> bytes:
    return b"".join(PIECE_BYTES[i] for i in ids)


def score_input(request: request_pb2.Request, context: list[int]) -> list[logprobs_pb2.InputScores]:
    """One `InputScores` per continuation after `context`, in order; or one for the whole prompt after its first
    token. The reference tokenizer is bytewise, so no token ever straddles the context boundary."""
    requested = spans(request)
    if not requested:
        return [_score(request, context, [], whole=True)]
    return [_score(request, context, span, whole=False) for span in requested]


def _score(
    request: request_pb2.Request, context: list[int], span: list[int], *, whole: bool
) -> logprobs_pb2.InputScores:
    ids = context + span
    if whole:
        first, unscored = 1, 1  # the first token has no logprob: never scored as zero
        requested = ids
    else:
        first, unscored = len(context), 0
        requested = span
    prev, scored = ids[first - 1 : -1], ids[first:]
    tokens = columns(prev, scored, request.input_scoring.top_logprob_count)
    token_bytes = tokens.token_bytes
    span_bytes = _bytes_of(requested)
    return logprobs_pb2.InputScores(
        tokens=tokens,
        logprob_sum=float(logprob_table()[prev, scored].sum()),
        scored_token_count=len(scored),
        scored_byte_count=len(token_bytes),
        scored_char_count=_char_count(token_bytes),
        unscored_token_count=unscored,
        span_start_byte=int(PIECE_LEN[ids[:first]].sum()),
        span_byte_count=len(span_bytes),
        span_char_count=_char_count(span_bytes),
        first_token_straddles_context=False,
    )
