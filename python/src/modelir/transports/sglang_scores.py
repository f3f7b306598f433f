"""sglang's prompt scores: the input logprobs of `/generate` (with `logprob_start_len` 0) lifted into
`Response.input_scores`, and the `[logprob, token_id, text]` triples of any logprob list as columns.

A continuation after a text context is located by the scored tokens' text offsets (cumulative token texts), never
by re-tokenizing; after token input it starts at its first id (see `input_scores`).
"""

from __future__ import annotations

from typing import Any

from modelir.logprobs import build as lp
from modelir.v1 import logprobs_pb2, request_pb2, response_pb2

Span = str | list[int] | None  # a text continuation, a token-id one, or None: the whole input


def columns(triples: list[Any], tops: list[Any] | None, top_k: int, out: logprobs_pb2.TokenLogprobs) -> None:
    """`[logprob, token_id, text]` triples -> columnar logprobs (no bytes: this wire has none)."""
    rows = [row or [] for row in tops] if top_k and tops is not None else None
    flat = [t for row in rows for t in row] if rows is not None else []
    lp.columns(
        out,
        tokens=[t[2] or "" for t in triples],
        logprobs=[t[0] for t in triples],
        token_ids=[t[1] for t in triples],
        top_counts=list(map(len, rows)) if rows is not None else None,
        top_tokens=[t[2] or "" for t in flat],
        top_logprobs=[t[0] for t in flat],
        top_token_ids=[t[1] for t in flat],
    )


def input_scores(request: request_pb2.Request, span: Span, meta: dict[str, Any], out: response_pb2.Response) -> bool:
    """Append the input scores of one scored input (the whole input, or one continuation after it) from its
    logprobs, taken from the first token; False when sglang returned none.

    With token input the continuation starts at its first id. With text it is located by the tokens' text offsets
    (never by re-tokenizing): the first token not wholly inside the context starts it, and straddles the boundary
    when it starts before it. The scored tokens run to the end of the input, so they start at its length in bytes
    minus theirs (a BOS token, which has no text in the prompt, changes nothing).
    """
    triples = meta.get("input_token_logprobs")
    if not triples:
        return False
    tops = meta.get("input_top_logprobs")
    scores = out.input_scores.add()
    first, straddles = 0, False
    if isinstance(span, list):
        first = len(request.token_ids.ids)
    elif isinstance(span, str):
        boundary, offset = len(request.prompt), 0
        while first < len(triples) and offset + len(triples[first][2] or "") <= boundary:
            offset += len(triples[first][2] or "")
            first += 1
        straddles = first < len(triples) and offset != boundary
        if straddles:
            out.warnings.add(
                code="scoring_token_straddles_boundary",
                message="the first scored token also covers the end of the context",
            )
    unscored = 0
    while first < len(triples) and triples[first][0] is None:
        first += 1
        unscored += 1
    scored = triples[first:]
    columns(scored, (tops or [])[first:] if tops else None, request.input_scoring.top_logprob_count, scores.tokens)
    text = "".join(t[2] or "" for t in scored)
    scores.logprob_sum = float(sum(t[0] for t in scored))
    scores.scored_token_count = len(scored)
    scores.scored_byte_count = len(text.encode())
    scores.scored_char_count = len(text)
    scores.unscored_token_count = unscored
    scores.first_token_straddles_context = straddles
    if request.WhichOneof("input") == "token_ids":  # the texts of the tokens are all there is
        requested = "".join(t[2] or "" for t in triples[len(request.token_ids.ids) if isinstance(span, list) else 0 :])
        whole = "".join(t[2] or "" for t in triples)
    else:
        requested = span if isinstance(span, str) else request.prompt
        whole = request.prompt + (span if isinstance(span, str) else "")
    scores.span_byte_count, scores.span_char_count = len(requested.encode()), len(requested)
    scores.span_start_byte = max(0, len(whole.encode()) - scores.scored_byte_count)
    return True
