"""A local OTLP/gRPC receiver for tests (127.0.0.1 only): it keeps every span and metric exported to it.

It is the collector's receiving side and nothing more, built on the generated OTLP services of
`opentelemetry-proto`, so a real OTLP exporter (in this process or another) can be pointed at it.
"""

from __future__ import annotations

import asyncio

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    async def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = next(
                (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"), ""
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.receiver.spans.append((service, span))
        self.receiver.arrived.set()
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    async def Export(self, request, context):
        for resource_metrics in request.resource_metrics:
            for scope_metrics in resource_metrics.scope_metrics:
                self.receiver.metrics.extend(scope_metrics.metrics)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class OtlpReceiver:
    """`async with OtlpReceiver() as receiver:` then export to `receiver.endpoint` (`http://127.0.0.1:<port>`)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, trace_pb2.Span]] = []  # (service.name, span)
        self.metrics: list = []
        self.arrived = asyncio.Event()

    async def __aenter__(self) -> OtlpReceiver:
        self.server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(self), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.server.stop(None)

    async def wait_for(self, predicate, seconds: float = 20.0) -> None:
        """Wait until `predicate(self.spans)` holds, at most `seconds`."""
        try:
            async with asyncio.timeout(seconds):
                while True:
                    self.arrived.clear()  # before looking, so that an export landing meanwhile wakes the wait
                    if predicate(self.spans):
                        return
                    await self.arrived.wait()
        except TimeoutError:
            names = sorted({(service, s.name) for service, s in self.spans})
            raise AssertionError(f"the spans did not arrive in {seconds} s; got {names}") from None
