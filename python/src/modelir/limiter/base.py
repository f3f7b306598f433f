"""The one interface every limiter backend implements, and the provider feedback they all read.

A limiter admits one request at a time through `acquire` (waiting while the budget is spent; failing at once, as
`RATE_LIMITED` with the wait as its retry delay, when the wait would outlast the call's deadline),
learns from every provider answer through `observe` (a 429's `Retry-After`, `x-ratelimit-*` quota headers), and
is told the real token count once a response's usage is known through `settle_tokens`.
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Literal

from modelir import errors
from modelir.transports.base import retry_after_seconds

# What a shared limiter does while its store cannot be reached: wait for it, fail the call typed, or fall back to
# this process's own limits (with a warning).
UnavailablePolicy = Literal["wait", "fail", "local"]
UNAVAILABLE_POLICIES: tuple[UnavailablePolicy, ...] = ("wait", "fail", "local")


class BaseLimiter(ABC):
    """Concurrency, requests per minute and tokens per minute for one model or one shared key."""

    max_concurrency: int | None
    requests_per_minute: float | None
    tokens_per_minute: float | None

    @abstractmethod
    def acquire(self, estimated_tokens: int = 0, *, deadline: float | None = None) -> AbstractAsyncContextManager[None]:
        """Hold a slot for one request; `estimated_tokens` is debited from the tokens-per-minute budget. A wait
        that would end after `deadline` (monotonic) raises `RateLimitedError` at once (`outlasts`)."""

    @abstractmethod
    def settle_tokens(self, estimated: int, actual: int) -> None:
        """Correct the token budget once the real usage of a request admitted with `estimated` is known."""

    @abstractmethod
    def pause_for(self, seconds: float) -> None:
        """Start no request for the next `seconds`."""

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Slow down on 429, and when quota headers say the budget is spent until a reset time."""
        pause = feedback_pause(status, headers)
        if pause:
            self.pause_for(pause)

    async def aclose(self) -> None:  # noqa: B027 (a backend without connections has nothing to close)
        """Release the backend's connections."""


def outlasts(wait: float, deadline: float | None, name: str = "") -> None:
    """Raise `RateLimitedError` when waiting `wait` seconds would pass `deadline`: the call could not start in time,
    and waiting its whole deadline out would only turn a rate limit into a misleading `DEADLINE_EXCEEDED`."""
    if deadline is not None and time.monotonic() + wait > deadline:
        where = f" {name}" if name else ""
        raise errors.RateLimitedError(
            f"the limiter{where} admits no request for {wait:.3g}s, longer than the call's deadline allows",
            retry_after=wait,
        )


# The longest pause one provider answer can impose on every model sharing a limiter. A 429 with `Retry-After:
# 86400`, or a spent quota whose reset is a day away, would otherwise stop every later call until its deadline
# (or for ever, without one); past this cap the next call simply asks again, and the provider's 429 answers it.
MAX_FEEDBACK_PAUSE = 60.0
# A 429 with no usable hint pauses this long.
DEFAULT_429_PAUSE = 1.0


def feedback_pause(status: int, headers: Mapping[str, str]) -> float:
    """Seconds the provider asks us to wait (0 when it asks for nothing), at most `MAX_FEEDBACK_PAUSE`."""
    if status == 429:
        hint = retry_after_seconds(headers)
        return min(DEFAULT_429_PAUSE if hint is None else hint, MAX_FEEDBACK_PAUSE)  # `Retry-After: 0` is no pause
    pause = 0.0
    for remaining_key, reset_key in _QUOTA_HEADERS:
        remaining = headers.get(remaining_key)
        if remaining is not None and remaining.strip() == "0":
            pause = max(pause, parse_reset(headers.get(reset_key, "")))
    return min(pause, MAX_FEEDBACK_PAUSE)


# (remaining, reset) header pairs: OpenAI-style and Anthropic-style.
_QUOTA_HEADERS = (
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"),
    ("anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"),
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_reset(value: str) -> float:
    """Seconds until a reset given as `1s`, `6m0s`, `250ms`, plain seconds or an RFC 3339 time."""
    value = value.strip()
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parts = _DURATION_PART.findall(value)
    if parts and "".join(n + u for n, u in parts) == value:
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    try:
        return max(0.0, datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() - time.time())
    except ValueError:
        return 0.0
