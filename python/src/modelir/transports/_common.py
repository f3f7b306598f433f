"""Pieces the transports share: error bodies, usage, finish reasons, JSON checks, sampling fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from modelir import errors
from modelir.logprobs import VLLM_MINUS_INFINITY
from modelir.transports.base import HttpResponse, error_for_status
from modelir.v1 import errors_pb2, request_pb2, response_pb2

__all__ = ["VLLM_MINUS_INFINITY"]

FINISH_REASONS = {
    "stop": response_pb2.FINISH_REASON_STOP,
    "length": response_pb2.FINISH_REASON_LENGTH,
    "tool_calls": response_pb2.FINISH_REASON_TOOL_CALLS,
    "function_call": response_pb2.FINISH_REASON_TOOL_CALLS,
    "content_filter": response_pb2.FINISH_REASON_CONTENT_FILTER,
}


def finish_reason(raw: str | None) -> int:
    if raw is None:
        return response_pb2.FINISH_REASON_UNSPECIFIED
    return FINISH_REASONS.get(raw, response_pb2.FINISH_REASON_OTHER)


def parse_json(body: bytes, what: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise errors.MalformedResponseError(f"the provider's {what} is not valid JSON: {exc}") from None


def openai_error(response: HttpResponse) -> errors.ModelError:
    """`{"error": {"message", "type", "param", "code"}}` -> the error table's exception."""
    try:
        body = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or "")
        if error.get("param"):
            message += f" (param: {error['param']})"
        code = error.get("code") or error.get("type") or ""
        return error_for_status(response, message, provider_code=str(code))
    if isinstance(error, str):  # some OpenAI-compatible servers send {"error": "..."}
        return error_for_status(response, error)
    return error_for_status(response, response.body.decode("utf-8", "replace")[:2000])


def usage_from(raw: Mapping[str, Any] | None, usage: response_pb2.Usage, *, input_key: str, output_key: str) -> None:
    """OpenAI's counts already follow the IR's meaning: cached and reasoning tokens sit inside the totals."""
    if not raw:
        return
    if (value := raw.get(input_key)) is not None:
        usage.input_token_count = value
    if (value := raw.get(output_key)) is not None:
        usage.output_token_count = value
    input_details = raw.get("prompt_tokens_details") or raw.get("input_tokens_details") or {}
    output_details = raw.get("completion_tokens_details") or raw.get("output_tokens_details") or {}
    if (value := input_details.get("cached_tokens")) is not None:
        usage.cache_read_token_count = value
    if (value := input_details.get("cache_write_tokens")) is not None:
        usage.cache_write_token_count = value
    if (value := output_details.get("reasoning_tokens")) is not None:
        usage.reasoning_token_count = value


def constraint_error(request: request_pb2.Request, text: str) -> errors_pb2.ResponseError | None:
    """A soft error when output under a JSON-schema constraint is not JSON (the output itself is kept)."""
    if request.constraint.WhichOneof("kind") != "json_schema":
        return None
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return errors_pb2.ResponseError(
            reason=errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED,
            message=f"the output is not valid JSON under the requested schema: {exc}",
        )
    return None


def missing_logprobs_error(index: int) -> errors_pb2.ResponseError:
    return errors_pb2.ResponseError(
        reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
        message=f"logprobs were requested but the provider returned none for choice {index}",
    )


def truncated_error(detail: str) -> errors_pb2.ResponseError:
    return errors_pb2.ResponseError(reason=errors_pb2.ERROR_REASON_TRUNCATED_STREAM, message=detail, retryable=True)


def provider_options(request: request_pb2.Request) -> dict[str, Any]:
    if not request.HasField("provider_options"):
        return {}
    return orjson.loads(request.provider_options.options_json)


def json_object(text: str) -> Any:
    return orjson.loads(text) if text else {"type": "object", "properties": {}}


def copy_sampling(
    sampling: request_pb2.SamplingParams, names: tuple[tuple[str, str], ...], target: dict[str, Any]
) -> None:
    """Copy the set optional sampling fields into a native body under their native names ((ir, native) pairs)."""
    for field, key in names:
        if sampling.HasField(field):
            target[key] = getattr(sampling, field)
