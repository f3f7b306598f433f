"""A local OTLP/gRPC receiver for tests (127.0.0.1 only): it keeps every span and metric exported to it.

It is the collector's receiving side and nothing more, built on the generated OTLP services of
`opentelemetry-proto`, so a real OTLP exporter (in this process or another) can be pointed at it.
"""

from __future__ import annotations

import asyncio
import gzip

import grpc
from aiohttp import web
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
    """`async with OtlpReceiver() as receiver:` then export to `receiver.endpoint` (OTLP/gRPC) or
    `receiver.http_endpoint` (OTLP/HTTP), both `http://127.0.0.1:<port>`."""

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
        self.endpoint = f"http://127.0.0.1:{self.port}"  # OTLP/gRPC
        # OTLP/HTTP with protobuf bodies: POST /v1/traces and /v1/metrics.
        app = web.Application()
        app.router.add_post("/v1/traces", self._http_traces)
        app.router.add_post("/v1/metrics", self._http_metrics)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.http_endpoint = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()
        await self.server.stop(None)

    async def _http_traces(self, request: web.Request) -> web.Response:
        message = trace_service_pb2.ExportTraceServiceRequest.FromString(await self._body(request))
        await _Traces(self).Export(message, None)
        body = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def _http_metrics(self, request: web.Request) -> web.Response:
        message = metrics_service_pb2.ExportMetricsServiceRequest.FromString(await self._body(request))
        await _Metrics(self).Export(message, None)
        body = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    @staticmethod
    async def _body(request: web.Request) -> bytes:
        body = await request.read()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        return body

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
