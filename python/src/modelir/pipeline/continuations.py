"""The continuations an input-scoring request scores: the one place that reads `InputScoringOptions.continuations`."""

from __future__ import annotations

from modelir.v1 import request_pb2


def of(request: request_pb2.Request) -> list[request_pb2.Continuation]:
    """The requested continuations, in order; empty when the whole input is scored (or nothing is)."""
    return list(request.input_scoring.continuations) if request.HasField("input_scoring") else []


def first_text(request: request_pb2.Request) -> str:
    """The first continuation's text; empty when there is none or it is given as token ids."""
    spans = of(request)
    return spans[0].text if spans and spans[0].WhichOneof("content") == "text" else ""


def first_tokens(request: request_pb2.Request) -> list[int] | None:
    """The first continuation's token ids; None when there is none or it is given as text."""
    spans = of(request)
    return list(spans[0].token_ids.ids) if spans and spans[0].WhichOneof("content") == "token_ids" else None
