"""The telemetry cases: the gateway with telemetry on (OTLP/gRPC to a local sink through the SDK's batch span
processor: every trace kept, 10% kept, and 10% with the opt-in span encoder) against the same gateway with telemetry
off, measured side by side in interleaved rounds; the hooks in process; and the access-log line against the
`logging` line it replaced.

Run alone with `python bench/telemetry.py`, or through `make bench`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gateway import _cpu_seconds, _grpc_load, _process, _serve_load, _setup
from timing import paired

HERE = Path(__file__).resolve().parent


def traced_environment(base: dict[str, str], sink_port: str) -> dict[str, str]:
    """`base` with traces and metrics exported over OTLP/gRPC to the local sink on `sink_port`."""
    return {
        **base,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
    }


def run_gateway(seconds: float = 3.0, in_flight: int = 64, rounds: int = 10) -> list[tuple[str, str, str]]:
    """The gateway with telemetry on (batch span processor, OTLP/gRPC exporters to a local sink), every trace kept
    and 10% of traces kept, against the same gateway with telemetry off. All three serve at once and are loaded in
    turn, the order rotating every round, so every side of a ratio sees the same machine; each ratio is the median
    of the per-round ratios."""
    python, request = sys.executable, _setup()
    quiet = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with (
        _process([python, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (upstream_port, _),
        _process([python, str(HERE / "processes.py"), "otlp_sink"], r"READY (\d+)") as (sink_port, _),
        tempfile.NamedTemporaryFile("w", suffix=".yaml") as config,
    ):
        config.write(
            f"models:\n  bench:\n    transport: openai_chat\n    base_url: http://127.0.0.1:{upstream_port}/v1\n"
            "    provider_model: bench-model\n"
        )
        config.flush()
        serve = [python, "-m", "modelir.cli", "serve", "--config", config.name, "--port", "0"]
        traced = traced_environment(quiet, sink_port)
        # `modelir serve`'s default sampler keeps 10% of the traces that start at the server.
        variants = {
            "off": quiet,
            "every trace": {**traced, "OTEL_TRACES_SAMPLER": "parentbased_always_on"},
            "10% of traces (the default)": traced,
            "10% of traces, the opt-in encoder": {**traced, "MODELIR_OTLP_FAST_SPANS": "true"},
        }
        ready = r"on 127\.0\.0\.1:(\d+)"
        with contextlib.ExitStack() as stack:
            servers = {label: stack.enter_context(_process(serve, ready, env)) for label, env in variants.items()}
            targets = {label: (f"127.0.0.1:{port}", pid) for label, (port, pid) in servers.items()}
            for target, _ in targets.values():  # warm every server (connections, caches, the exporter's channel)
                asyncio.run(_grpc_load(target, request, in_flight, 1.0))
            labels = list(variants)
            rates: dict[str, list[float]] = {label: [] for label in labels}
            cpus: dict[str, list[float]] = {label: [] for label in labels}
            ratios: dict[str, list[float]] = {label: [] for label in labels}
            for round_index in range(rounds):
                measured = {}
                turn = round_index % len(labels)
                for label in labels[turn:] + labels[:turn]:
                    rate, cpu = _serve_load(*targets[label], request, in_flight, seconds)
                    _settle(targets[label][1])
                    measured[label] = rate
                    rates[label].append(rate)
                    cpus[label].append(cpu)
                for label in labels:
                    ratios[label].append(measured[label] / measured["off"])
    off_rate, off_cpu = statistics.median(rates["off"]), statistics.median(cpus["off"])
    rows = []
    for label in labels[1:]:
        ratio = ratios[label]
        cpu = statistics.median(cpus[label])
        rows.append(
            (
                f"modelir gateway, telemetry on ({label}, OTLP to a local sink) vs off, {in_flight} in flight",
                f"{statistics.median(rates[label]):,.0f} req/s ({cpu:.0f} us CPU/req) "
                f"vs {off_rate:,.0f} req/s ({off_cpu:.0f} us)",
                # The CPU ratio is the throughput a CPU-bound server keeps; it moves far less with the machine's
                # other load than the throughput ratio does.
                f"{statistics.median(ratio):.3f}x (target >= 0.95x); {rounds} rounds "
                f"{min(ratio):.3f}-{max(ratio):.3f}; by CPU per request {off_cpu / cpu:.3f}x",
            )
        )
    return rows


def _settle(pid: int, quiet_seconds: float = 0.2, limit: float = 5.0) -> None:
    """Wait until the server `pid` is idle (no CPU tick over `quiet_seconds`), at most `limit` seconds: a server
    that keeps every trace is still exporting the spans of its load after it, and that work must not land in the
    next server's turn (the one after it in the rotation would pay for it)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = _cpu_seconds(pid)
        time.sleep(quiet_seconds)
        if _cpu_seconds(pid) - before < 0.01:  # under one clock tick
            return


