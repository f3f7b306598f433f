"""The in-memory limiter backend (the default): one process's concurrency, requests and tokens per minute.

A `Limiter` is an explicit collaborator: several models (say, every model behind one API key) can share one.
Callers wait instead of failing (unless the wait would outlast their deadline: then `RATE_LIMITED` at once). When
the provider answers 429, or its headers say the quota is spent, the limiter pauses new requests until the
provider's reset time. Its state lives in this process only: replicas that must share a quota use the Redis backend
(`modelir.limiter.redis_limiter`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from modelir.limiter.base import BaseLimiter, outlasts


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


class Limiter(BaseLimiter):
    def __init__(
        self,
        *,
        max_concurrency: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
    ) -> None:
        self.max_concurrency = max_concurrency
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        self._requests = _TokenBucket(requests_per_minute) if requests_per_minute else None
        self._tokens = _TokenBucket(tokens_per_minute) if tokens_per_minute else None
        self._paused_until = 0.0  # time.monotonic() before which no request starts
        self._gate = asyncio.Lock()  # callers pass the rate gates one at a time, in arrival order
        self.in_flight = 0

    def acquire(self, estimated_tokens: int = 0, *, deadline: float | None = None) -> _Admission:
        """Hold a slot for one request. `estimated_tokens` is debited from the tokens-per-minute budget; a wait
        past `deadline` raises `RateLimitedError` at once."""
        return _Admission(self, estimated_tokens, deadline)

    async def _admit(self, estimated_tokens: int, deadline: float | None) -> None:
        """Take a slot and pass the rate gates (one caller at a time, in arrival order); the slot is given back when
        this does not finish (a wait past the deadline, a cancelled wait)."""
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
                    outlasts(wait, deadline)
                    await asyncio.sleep(wait)
                if self._requests is not None:
                    self._requests.take(1)
                if self._tokens is not None and estimated_tokens:
                    self._tokens.take(estimated_tokens)
        except BaseException:
            if self._slots is not None:
                self._slots.release()
            raise
        self.in_flight += 1

    def _release(self) -> None:
        self.in_flight -= 1
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


class _Admission:
    """`Limiter.acquire`'s context: admitted on entry, the slot given back on exit, whatever ends the block. (A
    class, not `contextlib.asynccontextmanager`: it runs on every call, and an async generator per call costs its
    creation, the event loop's bookkeeping of it, and the generator protocol on entry and exit.)"""

    __slots__ = ("_deadline", "_estimated_tokens", "_limiter")

    def __init__(self, limiter: Limiter, estimated_tokens: int, deadline: float | None) -> None:
        self._limiter, self._estimated_tokens, self._deadline = limiter, estimated_tokens, deadline

    async def __aenter__(self) -> None:
        await self._limiter._admit(self._estimated_tokens, self._deadline)

    async def __aexit__(self, *exc: object) -> Literal[False]:
        self._limiter._release()
        return False
