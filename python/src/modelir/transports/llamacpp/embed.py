"""llama-server's embeddings (`POST /v1/embeddings`, IR 1.1): OpenAI's wire with llama.cpp's own normalisation.

From llama-server's README and its handler (`tools/server`, `handle_embeddings_impl`): the server answers only when
started with `--embeddings` (else a 501 `not_supported_error`), and `/v1/embeddings` only with a pooling other
than `none` (a 400 otherwise; the model's GGUF or `--pooling` decides: mean, cls, last, rank). `input` takes
strings and token arrays, mixed, each embedded on its own (text with the model's special tokens, such as BOS; ids
as they are). `embd_normalize` scales the pooled vector: -1 none, 2 Euclidean (the default), others (max-abs,
taxicab, p-norms) have no IR value. `encoding_format: base64` is little-endian float32. An input longer than the
batch or the context is refused, never truncated; there is no `dimensions`. Usage is the sum of every input's
tokens (`prompt_tokens`); each entry of a base64 answer also says `encoding_format`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from modelir.transports import embedding
from modelir.transports.base import HttpRequest, HttpResponse
from modelir.transports.openai import embed as openai_embed
from modelir.v1 import embedding_pb2

SUPPORT = embedding.EmbedSupport(
    wire="llama-server /v1/embeddings",
    refused=MappingProxyType(
        {
            ("truncation", embedding.END_TRUNCATION): "llama-server refuses an input longer than its batch or "
            "context and has no option to truncate it",
        }
    ),
    dimension_count="llama-server has no option for it; the vectors have the model's size",
)
_NORMALIZE = {embedding.NO_NORMALIZATION: -1, embedding.L2: 2}  # `embd_normalize`


def lower(request: embedding_pb2.EmbedRequest, model: str) -> HttpRequest:
    body: dict[str, Any] = {"model": model, "input": embedding.wire_inputs(request), "encoding_format": "base64"}
    if request.normalization in _NORMALIZE:
        body["embd_normalize"] = _NORMALIZE[request.normalization]
    return openai_embed.lower(body, "/v1/embeddings")


def lift(request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
    return openai_embed.lift(request, response, SUPPORT)