def run_access_log(repeat: int = 15, lines: int = 20_000) -> list[tuple[str, str, str]]:
    """The access log's cost per line against a `logging` line with the same fields (what it replaced), both
    written to memory, timed in alternation."""
    from modelir.telemetry.access_log import AccessLog

    rows = []
    for fmt in ("text", "json"):
        log = AccessLog(io.BytesIO(), fmt=fmt, max_buffered_bytes=1 << 30)
        logger = logging.getLogger(f"bench.access.{fmt}")
        handler = logging.StreamHandler(io.StringIO())
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)

        def buffered(log=log) -> None:
            for _ in range(lines):
                log.write("Generate", "bench", "openai_chat", "OK", 0.00123, 5, 2, "ab" * 16)
            log.flush()

        def logged(logger=logger) -> None:
            for _ in range(lines):
                logger.info(
                    "%s model=%s transport=%s status=%s latency_ms=%.1f input_tokens=%s output_tokens=%s trace_id=%s",
                    "Generate",
                    "bench",
                    "openai_chat",
                    "OK",
                    1.23,
                    5,
                    2,
                    "ab" * 16,
                )

        ours, theirs, ratio = paired(buffered, logged, repeat)
        rows.append(
            (
                f"access-log line ({fmt}) vs a `logging` line with the same fields",
                f"{ours / lines * 1e6:.2f} us vs {theirs / lines * 1e6:.2f} us per line",
                f"{ratio:.3f}x (target: a few us)",
            )
        )
    return rows


