"""A limiter never turns a rate limit into a misleading deadline, and a hung Redis is found out within a second.

A wait the call's deadline cannot cover fails the call at once as `RATE_LIMITED`, with the wait as its retry delay,
instead of sleeping until `DEADLINE_EXCEEDED`. A Redis that accepts connections and never answers (a stopped
process) is found down within the socket timeout; `fail` then fails every queued call at once and `local` admits
them on this replica's own limits.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest
from modelir import Limiter, errors
from modelir.errors import rich_status
from modelir.limiter.redis_limiter import LimiterUnavailableError, RedisLimiter


async def test_a_pause_longer_than_the_deadline_fails_at_once_as_rate_limited():
    limiter = Limiter()
    limiter.pause_for(60.0)
    started = time.monotonic()
    with pytest.raises(errors.RateLimitedError) as caught:
        async with limiter.acquire(deadline=time.monotonic() + 2.0):
            pass
    assert time.monotonic() - started < 0.5
    assert 59 < caught.value.retry_after <= 60
    assert 59 <= caught.value.to_response_error().retry_delay.seconds <= 60
    status = rich_status.to_status(caught.value)
    assert status.code == 8  # RESOURCE_EXHAUSTED, with its RetryInfo


async def test_a_pause_the_deadline_covers_is_waited_out():
    limiter = Limiter()
    limiter.pause_for(0.2)
    started = time.monotonic()
    async with limiter.acquire(deadline=time.monotonic() + 2.0):
        pass
    assert 0.15 < time.monotonic() - started < 1.0


async def test_a_request_bucket_wait_past_the_deadline_fails_at_once():
    limiter = Limiter(requests_per_minute=1)
    async with limiter.acquire():
        pass
    with pytest.raises(errors.RateLimitedError):
        async with limiter.acquire(deadline=time.monotonic() + 1.0):
            pass


async def test_without_a_deadline_the_limiter_still_waits():
    limiter = Limiter()
    limiter.pause_for(0.1)
    async with limiter.acquire():
        pass


class HungRedis:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers (a SIGSTOPped Redis)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def hung_redis():
    server = HungRedis()
    yield server
    server.close()


async def _ten_calls(limiter: RedisLimiter) -> list[object]:
    async def one() -> object:
        async with limiter.acquire(deadline=time.monotonic() + 8.0):
            return "admitted"

    return await asyncio.gather(*(one() for _ in range(10)), return_exceptions=True)


@pytest.mark.parametrize("policy", ["fail", "local"])
async def test_a_hung_redis_is_acted_on_within_about_a_second(hung_redis, policy):
    limiter = RedisLimiter(hung_redis.url, "hung", requests_per_minute=1000, on_unavailable=policy)
    started = time.monotonic()
    try:
        outcomes = await _ten_calls(limiter)
    finally:
        # The connections to the hung server cannot close politely either: do not wait on them.
        limiter._clients.clear()
    took = time.monotonic() - started
    if policy == "fail":
        assert all(isinstance(o, LimiterUnavailableError) for o in outcomes), outcomes
    else:
        assert outcomes == ["admitted"] * 10
    assert took < 2.0, f"{policy}: {took:.2f}s for ten queued calls"
