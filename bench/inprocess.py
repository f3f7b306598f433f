"""The in-process SDK against its floor: `Model.arun` on an `openai_chat` model, and the least a Python client of
the same exchange does (raw aiohttp + orjson), both calling an instant local upstream in another process.

Measured as client CPU per call (this process's user + system time, all threads), sequential calls on the default
asyncio loop and under the default GC, as a library user runs them. Every variant is timed in every round, the
order rotating each round; each ratio is the median of the per-round ratios, with their range.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
from gateway import _process
from httpx_aiohttp import AiohttpTransport
from modelir import Model, build_request
from modelir.http.executor import Executor
from modelir.http.sessions import aiohttp_session
from modelir.transports.openai.chat import OpenAIChat

HERE = Path(__file__).resolve().parent
Call = Callable[[], Awaitable[object]]


def _floor(session_box: list[aiohttp.ClientSession], url: str, prompt: str, top_logprobs: int | None) -> Call:
    """One call as a hand-written client makes it: a JSON body, a POST, `orjson.loads` of the answer."""

    async def call() -> object:
        body: dict = {"model": "bench-model", "messages": [{"role": "user", "content": prompt}], "max_tokens": 16}
        if top_logprobs is not None:
            body |= {"logprobs": True, "top_logprobs": top_logprobs, "max_tokens": 2000}
        headers = {"content-type": "application/json"}
        async with session_box[0].post(url, data=orjson.dumps(body), headers=headers) as answer:
            return orjson.loads(await answer.read())

    return call


def _served_gc(call: Call) -> Call:
    """`call` under the GC thresholds `modelir serve` sets (`server.app.tune_gc`, without its freeze)."""

    async def wrapped() -> object:
        defaults = gc.get_threshold()
        gc.set_threshold(100_000, 50, 100)
        try:
            return await call()
        finally:
            gc.set_threshold(*defaults)

    return wrapped


def _gc_off(call: Call) -> Call:
    """`call` with the cyclic collector off: the floor a client that tunes its GC would reach."""

    async def wrapped() -> object:
        gc.disable()
        try:
            return await call()
        finally:
            gc.enable()

    return wrapped


async def _measure(base: str, calls: dict[str, int], rounds: int) -> dict[str, dict[str, list[float]]]:
    small = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=16)
    big = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=2000, top_logprobs=20)
    session_box = [aiohttp.ClientSession()]
    executors = {
        "aiohttp": Executor(f"{base}/v1"),
        "httpx": Executor(f"{base}/v1", transport=AiohttpTransport(client=lambda: aiohttp_session(256))),
        "aiohttp big": Executor(f"{base}/big/v1"),
        "httpx big": Executor(f"{base}/big/v1", transport=AiohttpTransport(client=lambda: aiohttp_session(256))),
    }
    models = {
        name: Model(OpenAIChat(provider_model="bench-model"), name="bench", executor=e) for name, e in executors.items()
    }
    cases: dict[str, dict[str, Call]] = {
        "small": {
            "floor": _floor(session_box, f"{base}/v1/chat/completions", "Hello!", None),
            "modelir": lambda: models["aiohttp"].arun(small),
            "modelir on httpx": lambda: models["httpx"].arun(small),
        },
        "big": {
            "floor": _floor(session_box, f"{base}/big/v1/chat/completions", "Hello!", 20),
            "modelir": lambda: models["aiohttp big"].arun(big),
            "modelir on httpx": lambda: models["httpx big"].arun(big),
            "modelir, GC as served": _served_gc(lambda: models["aiohttp big"].arun(big)),
            "floor with its GC off": _gc_off(_floor(session_box, f"{base}/big/v1/chat/completions", "Hello!", 20)),
        },
    }
    results: dict[str, dict[str, list[float]]] = {case: {v: [] for v in variants} for case, variants in cases.items()}
    try:
        for variants in cases.values():  # warm: connections, caches, imports
            for call in variants.values():
                for _ in range(3):
                    await call()
        for index in range(rounds):
            for case, variants in cases.items():
                labels = list(variants)
                shift = index % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    call = variants[label]
                    start = time.process_time()
                    for _ in range(calls[case]):
                        await call()
                    results[case][label].append((time.process_time() - start) / calls[case])
    finally:
        await session_box[0].close()
        for executor in executors.values():
            await executor.aclose()
    return results


def run(rounds: int = 5, small_calls: int = 1500, big_calls: int = 12) -> list[tuple[str, str, str]]:
    """Measured in a fresh interpreter: what ran before in this one (another case's GC settings, its heap) would
    change what the collector costs here."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), str(rounds), str(small_calls), str(big_calls)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [tuple(row) for row in json.loads(done.stdout)]


def _rows(rounds: int, small_calls: int, big_calls: int) -> list[tuple[str, str, str]]:
    with _process([sys.executable, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (port, _):
        results = asyncio.run(_measure(f"http://127.0.0.1:{port}", {"small": small_calls, "big": big_calls}, rounds))
    rows = []
    titles = {"small": "small chat", "big": "2,000 tokens x top-20 logprobs"}
    targets = {"small": 1.5, "big": 0.8}
    for case, variants in results.items():
        floor = variants["floor"]
        unit, scale = ("us", 1e6) if case == "small" else ("ms", 1e3)
        for label, times in variants.items():
            if label == "floor":
                continue
            ratios = [t / f for t, f in zip(times, floor, strict=True)]
            target = f", target <= {targets[case]}x" if label == "modelir" else ""
            rows.append(
                (
                    f"in-process {label}, {titles[case]}: client CPU per call vs raw aiohttp + orjson",
                    f"{statistics.median(times) * scale:.0f} {unit} vs {statistics.median(floor) * scale:.0f} {unit}",
                    f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f} over {rounds} rounds"
                    f"{target})",
                )
            )
    return rows


if __name__ == "__main__":
    print(json.dumps(_rows(*(int(a) for a in sys.argv[1:4]))))