def run_hooks(rounds: int = 5, calls: int = 3000) -> list[tuple[str, str, str]]:
    """The CPU of the telemetry hooks one served `Generate` runs (RPC, model call, HTTP attempt) plus the export
    encoding of the spans they leave, in this process, per call: metrics only, 10% of traces, every trace. The
    variants alternate round by round; steadier than the gateway rows, since no other process shares the cores."""
    import time

    import httpx
    from modelir import build_request, telemetry
    from modelir.telemetry import access_log
    from modelir.telemetry.meter import AggregatingMeter
    from modelir.telemetry.otlp import FastOTLPSpanExporter
    from modelir.v1 import response_pb2
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    class _Model:  # what the hooks read of a `Model` with an HTTP executor
        name = "bench"

        class transport:
            name = "openai_chat"

        class executor:
            base_url = "http://127.0.0.1:8000/v1"

    class _Context:  # what the server hook reads of a gRPC servicer context
        def invocation_metadata(self):
            return (("user-agent", "grpc-python"),)

        def set_trailing_metadata(self, metadata) -> None:
            pass

    request = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=16)
    response = response_pb2.Response(id="chatcmpl-bench", model="bench-model")
    response.choices.add().finish_reason = response_pb2.FINISH_REASON_STOP
    response.usage.input_token_count, response.usage.output_token_count = 5, 2
    response.timing.attempt_count = 1
    response.timing.queue_duration.FromNanoseconds(3000)
    http = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions", headers={"content-type": "x"})
    model, context = _Model(), _Context()

    def one() -> None:
        with telemetry.server_call("Generate", "bench", context, request) as rpc:
            rpc.transport = "openai_chat"
            with telemetry.model_call(model, request) as call:
                with telemetry.http_attempt(http, 1) as attempt:
                    attempt.answered(200, {"x-request-id": "req-1"})
                rpc.answered(call.finish(response))

    def providers(sampler, sdk_meter: bool = False, fast: bool = False):
        # `modelir serve` measures with its aggregating meter; the SDK's instruments are what a library user's
        # own meter provider costs.
        if sdk_meter:
            meters = MeterProvider(metric_readers=[InMemoryMetricReader()], exemplar_filter=AlwaysOffExemplarFilter())
        else:
            meters = AggregatingMeter()
        if sampler is None:
            return None, None, meters
        # `modelir serve`'s exporter (the stock one, or the opt-in encoder), never reached: nothing is sent.
        exporter = (FastOTLPSpanExporter if fast else OTLPSpanExporter)(endpoint="127.0.0.1:9", insecure=True)
        # The SDK's spans, batched with nothing sent: what a round leaves is encoded after it.
        processor = BatchSpanProcessor(
            exporter, max_queue_size=10**7, schedule_delay_millis=10**9, max_export_batch_size=10**7
        )
        tracers = TracerProvider(sampler=sampler)
        tracers.add_span_processor(processor)
        return tracers, processor, meters

    variants = {
        "metrics only, the SDK's instruments": providers(None, sdk_meter=True),
        "metrics only": providers(None),
        "metrics + traces, none kept": providers(ParentBased(TraceIdRatioBased(0.0))),
        "metrics + 10% of traces": providers(ParentBased(TraceIdRatioBased(0.1))),
        "metrics + every trace": providers(ParentBased(ALWAYS_ON)),
        "metrics + every trace, the opt-in encoder": providers(ParentBased(ALWAYS_ON), fast=True),
    }
    previous = access_log.access_log()
    access_log.configure("off")
    costs: dict[str, list[float]] = {label: [] for label in variants}
    try:
        for round_index in range(rounds + 1):
            for label, (tracers, processor, meters) in variants.items():
                telemetry.install(tracer_provider=tracers, meter_provider=meters)
                start = time.process_time()
                for _ in range(calls):
                    one()
                spent = time.process_time() - start
                if processor is not None:  # encode what this round left in the queue, as the exporter would
                    queue = processor._batch_processor._queue
                    spans = list(queue)
                    queue.clear()
                    start = time.process_time()
                    encoded = processor._batch_processor._exporter._translate_data(spans)
                    if not isinstance(encoded, bytes):  # the SDK's exporter: a message, serialised when sent
                        encoded.SerializeToString()
                    spent += time.process_time() - start
                if round_index:  # the first round warms the caches
                    costs[label].append(spent / calls * 1e6)
    finally:
        telemetry.install()
        access_log.configure(previous.fmt)
        for tracers, _, meters in variants.values():
            meters.shutdown()
            if tracers is not None:
                tracers.shutdown()
    return [
        (
            f"telemetry hooks of one served Generate, in-process: {label}",
            f"{statistics.median(cost):.0f} us CPU per call (rounds {min(cost):.0f}-{max(cost):.0f})",
            "against ~750 us of gateway CPU per request",
        )
        for label, cost in costs.items()
    ]


