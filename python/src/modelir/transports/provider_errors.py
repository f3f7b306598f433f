"""A provider's error object wherever it arrives: its diagnostic members kept in its message, and an error that
comes without an HTTP status (mid-stream) typed by its code through the same table as the HTTP status path.

OpenAI-style error objects are `{"message", "type", "param", "code"}`; providers add what explains them: Groq's
`failed_generation` (what the model produced when a tool call failed to parse,
https://console.groq.com/docs/errors), OpenRouter's `metadata` (`raw`: the upstream provider's own error,
`provider_name`: which one; https://openrouter.ai/docs/api-reference/errors). A stream reports an error as a
chunk or event with such an object (OpenRouter: with its numeric `code`; OpenAI and Anthropic: with a `type`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from modelir.transports.base import HttpResponse, error_for_status
from modelir.v1 import errors_pb2

# An error's `type` or string `code` -> the HTTP status it stands for (OpenAI's and Anthropic's documented error
# types), for errors that come without a status. Anything else is the provider failing (503).
_STATUS_OF_TYPE = {
    "invalid_request_error": 400,
    "tool_use_failed": 400,
    "context_length_exceeded": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}
_UNKNOWN = 503


def details(error: Mapping[str, Any]) -> str:
    """The diagnostic members of an error object, as text for its message: `failed_generation`, and
    `metadata.provider_name` with `metadata.raw` (a string or any JSON)."""
    out = []
    if isinstance(failed := error.get("failed_generation"), str) and failed:
        out.append(f"failed_generation: {failed}")
    metadata = error.get("metadata")
    if isinstance(metadata, Mapping):
        if isinstance(name := metadata.get("provider_name"), str) and name:
            out.append(f"provider: {name}")
        if (raw := metadata.get("raw")) is not None:
            out.append(f"upstream: {raw if isinstance(raw, str) else orjson.dumps(raw).decode()}")
        other = {k: v for k, v in metadata.items() if k not in ("provider_name", "raw")}
        if other:
            out.append(f"metadata: {orjson.dumps(other, default=str).decode()}")
    return "".join(f" ({item})" for item in out)


def status_of(error: Mapping[str, Any]) -> int:
    """The HTTP status an error object stands for: its numeric `code` (OpenRouter's), else its `type` or code."""
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        return code
    for key in ("code", "type"):
        if (status := _STATUS_OF_TYPE.get(str(error.get(key) or ""))) is not None:
            return status
    return _UNKNOWN


def mid_stream(
    error: Mapping[str, Any], default: str = "the provider reported an error mid-stream"
) -> errors_pb2.ResponseError:
    """The soft error of an error object that arrived inside a 200 answer or a stream: typed as the same object
    under an HTTP status would be, its provider code and diagnostic members kept."""
    message = str(error.get("message") or default) + details(error)
    code = error.get("code") if error.get("code") not in (None, "") else error.get("type")
    typed = error_for_status(HttpResponse(status_of(error), {}, b""), message, provider_code=str(code or ""))
    soft = typed.to_response_error()
    soft.message = typed.message.removeprefix(f"provider answered HTTP {typed.http_status}: ")
    soft.http_status = 0  # no status came with it: the answer itself was a 200
    return soft
