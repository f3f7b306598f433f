"""Ollama's embeddings (`POST /api/embed`, IR 1.1): the lowering and the lift, pure.

From Ollama's API reference (https://docs.ollama.com/api/embed) and its handler (`server/routes.go`
`EmbedHandler`, v0.17.4): `input` is a string or an array of strings (no token ids); `truncate` (default true)
cuts an input to the context at its end, `false` makes an over-long input a 400; `dimensions` keeps the first N
components and scales them again (a larger N is ignored). Every vector is scaled to unit length: there is no
unscaled vector to ask for. The answer is `{model, embeddings: [[...]], total_duration, load_duration,
prompt_eval_count}`, vectors in input order, one token count for all inputs (left out when zero).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import orjson

from modelir.transports import _common as common
from modelir.transports import embedding
from modelir.transports.base import HttpRequest, HttpResponse
from modelir.v1 import embedding_pb2

JSON_HEADERS = (("content-type", "application/json"),)
SUPPORT = embedding.EmbedSupport(
    wire="Ollama /api/embed",
    refused=MappingProxyType(
        {("normalization", embedding.NO_NORMALIZATION): "Ollama always scales its vectors to unit length"}
    ),
    token_ids="Ollama's input is a string or an array of strings",
)
OPTION_KEYS = ("keep_alive", "options")
_TRUNCATE = {embedding.NONE_TRUNCATION: False, embedding.END_TRUNCATION: True}


def lower(request: embedding_pb2.EmbedRequest, model: str, transport: str) -> HttpRequest:
    body: dict[str, Any] = {"model": model, "input": [one.text for one in request.inputs]}
    if request.truncation in _TRUNCATE:
        body["truncate"] = _TRUNCATE[request.truncation]
    if request.HasField("dimension_count"):
        body["dimensions"] = request.dimension_count
    body.update(common.provider_options(request, transport))
    return HttpRequest("POST", "/api/embed", orjson.dumps(body), JSON_HEADERS)


def lift(request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
    answer = common.parse_json(response.body, "embed body")
    tokens = answer.get("prompt_eval_count")
    vectors = ((i, embedding.vector(v)) for i, v in enumerate(common.array(answer, "embeddings")))
    return embedding.response(
        request,
        SUPPORT,
        str(answer.get("model") or ""),
        vectors,
        input_token_count=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
    )
