"""Gemini's embeddings (`POST /v1beta/models/{model}:batchEmbedContents`, IR 1.1): the lowering and the lift, pure.

From the Gemini API reference (https://ai.google.dev/api/embeddings): one `requests` entry per input, each
`{model: "models/{model}", content: {parts: [{text}]}}` with the optional `taskType`, `title` and
`outputDimensionality` (keeps the first N components; newer models only); the answer is `{embeddings: [{values}]}`
in request order, with no token count and no model id. Only the full-size vectors of gemini-embedding-001 have unit
length ("for other dimensions you need to normalize"), so L2 is done here, exactly, and said in a warning; the
unscaled vector of a full-size one cannot be had. The Gemini API takes no truncation option (`autoTruncate` is
Vertex AI's) and documents no behaviour for an over-long input, so neither truncation value can be promised.
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
_UNDOCUMENTED = "the Gemini API takes no truncation option (autoTruncate is Vertex AI's) and does not document it"
SUPPORT = embedding.EmbedSupport(
    wire="Gemini batchEmbedContents",
    refused=MappingProxyType(
        {
            ("truncation", embedding.NONE_TRUNCATION): _UNDOCUMENTED,
            ("truncation", embedding.END_TRUNCATION): _UNDOCUMENTED,
            ("normalization", embedding.NO_NORMALIZATION): "gemini-embedding-001's full-size vectors come scaled "
            "to unit length, with no option for the unscaled ones",
        }
    ),
    token_ids="Gemini embeds content parts, not token ids",
    l2_by_modelir=True,
)
OPTION_KEYS = ("taskType", "title")  # per entry: every input of the call gets the same


def lower(request: embedding_pb2.EmbedRequest, model: str, transport: str) -> HttpRequest:
    shared: dict[str, Any] = {"model": f"models/{model}"}
    if request.HasField("dimension_count"):
        shared["outputDimensionality"] = request.dimension_count
    shared.update(common.provider_options(request, transport))
    entries = [{**shared, "content": {"parts": [{"text": one.text}]}} for one in request.inputs]
    path = f"/v1beta/models/{model}:batchEmbedContents"
    return HttpRequest("POST", path, orjson.dumps({"requests": entries}), JSON_HEADERS)


def lift(request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
    answer = common.parse_json(response.body, "batchEmbedContents body")
    vectors = ((i, embedding.vector(e["values"])) for i, e in enumerate(common.array(answer, "embeddings")))
    return embedding.response(request, SUPPORT, "", vectors)
