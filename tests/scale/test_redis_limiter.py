"""The Redis limiter against a real redis-server: shared concurrency, token settling, leases of a dead holder,
and each policy for Redis going away and coming back."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time

import pytest
import redis.asyncio as aioredis
from modelir.limiter.redis_limiter import RedisLimiter

from tests.concurrency import peak_concurrency
from tests.scale.conftest import free_port, start_redis, stop

pytestmark = pytest.mark.timeout(120)


async def test_concurrency_is_capped_across_replicas(redis_url, key_prefix):
    replicas = [RedisLimiter(redis_url, "chat", max_concurrency=3, key_prefix=key_prefix) for _ in range(3)]
    peak = await peak_concurrency(replicas, 60, hold=0.02)
    for limiter in replicas:
        await limiter.aclose()
    assert peak == 3


async def test_token_estimates_are_settled_for_every_replica(redis_url, key_prefix):
    a = RedisLimiter(redis_url, "chat", tokens_per_minute=60_000, key_prefix=key_prefix)
    b = RedisLimiter(redis_url, "chat", tokens_per_minute=60_000, key_prefix=key_prefix)
    async with a.acquire(estimated_tokens=50_000):
        pass
    a.settle_tokens(50_000, 100)  # the usage said 100: give back the rest
    started = time.monotonic()
    async with b.acquire(estimated_tokens=50_000):  # would wait ~40 s had the estimate stood
        pass
    assert time.monotonic() - started < 1.0
    client = aioredis.Redis.from_url(redis_url)
    level = float(await client.hget(f"{{{key_prefix}:chat}}:state", "tok_level"))
    await client.aclose()
    assert 60_000 - 50_100 - 10 <= level <= 60_000 - 50_100 + 200
    await a.aclose()
    await b.aclose()


def test_a_slot_held_by_a_killed_replica_comes_back_after_its_lease(redis_url, key_prefix):
    holder = (
        "import asyncio, sys\n"
        "from modelir.limiter.redis_limiter import RedisLimiter\n"
        "async def main():\n"
        f"    limiter = RedisLimiter({redis_url!r}, 'chat', max_concurrency=1, key_prefix={key_prefix!r},"
        " lease_seconds=1.5)\n"
        "    async with limiter.acquire():\n"
        "        print('held', flush=True)\n"
        "        await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    process = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    process.kill()  # dies holding the only slot
    process.wait()

    async def take() -> float:
        limiter = RedisLimiter(redis_url, "chat", max_concurrency=1, key_prefix=key_prefix, lease_seconds=1.5)
        started = time.monotonic()
        async with limiter.acquire():
            pass
        await limiter.aclose()
        return time.monotonic() - started

    waited = asyncio.run(take())
    assert 0.3 <= waited <= 3.0, f"the dead holder's slot should free itself within its lease ({waited:.2f}s)"


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of this test's own, to stop and start again."""
    port = free_port()
    processes = [start_redis(port, tmp_path)]
    url = f"redis://127.0.0.1:{port}/0"

    class Own:
        def __init__(self) -> None:
            self.url = url

        def down(self) -> None:
            stop(processes[-1])

        def up(self) -> None:
            processes.append(start_redis(port, tmp_path))

    yield Own()
    for process in processes:
        stop(process)


async def test_wait_policy_waits_for_redis_to_come_back(own_redis, caplog):
    limiter = RedisLimiter(own_redis.url, "chat", requests_per_minute=600, on_unavailable="wait", socket_timeout=0.3)
    async with limiter.acquire():
        pass
    own_redis.down()
    call = asyncio.ensure_future(_enter(limiter))
    await asyncio.sleep(1.0)
    assert not call.done(), "the wait policy should hold the call while Redis is down"
    own_redis.up()
    await asyncio.wait_for(call, 10)
    assert any("unreachable" in r.message for r in caplog.records)
    assert any("answers again" in r.message for r in caplog.records)
    await limiter.aclose()


async def test_local_policy_falls_back_with_a_warning_and_returns_to_redis(own_redis, caplog):
    caplog.set_level(logging.WARNING, logger="modelir.limiter")
    limiter = RedisLimiter(
        own_redis.url, "chat", max_concurrency=2, on_unavailable="local", socket_timeout=0.3, local_probe_seconds=0.5
    )
    own_redis.down()
    assert await peak_concurrency([limiter], 10, hold=0.02) == 2, "the local fallback keeps the configured limits"
    assert [r for r in caplog.records if "using this replica's own limits" in r.message]
    own_redis.up()
    await asyncio.sleep(0.6)
    client = aioredis.Redis.from_url(own_redis.url)
    async with limiter.acquire():  # back on Redis: the slot is a lease there again
        assert await client.zcard("{modelir:chat}:leases") == 1
    assert any("answers again" in r.message for r in caplog.records)
    await client.aclose()
    await limiter.aclose()


async def test_fail_policy_fails_typed_while_redis_is_down(own_redis):
    from modelir import errors
    from modelir.limiter.redis_limiter import LimiterUnavailableError

    limiter = RedisLimiter(own_redis.url, "chat", on_unavailable="fail", socket_timeout=0.3)
    own_redis.down()
    with pytest.raises(LimiterUnavailableError) as caught:
        await _enter(limiter)
    assert isinstance(caught.value, errors.ProviderUnavailableError) and caught.value.retryable
    own_redis.up()
    # Within one socket timeout of the last failure the policy fails without probing again (a dead Redis is not
    # stampeded by every waiting call); past that window the next call probes and is admitted.
    await asyncio.sleep(0.35)
    await _enter(limiter)  # and works again once Redis is back
    await limiter.aclose()


async def _enter(limiter: RedisLimiter) -> None:
    async with limiter.acquire():
        pass
