"""The gateway case: modelir's gRPC server in front of an instant local upstream, measured side by side with a
bare grpc.aio echo server (the ceiling for Python gRPC here), the floor gateway (grpc.aio + raw aiohttp, no
modelir logic) and a direct HTTP call to the upstream."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import grpc
import orjson
from modelir import build_request
from modelir.v1 import service_pb2, service_pb2_grpc

HERE = Path(__file__).resolve().parent


@contextmanager
def _process(args: list[str], ready: str, env: dict[str, str] | None = None):
    """Run a helper process until the block ends; yields (the first group of `ready`, its pid) once ready.

    Output goes to a file, as a served gateway's log would: reading it through a pipe would charge every log
    line's wake-up of the reader to the benchmark.
    """
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                output.seek(0)
                match = re.search(ready, output.read())
                if match:
                    yield match.group(1), process.pid
                    return
                if process.poll() is not None:
                    break
                time.sleep(0.05)
            output.seek(0)
            raise RuntimeError(f"{args} was not ready:\n{output.read()[-2000:]}")
        finally:
            process.terminate()
            process.wait(10)


async def _grpc_load(
    target: str, request, in_flight: int, seconds: float, channels: int = 1
) -> tuple[float, list[float]]:
    """Requests per second with `in_flight` concurrent callers spread over `channels` connections, and every
    call's latency in seconds. Several connections let the kernel spread them over `--workers` processes."""
    latencies: list[float] = []
    # A local subchannel pool per channel: without it, grpc shares one connection between identical channels.
    options = [("grpc.use_local_subchannel_pool", 1)]
    opened = [grpc.aio.insecure_channel(target, options=options) for _ in range(channels)]
    try:
        stubs = [service_pb2_grpc.ModelServiceStub(channel) for channel in opened]
        for stub in stubs:
            await stub.Generate(request)  # warm the connection
        stop = time.perf_counter() + seconds

        async def worker(stub):
            while time.perf_counter() < stop:
                start = time.perf_counter()
                await stub.Generate(request)
                latencies.append(time.perf_counter() - start)

        started = time.perf_counter()
        await asyncio.gather(*(worker(stubs[i % channels]) for i in range(in_flight)))
        return len(latencies) / (time.perf_counter() - started), latencies
    finally:
        for channel in opened:
            await channel.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its children that are still running, all threads (Linux /proc):
    a `modelir serve --workers N` supervisor and its N workers."""
    total = 0.0
    for one in (pid, *_children(pid)):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return []
    return [int(child) for child in found]


def _serve_load(
    target: str, pid: int, request, in_flight: int, seconds: float, channels: int = 1
) -> tuple[float, float]:
    """(requests per second, server CPU microseconds per request) under `in_flight` concurrent callers."""
    before = _cpu_seconds(pid)
    rate, latencies = asyncio.run(_grpc_load(target, request, in_flight, seconds, channels))
    return rate, (_cpu_seconds(pid) - before) / len(latencies) * 1e6


async def _http_load(url: str, body: bytes, seconds: float) -> list[float]:
    latencies = []
    async with aiohttp.ClientSession() as session:
        headers = {"content-type": "application/json"}
        async with session.post(url, data=body, headers=headers) as answer:
            await answer.read()
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            start = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as answer:
                answer.raise_for_status()
                await answer.read()
            latencies.append(time.perf_counter() - start)
    return latencies


def _setup() -> service_pb2.GenerateRequest:
    """uvloop for the load client, when installed; the request every gateway case sends."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return service_pb2.GenerateRequest(
        request=build_request("bench", messages=[("user", "Hello!")], max_output_tokens=16)
    )


