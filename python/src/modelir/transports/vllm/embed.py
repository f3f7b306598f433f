"""vLLM's embeddings (`POST /v1/embeddings`, IR 1.1): OpenAI's wire with vLLM's pooling extras.

From vLLM 0.32's pooling API (`entrypoints/pooling`: `EmbeddingCompletionRequest` and its mixins): the server
embeds only with a pooling runner (`--runner pooling`; a generative model is converted, pooling its last token);
`input` takes strings or token arrays (not both in one call, as OpenAI's); `dimensions` shortens Matryoshka
models' vectors (others refuse it); `use_activation` is the embedding head's normalisation (unit length; `true` by
default, `false` gives the pooled vector unscaled; the older `normalize` is refused); `truncate_prompt_tokens: -1`
with `truncation_side: "right"` keeps the start of an over-long input, and without them an over-long input is
refused; `encoding_format: base64` with `embed_dtype: float32` and `endianness: little` gives the exact float32
bits. The answer is OpenAI's plus `id`, `created` and usage's `completion_tokens` (always 0).
"""

from __future__ import annotations

from typing import Any

from modelir.transports import _common as common
from modelir.transports import embedding
from modelir.transports.base import HttpRequest, HttpResponse
from modelir.transports.openai import embed as openai_embed
from modelir.v1 import embedding_pb2

SUPPORT = embedding.EmbedSupport(wire="vLLM /v1/embeddings", mixed_inputs=False)
OPTION_KEYS = ("add_special_tokens", "cache_salt", "priority", "request_id", "user")
_ACTIVATION = {embedding.NO_NORMALIZATION: False, embedding.L2: True}  # `use_activation`


def lower(request: embedding_pb2.EmbedRequest, model: str, transport: str) -> HttpRequest:
    body: dict[str, Any] = {
        "model": model,
        "input": embedding.wire_inputs(request),
        "encoding_format": "base64",
        "embed_dtype": "float32",
        "endianness": "little",  # its default, `native`, is the server's byte order
    }
    if request.HasField("dimension_count"):
        body["dimensions"] = request.dimension_count
    if request.normalization in _ACTIVATION:
        body["use_activation"] = _ACTIVATION[request.normalization]
    if request.truncation == embedding.END_TRUNCATION:
        body["truncate_prompt_tokens"] = -1  # the model's input limit
        body["truncation_side"] = "right"  # keep the first tokens
    body.update(common.provider_options(request, transport))
    return openai_embed.lower(body, "/v1/embeddings")


def lift(request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
    return openai_embed.lift(request, response, SUPPORT)
