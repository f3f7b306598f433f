"""Pieces every transport shares: JSON bodies, the provider-options escape hatch, sampling fields."""

from __future__ import annotations

from typing import Any

import orjson

from modelir import errors
from modelir.logprobs import VLLM_MINUS_INFINITY
from modelir.v1 import request_pb2

__all__ = ["VLLM_MINUS_INFINITY"]


def parse_json(body: bytes, what: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise errors.MalformedResponseError(f"the provider's {what} is not valid JSON: {exc}") from None


def provider_options(request: request_pb2.Request) -> dict[str, Any]:
    if not request.HasField("provider_options"):
        return {}
    return orjson.loads(request.provider_options.options_json)


def json_object(text: str) -> Any:
    return orjson.loads(text) if text else {"type": "object", "properties": {}}


def copy_sampling(sampling: request_pb2.SamplingParams, target: dict[str, Any], same: str, **renamed: str) -> None:
    """Copy the set optional sampling fields into a native body: `same` names (space-separated) keep their IR
    name on the wire, `renamed` maps an IR field to its native name."""
    for field, key in (*((name, name) for name in same.split()), *renamed.items()):
        if sampling.HasField(field):  # type: ignore[arg-type]  # the callers name optional fields
            target[key] = getattr(sampling, field)