def run_served(rounds: int = 8, calls: int = 3000, in_flight: int = 64) -> list[tuple[str, str, str]]:
    """The servicer's `Generate` in this process, on a real `openai_chat` model calling the bench upstream (its own
    process) over aiohttp, telemetry off and on (the aggregating meter; no traces, 0%, 10% and every trace kept,
    spans exported over OTLP/gRPC to a local sink), the variants alternating in one process round by round. Each
    figure is the median of the per-round differences from off, in CPU microseconds per call: what the hooks cost
    among the rest of a served call's code, which is 2-3x what they cost in the tight loop of `run_hooks`."""
    import time

    from modelir import telemetry
    from modelir.config import build_config
    from modelir.server.servicer import ModelServicer
    from modelir.telemetry import access_log
    from modelir.telemetry.meter import AggregatingMeter
    from modelir.telemetry.otlp import FastOTLPSpanExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class _Context:  # what the servicer reads of a gRPC servicer context
        def time_remaining(self):
            return None

        def invocation_metadata(self):
            return (("user-agent", "grpc-python"),)

        def set_trailing_metadata(self, metadata) -> None:
            pass

    python, request = sys.executable, _setup()
    with (
        _process([python, str(HERE / "processes.py"), "upstream"], r"READY (\d+)") as (upstream_port, _),
        _process([python, str(HERE / "processes.py"), "otlp_sink"], r"READY (\d+)") as (sink_port, _),
    ):
        config = build_config(
            {
                "models": {
                    "bench": {
                        "transport": "openai_chat",
                        "base_url": f"http://127.0.0.1:{upstream_port}/v1",
                        "provider_model": "bench-model",
                    }
                }
            },
            source="bench",
            environ={},
        )
        servicer, context, meter = ModelServicer(config.models), _Context(), AggregatingMeter()

        def tracing(ratio: float, fast: bool = False):
            # `modelir serve`'s tracer provider: the SDK's, with the stock exporter or the opt-in encoder.
            exporter = (FastOTLPSpanExporter if fast else OTLPSpanExporter)(
                endpoint=f"127.0.0.1:{sink_port}", insecure=True
            )
            sampler = ParentBased(TraceIdRatioBased(ratio))
            provider = TracerProvider(sampler=sampler)
            provider.add_span_processor(BatchSpanProcessor(exporter))
            return provider

        variants: dict[str, dict] = {
            "off": {},
            "metrics only": {"meter_provider": meter},
            "metrics + traces, none kept": {"meter_provider": meter, "tracer_provider": tracing(0.0)},
            "metrics + 10% of traces": {"meter_provider": meter, "tracer_provider": tracing(0.1)},
            "metrics + every trace": {"meter_provider": meter, "tracer_provider": tracing(1.0)},
            "metrics + every trace, the opt-in encoder": {
                "meter_provider": meter,
                "tracer_provider": tracing(1.0, fast=True),
            },
        }

        async def load(count: int) -> None:
            left = [count]

            async def caller() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    await servicer.Generate(request, context)

            await asyncio.gather(*(caller() for _ in range(in_flight)))

        async def measure() -> dict[str, list[float]]:
            for installed in variants.values():  # warm each (connections, caches, the exporter's channel)
                telemetry.install(**installed)
                await load(500)
            costs: dict[str, list[float]] = {label: [] for label in variants}
            labels = list(variants)
            for round_index in range(rounds):
                for label in labels[round_index % len(labels) :] + labels[: round_index % len(labels)]:
                    telemetry.install(**variants[label])
                    start = time.process_time()
                    await load(calls)
                    costs[label].append((time.process_time() - start) / calls * 1e6)
            return costs

        async def measured() -> dict[str, list[float]]:
            try:
                return await measure()
            finally:
                await config.aclose()  # the models' HTTP sessions

        previous = access_log.access_log()
        access_log.configure("off")
        try:
            costs = asyncio.run(measured())
        finally:
            telemetry.install()
            access_log.configure(previous.fmt)
            for installed in variants.values():
                if "tracer_provider" in installed:
                    installed["tracer_provider"].shutdown()
    off = costs["off"]
    rows = []
    for label, cost in list(costs.items())[1:]:
        added = [on - base for on, base in zip(cost, off, strict=True)]
        rows.append(
            (
                f"served Generate in-process, real upstream: {label} vs off",
                f"+{statistics.median(added):.0f} us CPU per call (rounds {min(added):.0f}..{max(added):.0f}) "
                f"on {statistics.median(off):.0f} us",
                "the hooks among a served call's code (the gateway adds gRPC's own ~350 us)",
            )
        )
    return rows


def run(seconds: float = 3.0) -> list[tuple[str, str, str]]:
    return [*run_access_log(), *run_hooks(), *run_served(), *run_gateway(seconds=seconds)]


if __name__ == "__main__":
    for case, measured, ratio in run():
        print(f"{case}  {measured}  |  {ratio}")
