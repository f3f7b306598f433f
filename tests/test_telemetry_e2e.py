"""End to end: a client with a trace context calls `modelir serve` (its own process, telemetry from `OTEL_*`
variables), which calls a local fake provider; every span, exported by real OTLP exporters into a receiver this
test runs on 127.0.0.1, belongs to one trace, and the server's metrics arrive too."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile

import pytest
from modelir import build_request, telemetry
from modelir.remote import RemoteModel
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.fake_openai import FakeOpenAI
from tests.otlp_receiver import OtlpReceiver

SERVER = trace_pb2.Span.SPAN_KIND_SERVER
CLIENT = trace_pb2.Span.SPAN_KIND_CLIENT


async def _start_server(config_path: str, receiver: OtlpReceiver, protocol: str):
    env = {
        **os.environ,
        "OTEL_SERVICE_NAME": "modelir-gateway",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint if protocol == "grpc" else receiver.http_endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "300",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "modelir.cli",
        "serve",
        "--config",
        config_path,
        "--port",
        "0",
        "--access-log",
        "json",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line, "modelir serve exited before it was ready"
        if " on 127.0.0.1:" in line:
            return process, int(line.rsplit(":", 1)[1])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
async def test_one_trace_from_the_client_through_the_server_to_the_provider(protocol):
    async with OtlpReceiver() as receiver, FakeOpenAI() as fake:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as config:
            config.write(
                f"models:\n  mini:\n    transport: openai_chat\n    base_url: {fake.base_url}\n"
                "    provider_model: gpt-4o-mini\n"
            )
        client_provider = TracerProvider(resource=Resource.create({"service.name": "test-client"}))
        client_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True))
        )
        telemetry.install(tracer_provider=client_provider)
        process, port = await _start_server(config.name, receiver, protocol)
        remote = RemoteModel(f"127.0.0.1:{port}", "mini")
        try:
            with client_provider.get_tracer("test").start_as_current_span("evaluate one item") as root:
                await remote.achat([("user", "hi")], max_output_tokens=8)
                [_ async for _ in remote.astream(build_request("mini", messages=[("user", "hi")]))]
            # The exporter thread sends to the receiver on this loop: flush from another thread.
            assert await asyncio.to_thread(client_provider.force_flush)

            def complete(spans) -> bool:
                names = [(service, s.name) for service, s in spans]
                return names.count(("modelir-gateway", "POST")) == 2 and ("test-client", "evaluate one item") in names

            await receiver.wait_for(complete)
            await asyncio.sleep(0.7)  # one more metric export interval
        finally:
            await remote.aclose()
            telemetry.install()
            client_provider.shutdown()
            process.send_signal(signal.SIGTERM)
            output = (await asyncio.wait_for(process.communicate(), 30))[0].decode()
            os.unlink(config.name)

    trace_id = root.get_span_context().trace_id.to_bytes(16, "big")
    spans = [span for _, span in receiver.spans]
    assert {s.trace_id for s in spans} == {trace_id}  # one trace, across two processes and the provider call
    by_id = {s.span_id: (service, s) for service, s in receiver.spans}

    def chain(span) -> list[tuple[str, str]]:
        names = []
        while True:
            service, span = by_id[span.span_id]
            names.append((service, span.name))
            if not span.parent_span_id:
                return names
            span = by_id[span.parent_span_id][1]

    attempts = [s for service, s in receiver.spans if s.name == "POST"]
    for attempt in attempts:
        assert chain(attempt) == [
            ("modelir-gateway", "POST"),
            ("modelir-gateway", "chat mini"),
            ("modelir-gateway", chain(attempt)[2][1]),
            ("test-client", "chat mini"),
            ("test-client", "evaluate one item"),
        ]
    server_spans = {by_id[by_id[a.parent_span_id][1].parent_span_id][1].name for a in attempts}
    assert server_spans == {"modelir.v1.ModelService/Generate", "modelir.v1.ModelService/StreamGenerate"}
    assert {by_id[a.parent_span_id][1].kind for a in attempts} == {CLIENT}
    assert all(by_id[by_id[a.parent_span_id][1].parent_span_id][1].kind == SERVER for a in attempts)
    # The provider got the attempt span as the parent of its request.
    sent = sorted(h["traceparent"].split("-")[2] for h, _ in fake.requests)
    assert sent == sorted(a.span_id.hex() for a in attempts)
    gateway_chat = [s for service, s in receiver.spans if service == "modelir-gateway" and s.name == "chat mini"]
    attributes = {a.key: a.value for a in gateway_chat[0].attributes}
    assert attributes["gen_ai.provider.name"].string_value == "openai"
    assert attributes["gen_ai.usage.output_tokens"].int_value == 4

    metric_names = {m.name for m in receiver.metrics}
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= metric_names
    assert "gen_ai.client.operation.time_to_first_chunk" in metric_names
    # The JSON access line of the call carries the same trace id.
    assert f'"trace_id":"{trace_id.hex()}"' in output