@contextmanager
def _config(base_url: str):
    """A configuration file with one `openai_chat` model `bench` on `base_url`; yields its path."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
        config.write(
            f"models:\n  bench:\n    transport: openai_chat\n    base_url: {base_url}\n"
            "    provider_model: bench-model\n"
        )
        config.flush()
        yield config.name


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def _rounds(targets: dict[str, tuple[str, int]], request, in_flight, seconds, rounds, channels=1):
    """Load every target in turn, the order rotating each round; per label the rates and CPU per request."""
    labels = list(targets)
    rates: dict[str, list[float]] = {label: [] for label in labels}
    cpus: dict[str, list[float]] = {label: [] for label in labels}
    for target, _ in targets.values():  # warm every server (connections, caches)
        asyncio.run(_grpc_load(target, request, in_flight, 1.0, channels))
    for index in range(rounds):
        shift = index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            rate, cpu = _serve_load(*targets[label], request, in_flight, seconds, channels)
            rates[label].append(rate)
            cpus[label].append(cpu)
    return rates, cpus


def run(seconds: float = 3.0, in_flight: int = 64, rounds: int = 5) -> list[tuple[str, str, str]]:
    """The echo ceiling, the floor gateway and modelir's gateway all serve at once and are loaded in turn (the order
    rotating each round); each ratio is the median of the per-round ratios, with their range. Then the added p50
    at 1 in flight, the gateway and a direct call alternating."""
    python, request = sys.executable, _setup()
    helper = [python, str(HERE / "processes.py")]
    with (
        _process([*helper, "upstream"], r"READY (\d+)") as (upstream_port, _),
        contextlib.ExitStack() as stack,
    ):
        base_url = f"http://127.0.0.1:{upstream_port}/v1"
        config = stack.enter_context(_config(base_url))
        serve = [python, "-m", "modelir.cli", "serve", "--config", config, "--port", "0"]
        servers = {
            "echo": stack.enter_context(_process([*helper, "echo"], r"READY (\d+)")),
            "floor": stack.enter_context(_process([*helper, "floor", f"{base_url}/chat/completions"], r"READY (\d+)")),
            "modelir": stack.enter_context(_process(serve, r"on 127\.0\.0\.1:(\d+)")),
        }
        targets = {label: (f"127.0.0.1:{port}", pid) for label, (port, pid) in servers.items()}
        rates, cpus = _rounds(targets, request, in_flight, seconds, rounds)
        gateway_target = targets["modelir"][0]
        body = orjson.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "Hello!"}]})
        one: list[float] = []
        direct: list[float] = []
        for index in range(rounds):  # alternating, so both sides see the same machine
            pair = [
                lambda: one.extend(asyncio.run(_grpc_load(gateway_target, request, 1, seconds / 2))[1]),
                lambda: direct.extend(asyncio.run(_http_load(f"{base_url}/chat/completions", body, seconds / 2))),
            ]
            for measure in pair[index % 2 :] + pair[: index % 2]:
                measure()
    per_round = {
        "modelir/floor": [g / f for g, f in zip(rates["modelir"], rates["floor"], strict=True)],
        "modelir/echo": [g / e for g, e in zip(rates["modelir"], rates["echo"], strict=True)],
        "floor/echo": [f / e for f, e in zip(rates["floor"], rates["echo"], strict=True)],
        "cpu modelir/floor": [g / f for g, f in zip(cpus["modelir"], cpus["floor"], strict=True)],
    }
    median = statistics.median
    p50_gateway, p50_direct = median(one) * 1e3, median(direct) * 1e3
    described = {
        label: f"{median(rates[label]):,.0f} req/s, {median(cpus[label]):.0f} us server CPU/req "
        f"({min(cpus[label]):.0f}-{max(cpus[label]):.0f})"
        for label in targets
    }
    return [
        (f"bare grpc.aio echo, {in_flight} in flight (ceiling)", described["echo"], "1.00x"),
        (
            f"floor gateway (grpc.aio + raw aiohttp, no modelir logic), {in_flight} in flight",
            described["floor"],
            f"{median(per_round['floor/echo']):.2f}x of the ceiling ({_spread(per_round['floor/echo'])})",
        ),
        (
            f"modelir gateway -> instant upstream, {in_flight} in flight",
            described["modelir"],
            f"{median(per_round['modelir/echo']):.2f}x of the ceiling ({_spread(per_round['modelir/echo'])}); "
            f"{median(per_round['modelir/floor']):.2f}x the floor's req/s "
            f"({_spread(per_round['modelir/floor'])}, target >= 0.9x)",
        ),
        (
            "modelir gateway server CPU per request against the floor's",
            f"{median(cpus['modelir']):.0f} us vs {median(cpus['floor']):.0f} us",
            f"{median(per_round['cpu modelir/floor']):.2f}x ({_spread(per_round['cpu modelir/floor'])}, "
            "target <= 1.2x)",
        ),
        (
            "added p50 latency at 1 in flight",
            f"gateway {p50_gateway:.2f} ms vs direct {p50_direct:.2f} ms",
            f"+{p50_gateway - p50_direct:.2f} ms (target <= 0.6 ms)",
        ),
    ]


def run_workers(
    workers: int = 2, seconds: float = 3.0, in_flight: int = 64, rounds: int = 4, channels: int = 8
) -> list[tuple[str, str, str]]:
    """`modelir serve` with one process and with `--workers N`, both serving at once on the same upstream, loaded
    in turn over `channels` connections (so the kernel can spread them over the workers); CPU per request summed
    over every process of a server."""
    python, request = sys.executable, _setup()
    with (
        _process([python, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (upstream_port, _),
        contextlib.ExitStack() as stack,
    ):
        config = stack.enter_context(_config(f"http://127.0.0.1:{upstream_port}/v1"))
        serve = [python, "-m", "modelir.cli", "serve", "--config", config, "--port", "0"]
        servers = {
            1: stack.enter_context(_process(serve, r"on 127\.0\.0\.1:(\d+)")),
            workers: stack.enter_context(
                _process([*serve, "--workers", str(workers)], rf"all {workers} workers serving on 127\.0\.0\.1:(\d+)")
            ),
        }
        targets = {str(n): (f"127.0.0.1:{port}", pid) for n, (port, pid) in servers.items()}
        rates, cpus = _rounds(targets, request, in_flight, seconds, rounds, channels)
    median = statistics.median
    one, many = str(1), str(workers)
    cpu_ratio = [m / o for m, o in zip(cpus[many], cpus[one], strict=True)]
    rate_ratio = [m / o for m, o in zip(rates[many], rates[one], strict=True)]
    return [
        (
            f"modelir serve, 1 process vs --workers {workers}, {in_flight} in flight over {channels} connections",
            f"{median(rates[one]):,.0f} vs {median(rates[many]):,.0f} req/s; server CPU/req "
            f"{median(cpus[one]):.0f} vs {median(cpus[many]):.0f} us",
            f"CPU/req {median(cpu_ratio):.2f}x ({_spread(cpu_ratio)}), req/s {median(rate_ratio):.2f}x "
            f"({_spread(rate_ratio)}); {os.cpu_count()} cores",
        )
    ]
