"""The gateway case: modelir's gRPC server in front of an instant local upstream, measured side by side with a
bare grpc.aio echo server (the ceiling for Python gRPC here), the floor gateway (grpc.aio + raw aiohttp, no
modelir logic) and a direct HTTP call to the upstream."""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport
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


async def _grpc_load(target: str, request, in_flight: int, seconds: float) -> tuple[float, list[float]]:
    """Requests per second with `in_flight` concurrent callers, and every call's latency in seconds."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.ModelServiceStub(channel)
        await stub.Generate(request)  # warm the connection
        stop = time.perf_counter() + seconds

        async def worker():
            while time.perf_counter() < stop:
                start = time.perf_counter()
                await stub.Generate(request)
                latencies.append(time.perf_counter() - start)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return len(latencies) / (time.perf_counter() - started), latencies


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve_load(target: str, pid: int, request, in_flight: int, seconds: float) -> tuple[float, float]:
    """(requests per second, server CPU microseconds per request) under `in_flight` concurrent callers."""
    before = _cpu_seconds(pid)
    rate, latencies = asyncio.run(_grpc_load(target, request, in_flight, seconds))
    return rate, (_cpu_seconds(pid) - before) / len(latencies) * 1e6


async def _http_load(url: str, body: bytes, seconds: float) -> list[float]:
    latencies = []
    async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
        await client.post(url, content=body)
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            start = time.perf_counter()
            (await client.post(url, content=body, headers={"content-type": "application/json"})).raise_for_status()
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


def run(seconds: float = 4.0, in_flight: int = 64) -> list[tuple[str, str, str]]:
    python, request = sys.executable, _setup()
    with _process([python, str(HERE / "processes.py"), "echo"], r"READY (\d+)") as (echo_port, pid):
        echo_rate, echo_cpu = _serve_load(f"127.0.0.1:{echo_port}", pid, request, in_flight, seconds)
    with _process([python, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (upstream_port, _):
        base_url = f"http://127.0.0.1:{upstream_port}/v1"
        floor_args = [python, str(HERE / "processes.py"), "floor", f"{base_url}/chat/completions"]
        with _process(floor_args, r"READY (\d+)") as (floor_port, pid):
            floor_rate, floor_cpu = _serve_load(f"127.0.0.1:{floor_port}", pid, request, in_flight, seconds)
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as config:
            config.write(
                f"models:\n  bench:\n    transport: openai_chat\n    base_url: {base_url}\n"
                "    provider_model: bench-model\n"
            )
        try:
            serve = [python, "-m", "modelir.cli", "serve", "--config", config.name, "--port", "0"]
            with _process(serve, r"on 127\.0\.0\.1:(\d+)") as (gateway_port, pid):
                target = f"127.0.0.1:{gateway_port}"
                gateway_rate, gateway_cpu = _serve_load(target, pid, request, in_flight, seconds)
                _, one_latencies = asyncio.run(_grpc_load(target, request, 1, seconds))
        finally:
            os.unlink(config.name)
        body = orjson.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "Hello!"}]})
        direct = asyncio.run(_http_load(f"{base_url}/chat/completions", body, seconds))
    p50_gateway = statistics.median(one_latencies) * 1e3
    p50_direct = statistics.median(direct) * 1e3
    return [
        (
            f"bare grpc.aio echo, {in_flight} in flight (ceiling)",
            f"{echo_rate:,.0f} req/s, {echo_cpu:.0f} us server CPU/req",
            "1.00x",
        ),
        (
            f"floor gateway (grpc.aio + raw aiohttp, no modelir logic), {in_flight} in flight",
            f"{floor_rate:,.0f} req/s, {floor_cpu:.0f} us server CPU/req",
            f"{floor_rate / echo_rate:.2f}x of the ceiling",
        ),
        (
            f"modelir gateway -> instant upstream, {in_flight} in flight",
            f"{gateway_rate:,.0f} req/s, {gateway_cpu:.0f} us server CPU/req",
            f"{gateway_rate / echo_rate:.2f}x of the ceiling (target >= 0.65x); "
            f"{gateway_rate / floor_rate:.2f}x the floor",
        ),
        (
            "added p50 latency at 1 in flight",
            f"gateway {p50_gateway:.2f} ms vs direct {p50_direct:.2f} ms",
            f"+{p50_gateway - p50_direct:.2f} ms (target <= 1 ms)",
        ),
    ]
