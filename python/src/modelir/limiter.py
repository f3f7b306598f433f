"""Client-side limits: concurrency, requests per minute and tokens per minute.

A `Limiter` is an explicit collaborator: several models (say, every model behind one API key) can share one.
Callers wait instead of failing. When the provider answers 429, or its headers say the quota is spent, the
limiter pauses new requests until the provider's reset time.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime

from modelir.transports.base import retry_after_seconds


class _TokenBucket:
    """A bucket of `per_minute` units that refills continuously."""

    def __init__(self, per_minute: float) -> None:
        self.capacity = float(per_minute)
        self.level = float(per_minute)
        self.rate = per_minute / 60.0
        self.stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is available (0 when it is now). A request larger than the bucket waits
        for a full bucket instead of forever."""
        self._refill()
        amount = min(amount, self.capacity)
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate

    def take(self, amount: float) -> None:
        self._refill()
        self.level -= amount  # may go negative: a debt paid back by refilling

    def give_back(self, amount: float) -> None:
        self._refill()
        self.level = min(self.capacity, self.level + amount)


class Limiter:
    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
    ) -> None:
        self.max_concurrency = max_concurrency
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self._requests = _TokenBucket(requests_per_minute) if requests_per_minute else None
        self._tokens = _TokenBucket(tokens_per_minute) if tokens_per_minute else None
        self._paused_until = 0.0  # time.monotonic() before which no request starts
        self._gate = asyncio.Lock()  # callers pass the rate gates one at a time, in arrival order
        self.in_flight = 0

    @asynccontextmanager
    async def acquire(self, estimated_tokens: int = 0) -> AsyncIterator[None]:
        """Hold a slot for one request. `estimated_tokens` is debited from the tokens-per-minute budget."""
        if self._slots is not None:
            await self._slots.acquire()
        try:
            async with self._gate:
                while True:
                    wait = self._paused_until - time.monotonic()
                    if self._requests is not None:
                        wait = max(wait, self._requests.wait_for(1))
                    if self._tokens is not None and estimated_tokens:
                        wait = max(wait, self._tokens.wait_for(estimated_tokens))
                    if wait <= 0:
                        break
                    await asyncio.sleep(wait)
                if self._requests is not None:
                    self._requests.take(1)
                if self._tokens is not None and estimated_tokens:
                    self._tokens.take(estimated_tokens)
            self.in_flight += 1
            try:
                yield
            finally:
                self.in_flight -= 1
        finally:
            if self._slots is not None:
                self._slots.release()

    def settle_tokens(self, estimated: int, actual: int) -> None:
        """Correct the token budget once the real usage is known."""
        if self._tokens is None:
            return
        if actual > estimated:
            self._tokens.take(actual - estimated)
        elif estimated > actual:
            self._tokens.give_back(estimated - actual)

    def pause_for(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def observe(self, status: int, headers: Mapping[str, str]) -> None:
        """Slow down on 429, and when quota headers say the budget is spent until a reset time."""
        if status == 429:
            self.pause_for(retry_after_seconds(headers) or 1.0)
            return
        for remaining_key, reset_key in _QUOTA_HEADERS:
            remaining = headers.get(remaining_key)
            if remaining is not None and remaining.strip() == "0":
                reset = _parse_reset(headers.get(reset_key, ""))
                if reset:
                    self.pause_for(reset)


# (remaining, reset) header pairs: OpenAI-style and Anthropic-style.
_QUOTA_HEADERS = (
    ("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
    ("anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset"),
    ("anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-reset"),
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _parse_reset(value: str) -> float:
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
