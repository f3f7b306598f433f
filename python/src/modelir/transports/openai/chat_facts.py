"""The chat wire's native facts that have no IR field, as provider parts: OpenRouter's `reasoning_details` and
annotations that arrived with no text to cite. The unary and the stream lift build them the same way."""

from __future__ import annotations

from typing import Any

import orjson

from modelir.v1 import content_pb2

REASONING_DETAILS = "message.reasoning_details"  # the provider part of OpenRouter's `reasoning_details`
ANNOTATIONS = "message.annotations"


def _part(kind: str, native: Any, issuer: content_pb2.Issuer, transport: str) -> content_pb2.Part:
    provider = content_pb2.ProviderPart(type=f"{transport}.{kind}", native_json=orjson.dumps(native).decode())
    provider.issuer.CopyFrom(issuer)
    return content_pb2.Part(provider_part=provider)


def reasoning_details_part(details: list[Any], issuer: content_pb2.Issuer, transport: str) -> content_pb2.Part:
    """OpenRouter's `reasoning_details` (reasoning entries with the signatures that replay Claude's thinking,
    https://openrouter.ai/docs/use-cases/reasoning-tokens), verbatim: after the message's tool calls, replayed
    on the assistant message it came from."""
    return _part(REASONING_DETAILS, details, issuer, transport)


def annotations_part(annotations: list[Any], issuer: content_pb2.Issuer, transport: str) -> content_pb2.Part:
    """Annotations (`url_citation`s) of a message with no text to attach them to, verbatim."""
    return _part(ANNOTATIONS, annotations, issuer, transport)
