"""A helper for limiter tests: how many callers a limiter let in at once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


async def peak_concurrency(limiters: Sequence, calls: int, hold: float = 0.01) -> int:
    """Run `calls` callers spread over `limiters`, each holding its slot `hold` seconds; the most at once."""
    active = peak = 0

    async def call(limiter) -> None:
        nonlocal active, peak
        async with limiter.acquire():
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(hold)
            active -= 1

    await asyncio.gather(*(call(limiters[i % len(limiters)]) for i in range(calls)))
    return peak
