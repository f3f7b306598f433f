"""The limiter holds its caps under load and slows down when the provider says so."""

from __future__ import annotations

import asyncio
import time

from modelir import Limiter


async def test_concurrency_cap_of_n_holds_under_10n_callers():
    n = 8
    limiter = Limiter(max_concurrency=n)
    active = peak = done = 0

    async def call():
        nonlocal active, peak, done
        async with limiter.acquire():
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1
            done += 1

    await asyncio.gather(*(call() for _ in range(10 * n)))
    assert peak == n and done == 10 * n


async def test_requests_per_minute_paces_instead_of_failing():
    limiter = Limiter(requests_per_minute=600)  # 10 per second, a burst of 600 allowed
    limiter._requests.level = 2  # start nearly empty so the pacing shows within the test
    started = time.monotonic()
    for _ in range(5):
        async with limiter.acquire():
            pass
    assert 0.25 <= time.monotonic() - started < 2


async def test_429_pauses_new_requests():
    limiter = Limiter()
    limiter.observe(429, {"retry-after": "0.3"})
    started = time.monotonic()
    async with limiter.acquire():
        pass
    assert time.monotonic() - started >= 0.28


async def test_spent_quota_header_pauses_until_reset():
    limiter = Limiter()
    limiter.observe(200, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "300ms"})
    started = time.monotonic()
    async with limiter.acquire():
        pass
    assert time.monotonic() - started >= 0.28


async def test_tokens_per_minute_budget_is_settled_from_usage():
    limiter = Limiter(tokens_per_minute=6000)
    async with limiter.acquire(estimated_tokens=1000):
        pass
    limiter.settle_tokens(1000, 100)
    assert limiter._tokens.level > 5800
