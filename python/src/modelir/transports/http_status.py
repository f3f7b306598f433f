"""An HTTP answer that is not a success, read as the error table's exception: its status (401/403 auth, 429 rate,
408/5xx unavailable, the rest rejected), its `Retry-After` / `retry-after-ms` hint, and an OpenAI-style error body.
`transports.base` re-exports these for the transports."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from modelir import errors

if TYPE_CHECKING:
    from modelir.transports.base import HttpResponse


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` (delta-seconds or HTTP date) or `retry-after-ms` header, when present.

    A value that is not a finite number of seconds (`inf`, `nan`, garbage) is no hint at all: None (but see
    `_says_never`).
    """
    if (ms := headers.get("retry-after-ms")) is not None and (seconds := _finite(ms)) is not None:
        return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    if (seconds := _finite(value)) is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None


def _says_never(headers: Mapping[str, str]) -> bool:
    """`Retry-After: inf` (or a number past float range): "not before forever". No delay to carry, but a reason
    not to retry at all."""
    for name in ("retry-after", "retry-after-ms"):
        try:
            if float(headers.get(name) or "0") == math.inf:
                return True
        except ValueError:
            continue
    return False


def error_for_status(
    response: HttpResponse, message: str, *, provider_code: str = "", retry_after: float | None = None
) -> errors.ModelError:
    """Map an HTTP status to the error table's exception (401/403 auth, 429 rate, 408/5xx unavailable)."""
    status = response.status
    if retry_after is None:
        retry_after = retry_after_seconds(response.headers)
    if status in (401, 403):
        exc_type: type[errors.ModelError] = errors.ProviderAuthError
    elif status == 429:
        exc_type = errors.RateLimitedError
    elif status == 408 or status >= 500:
        exc_type = errors.ProviderUnavailableError
    else:
        exc_type = errors.ProviderRejectedError
    exc = exc_type(
        f"provider answered HTTP {status}: {message}",
        http_status=status,
        provider_code=provider_code,
        retry_after=retry_after,
    )
    if exc.retryable and retry_after is None and _says_never(response.headers):
        exc.retryable = False  # retrying against "forever" only spends the caller's deadline
    return exc


def json_error(response: HttpResponse) -> errors.ModelError:
    """`{"error": {"message", "type", "param", "code"}}` or `{"error": "..."}` -> the error table's exception."""
    try:
        body = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        from modelir.transports.provider_errors import details  # it builds on this module's error table

        message = str(error.get("message") or "")
        if error.get("param"):
            message += f" (param: {error['param']})"
        message += details(error)  # Groq's failed_generation, OpenRouter's upstream error: kept, not dropped
        code = error.get("code") or error.get("type") or ""
        return error_for_status(response, message, provider_code=str(code))
    if isinstance(error, str):
        return error_for_status(response, error)
    return error_for_status(response, response.body.decode("utf-8", "replace")[:2000])
