"""The fleet benchmark (`make bench-scale`): throughput and server CPU per request for one and three replicas,
and the Redis limiter's added latency per call against the in-memory one.

Everything runs on this machine: a fake provider (tests/scale/fake_provider.py, no quota, no delay), replicas of
`modelir serve` on 127.0.0.1-3, a redis-server of its own. On a 2-core machine three replicas share the same two
cores with the provider and the client, so the three-replica row shows the cost of spreading, not a speed-up;
and other people's load skews every figure: read them as this run's, side by side.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from modelir import build_request
from modelir.limiter import Limiter
from modelir.limiter.redis_limiter import RedisLimiter
from modelir.remote import RemoteModel

from tests.scale.conftest import Fleet, Provider, free_port, replica_config, start_redis, stop

CALLS = 4000
CONCURRENCY = 64


async def _throughput(model: RemoteModel) -> float:
    request = build_request("chat", messages=[("user", "hi")], max_output_tokens=4)
    slots = asyncio.Semaphore(CONCURRENCY)

    async def one() -> None:
        async with slots:
            await model.arun(request)

    for _ in range(200):  # warm the connections and the replicas
        await one()
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(CALLS)))
    return CALLS / (time.perf_counter() - started)


async def _sequential_latency(model: RemoteModel, calls: int = 800) -> float:
    request = build_request("chat", messages=[("user", "hi")], max_output_tokens=4)
    for _ in range(100):
        await model.arun(request)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await model.arun(request)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def _acquire_latency(limiter, calls: int = 3000) -> tuple[float, float]:
    for _ in range(200):
        async with limiter.acquire(10):
            pass
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        async with limiter.acquire(10):
            pass
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)]


def main() -> None:
    import subprocess

    workdir = Path(tempfile.mkdtemp(prefix="modelir-bench-scale-"))
    port = free_port()
    provider_process = subprocess.Popen(
        [sys.executable, "-m", "tests.scale.fake_provider", str(port)], cwd=Path(__file__).resolve().parents[1]
    )
    redis_port = free_port()
    redis_process = start_redis(redis_port, workdir)
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    provider = Provider(port)
    for _ in range(100):
        try:
            provider.control()
            break
        except Exception:
            time.sleep(0.1)
    rows = []
    try:
        for count in (1, 3):
            fleet = Fleet(workdir, [replica_config(provider, i + 1, redis_url=None, prefix="") for i in range(count)])
            try:
                model = RemoteModel(fleet.targets, "chat")
                before = sum(fleet.cpu_seconds())
                rate = asyncio.run(_throughput(model))
                cpu = (sum(fleet.cpu_seconds()) - before) / (CALLS + 200)
                name = f"{count} replica{'s' if count > 1 else ''}"
                rows.append(f"| {name} | {rate:,.0f} calls/s | {cpu * 1e6:,.0f} µs |")
            finally:
                fleet.stop()
        latencies = {}
        for backend in ("memory", "redis"):
            url = redis_url if backend == "redis" else None
            limits = {"requests_per_minute": 10_000_000, "max_concurrency": 1000}
            fleet = Fleet(workdir, [replica_config(provider, 1, redis_url=url, prefix="bench", **limits)])
            try:
                latencies[backend] = asyncio.run(_sequential_latency(RemoteModel(fleet.targets, "chat")))
            finally:
                fleet.stop()

        async def acquires():
            memory = await _acquire_latency(Limiter(requests_per_minute=10_000_000, max_concurrency=1000))
            shared = RedisLimiter(redis_url, "bench-acquire", requests_per_minute=10_000_000, max_concurrency=1000)
            redis = await _acquire_latency(shared)
            await shared.aclose()
            return memory, redis

        memory, redis = asyncio.run(acquires())
    finally:
        stop(redis_process)
        stop(provider_process)
    print(f"## fleet ({CALLS} calls, concurrency {CONCURRENCY}, client round_robin over the replicas)\n")
    print("| fleet | throughput | server CPU per request (all replicas) |\n|---|---|---|")
    print("\n".join(rows))
    print("\n## the Redis limiter's added latency (rpm and concurrency limits, nothing waits)\n")
    print("| measure | in-memory | Redis | added |\n|---|---|---|---|")
    print(
        f"| acquire + release, median | {memory[0] * 1e6:,.0f} µs | {redis[0] * 1e6:,.0f} µs "
        f"| {(redis[0] - memory[0]) * 1e6:,.0f} µs |"
    )
    print(
        f"| acquire + release, p99 | {memory[1] * 1e6:,.0f} µs | {redis[1] * 1e6:,.0f} µs "
        f"| {(redis[1] - memory[1]) * 1e6:,.0f} µs |"
    )
    print(
        f"| one call end to end (client -> replica -> provider), median | {latencies['memory'] * 1e3:.2f} ms "
        f"| {latencies['redis'] * 1e3:.2f} ms | {(latencies['redis'] - latencies['memory']) * 1e3:.2f} ms |"
    )


if __name__ == "__main__":
    main()
