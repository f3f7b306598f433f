"""OpenAI embeddings (`POST /embeddings`, IR 1.1): the lowering and the lift, pure; vLLM and llama.cpp extend both.

From OpenAI's API reference (https://platform.openai.com/docs/api-reference/embeddings): `input` is a string, an
array of strings, an array of token ids or an array of token arrays (never strings and token arrays mixed);
`dimensions` shortens the vectors of text-embedding-3 and later models; `encoding_format` is `float` or `base64`
(little-endian float32, what the official SDK asks for by default: one decode instead of a float parse per
component, and the exact float32 bits); the answer is `{object, data: [{object, index, embedding}], model, usage:
{prompt_tokens, total_tokens}}`. Its vectors have unit length, shortened ones too; an input over the model's limit
is refused (there is no option to truncate it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import MappingProxyType
from typing import Any

import orjson

from modelir.transports import _common as common
from modelir.transports import embedding
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport
from modelir.v1 import embedding_pb2

JSON_HEADERS = (("content-type", "application/json"),)

SUPPORT = embedding.EmbedSupport(
    wire="OpenAI embeddings",
    refused=MappingProxyType(
        {
            ("truncation", embedding.END_TRUNCATION): "OpenAI refuses an input over the model's limit and has no "
            "option to truncate it",
            ("normalization", embedding.NO_NORMALIZATION): "OpenAI's vectors always have unit length (shortened "
            "ones too)",
        }
    ),
    mixed_inputs=False,
)
OPTION_KEYS = ("user",)


def body(request: embedding_pb2.EmbedRequest, model: str, transport: str) -> dict[str, Any]:
    """The native body as a dict (the hook the engines' dialects extend before it is serialised once)."""
    native: dict[str, Any] = {"model": model, "input": embedding.wire_inputs(request), "encoding_format": "base64"}
    if request.HasField("dimension_count"):
        native["dimensions"] = request.dimension_count
    native.update(common.provider_options(request, transport))
    return native


def lower(native: dict[str, Any], path: str = "/embeddings") -> HttpRequest:
    return HttpRequest("POST", path, orjson.dumps(native), JSON_HEADERS)


def lift(
    request: embedding_pb2.EmbedRequest, response: HttpResponse, support: embedding.EmbedSupport = SUPPORT
) -> embedding_pb2.EmbedResponse:
    """The answer's vectors by their `index`, its model and `usage.prompt_tokens` (the only count: an embedding
    generates nothing, and `total_tokens` repeats it)."""
    answer = common.parse_json(response.body, "embeddings body")
    usage = answer.get("usage") or {}
    tokens = usage.get("prompt_tokens")
    return embedding.response(
        request,
        support,
        str(answer.get("model") or ""),
        _vectors(common.array(answer, "data")),
        input_token_count=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None,
    )


def _vectors(data: list[Any]) -> Iterator[tuple[int, Sequence[float]]]:
    for position, item in enumerate(data):
        index = item.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"data[{position}].index is not an integer")
        yield index, embedding.vector(item["embedding"])


class OpenAIEmbeddings(HttpTransport):
    """The embedding endpoint of the transports whose base URL is OpenAI's (chat, completions, Responses): each
    claims EMBEDDINGS, and an `Embed` call goes to `/embeddings` beside its generation endpoint. Their dialects
    (vLLM, llama.cpp) do not inherit the claim; their servers' embedding wires are their own."""

    embed_option_keys = OPTION_KEYS

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        return SUPPORT.problems(request)

    def lower_embed(self, request: embedding_pb2.EmbedRequest) -> HttpRequest:
        return lower(body(request, self.provider_model or request.model, self.name))

    def lift_embed(self, request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
        return lift(request, response)
