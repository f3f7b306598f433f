"""A client with three targets spreads its calls over the replicas (gRPC round_robin with health checks); when
one replica is killed mid-run, or drains on SIGTERM, no call is lost: the ones cut off are sent again."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

import pytest
from modelir import build_request
from modelir.remote import RemoteModel

from tests.scale.conftest import replica_config

pytestmark = pytest.mark.timeout(300)


async def _run(model: RemoteModel, calls: int, concurrency: int, on_progress=None) -> tuple[Counter, list[str]]:
    served: Counter = Counter()
    failures: list[str] = []
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with slots:
            try:
                response = await model.arun(build_request("chat", messages=[("user", f"hi {i}")], max_output_tokens=4))
            except Exception as exc:  # counted: the test asserts there are none
                failures.append(f"{type(exc).__name__}: {exc}")
                return
            served[response.model] += 1
            if on_progress is not None:
                on_progress(sum(served.values()))

    await asyncio.gather(*(one(i) for i in range(calls)))
    return served, failures


def _fleet(provider, fleet_factory, grace: float = 10.0):
    return fleet_factory([replica_config(provider, i + 1, redis_url=None, prefix="") for i in range(3)], grace)


async def test_three_targets_spread_calls_round_robin(provider, fleet_factory):
    fleet = _fleet(provider, fleet_factory)
    provider.control(delay=0.005)
    model = RemoteModel(",".join(fleet.targets), "chat")
    served, failures = await _run(model, 600, 24)
    await model.aclose()
    print(f"spread over three replicas: {dict(served)}")
    assert not failures and sum(served.values()) == 600
    assert set(served) == {"replica-1", "replica-2", "replica-3"}
    assert min(served.values()) >= 600 / 3 * 0.6, f"round_robin should spread calls evenly: {served}"


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
async def test_a_replica_that_dies_or_drains_mid_run_loses_no_call(how, provider, fleet_factory):
    fleet = _fleet(provider, fleet_factory, grace=10.0)
    provider.control(delay=0.02)  # calls are in flight on every replica when one goes
    model = RemoteModel(fleet.targets, "chat")
    stopped = asyncio.Event()
    sig = signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM

    def stop_replica_2(done: int) -> None:
        if done >= 300 and not stopped.is_set():
            stopped.set()
            fleet.signal(1, sig)

    served, failures = await _run(model, 1500, 48, stop_replica_2)
    await model.aclose()
    code = fleet.processes[1].wait(15)
    print(f"{how} mid-run: served {dict(served)}, failed {len(failures)}, sent again {model.failovers}, exit {code}")
    assert stopped.is_set() and not failures, failures[:3]
    assert sum(served.values()) == 1500
    # The other two replicas carried the rest of the run.
    assert served["replica-1"] + served["replica-3"] > 1500 - 300
    if how == "SIGTERM":
        assert code == 0, "a draining replica should finish its calls and exit cleanly"
