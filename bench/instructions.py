"""Telemetry's cost counted in instructions: `modelir serve` under valgrind (callgrind), the same sequential requests
with telemetry off and on, the instructions the server executes per request counted over those requests only.

Why next to the timed gateway rows: on a shared 2-core VM the throughput ratio of the same code spreads by +-10% from
round to round, more than what a change to telemetry's cost moves it by. The instruction count repeats far closer: two
runs of the same code mostly agree within 2 k a request, sometimes 10 k (the gRPC poller thread's share depends on
timing), so compare two runs of each side when a change is worth less than that; the timed rows stay the target
(instructions leave out the kernel's share of a request, about a third of its time here).

Run alone with `python bench/instructions.py`, or through `make bench` (skipped when valgrind is not installed).
`python bench/instructions.py OTHER/python/src` counts another tree's gateway beside this one's instead (telemetry
off, each counted twice in turn): a before/after for work on the request path (#37).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from gateway import _process, _setup
from modelir.v1 import service_pb2_grpc
from telemetry import traced_environment

HERE = Path(__file__).resolve().parent


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


async def _requests(target: str, request, count: int) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.ModelServiceStub(channel)
        for _ in range(count):
            await stub.Generate(request)


# Spans are exported in batches of 510 (three spans a request) and never on a timer, metrics not at all while
# counting: each counted request then pays for the export of exactly its own spans, and nothing depends on timing.
_SPANS_PER_REQUEST = 3
_BATCH = 510
_DETERMINISTIC_EXPORT = {
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": str(_BATCH),
    "OTEL_BSP_SCHEDULE_DELAY": "600000",
    "OTEL_METRIC_EXPORT_INTERVAL": "600000",
}


def _count(serve: list[str], env: dict[str, str], request, requests: int, workdir: Path) -> float:
    """Instructions per request of `modelir serve` under callgrind: started with counting off, warmed with one
    batch of spans' worth of requests, then counted over `requests` sequential requests (a whole number of batches;
    sequential: how many requests share an event-loop turn would otherwise change what each one costs)."""
    out = workdir / "callgrind.out"
    log = (workdir / "serve.log").open("w+")
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", *serve]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300
        port = None
        while port is None:
            if time.monotonic() > deadline or server.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"modelir serve under valgrind was not ready:\n{log.read()[-2000:]}")
            time.sleep(0.5)
            log.seek(0)
            found = re.search(r"on 127\.0\.0\.1:(\d+)", log.read())
            port = found and found.group(1)
        target = f"127.0.0.1:{port}"
        # Connections, caches, the exporters' channels, and the first batch of spans exported.
        asyncio.run(_requests(target, request, _BATCH // _SPANS_PER_REQUEST))
        time.sleep(3)
        subprocess.run(["callgrind_control", "--instr=on", str(server.pid)], check=True, capture_output=True)
        asyncio.run(_requests(target, request, requests))
        time.sleep(3)  # the last batch's export, which the last request sets off, finishes inside the count
        subprocess.run(["callgrind_control", "--instr=off", str(server.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "--dump", str(server.pid)], check=True, capture_output=True)
        dumps = sorted(workdir.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
        totals = re.search(r"^totals: (\d+)", dumps[-1].read_text(), re.MULTILINE)
        if totals is None:
            raise RuntimeError(f"no totals in {dumps[-1]}")
        return int(totals.group(1)) / requests
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(120)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
        for dump in workdir.glob("callgrind.out*"):
            dump.unlink()


def run(requests: int = 2 * _BATCH // _SPANS_PER_REQUEST) -> list[tuple[str, str, str]]:
    if not available():
        return [("gateway instructions per request, telemetry on vs off", "skipped: valgrind is not installed", "")]
    python, request = sys.executable, _setup()
    quiet = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    quiet["PYTHONHASHSEED"] = "0"
    quiet.update(_DETERMINISTIC_EXPORT)  # read only when telemetry is on
    with (
        _process([python, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (upstream_port, _),
        _process([python, str(HERE / "processes.py"), "otlp_sink"], r"READY (\d+)") as (sink_port, _),
        tempfile.TemporaryDirectory() as workdir,
    ):
        config = Path(workdir) / "bench.yaml"
        config.write_text(
            f"models:\n  bench:\n    transport: openai_chat\n    base_url: http://127.0.0.1:{upstream_port}/v1\n"
            "    provider_model: bench-model\n"
        )
        serve = [python, "-m", "modelir.cli", "serve", "--config", str(config), "--port", "0"]
        traced = traced_environment(quiet, sink_port)
        variants = {
            "off": quiet,
            "metrics only": {**traced, "OTEL_TRACES_EXPORTER": "none"},
            "metrics + traces, none kept": {**traced, "OTEL_TRACES_SAMPLER_ARG": "0"},
            "metrics + every trace": {**traced, "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
            "metrics + every trace, the opt-in encoder": {
                **traced,
                "OTEL_TRACES_SAMPLER": "parentbased_always_on",
                "MODELIR_OTLP_FAST_SPANS": "true",
            },
        }
        counted = {label: _count(serve, env, request, requests, Path(workdir)) for label, env in variants.items()}
    off = counted["off"]
    none_kept, every = counted["metrics + traces, none kept"], counted["metrics + every trace"]
    # Which requests a 10% sampler keeps depends on random trace ids: its expected cost, from the two ends.
    counted["metrics + 10% of traces (the default), expected"] = none_kept + 0.1 * (every - none_kept)
    fast = counted["metrics + every trace, the opt-in encoder"]
    counted["metrics + 10% of traces, the opt-in encoder, expected"] = none_kept + 0.1 * (fast - none_kept)
    return [
        (
            f"gateway instructions per request (callgrind, {requests} sequential requests): {label}",
            f"{count / 1e6:.3f} M (+{(count - off) / 1e3:.0f} k)" if label != "off" else f"{count / 1e6:.3f} M",
            f"{off / count:.3f}x of off" if label != "off" else "",
        )
        for label, count in counted.items()
    ]


def run_versions(
    other_src: str, requests: int = 2 * _BATCH // _SPANS_PER_REQUEST, repeats: int = 2
) -> list[tuple[str, str, str]]:
    """The gateway of another modelir tree (its `python/src`, on this virtual environment) against this one's, both
    with telemetry off, counted in turn `repeats` times: a before/after that the machine's load does not move."""
    python, request = sys.executable, _setup()
    quiet = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    quiet["PYTHONHASHSEED"] = "0"
    trees = {"this tree": quiet, "other tree": {**quiet, "PYTHONPATH": str(Path(other_src).resolve())}}
    counted: dict[str, list[float]] = {label: [] for label in trees}
    with (
        _process([python, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (upstream_port, _),
        tempfile.TemporaryDirectory() as workdir,
    ):
        config = Path(workdir) / "bench.yaml"
        config.write_text(
            f"models:\n  bench:\n    transport: openai_chat\n    base_url: http://127.0.0.1:{upstream_port}/v1\n"
            "    provider_model: bench-model\n"
        )
        serve = [python, "-m", "modelir.cli", "serve", "--config", str(config), "--port", "0"]
        for _ in range(repeats):
            for label, env in trees.items():
                counted[label].append(_count(serve, env, request, requests, Path(workdir)))
    this, other = min(counted["this tree"]), min(counted["other tree"])
    return [
        (
            f"gateway instructions per request (callgrind, {requests} sequential requests, telemetry off): {label}",
            " / ".join(f"{c / 1e6:.3f} M" for c in counts),
            f"{this / other:.3f}x of {other_src}" if label == "this tree" else "",
        )
        for label, counts in counted.items()
    ]


if __name__ == "__main__":
    if len(sys.argv) > 1:  # python bench/instructions.py OTHER_TREE/python/src: before/after, telemetry off
        rows = run_versions(sys.argv[1])
    else:
        rows = run()
    for case, measured, ratio in rows:
        print(f"{case}  {measured}  |  {ratio}")
