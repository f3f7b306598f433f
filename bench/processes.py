"""Helper processes for the gateway and in-process benchmarks: an instant OpenAI-style upstream (a small chat
answer, and a 2,000-token x top-20 one under `/big`), a bare gRPC echo server, and
the floor gateway (the least any Python gateway of this shape does per call).

Each runs in its own process (so it does not share the benchmark client's interpreter lock) and prints
`READY <port>` once it listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import sys

import orjson

# The upstream's small chat answer (`lift_instructions.py` lifts the same one).
SMALL_ANSWER = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1,
    "model": "bench-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


def upstream() -> None:
    from aiohttp import web

    body = orjson.dumps(SMALL_ANSWER)

    from run import openai_chat_body

    logprobs = openai_chat_body(2000, 20)  # what /big/v1/chat/completions answers: 2,000 tokens x top-20

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    async def handle_logprobs(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=logprobs, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        app.router.add_post("/big/v1/chat/completions", handle_logprobs)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        print("READY", site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    _run(main())


def echo() -> None:
    import grpc
    from modelir.v1 import content_pb2, response_pb2, service_pb2, service_pb2_grpc

    answer = service_pb2.GenerateResponse(
        response=response_pb2.Response(
            id="echo",
            model="echo",
            choices=[
                response_pb2.Choice(
                    message=content_pb2.Message(
                        role=content_pb2.ROLE_ASSISTANT, parts=[content_pb2.Part(text="Hello!")]
                    ),
                    finish_reason=response_pb2.FINISH_REASON_STOP,
                )
            ],
        )
    )

    class Echo(service_pb2_grpc.ModelServiceServicer):
        async def Generate(self, request, context):
            return answer

    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.server.max_pending_requests", 100_000)])
        service_pb2_grpc.add_ModelServiceServicer_to_server(Echo(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print("READY", port, flush=True)
        await server.wait_for_termination()

    _run(main())


def floor(upstream_url: str) -> None:
    """grpc.aio in front of raw aiohttp and orjson: no validation, capability check, limiter, retries or logging.

    What is left is the price of the shape itself (a gRPC call in, an HTTP call out, JSON both ways), so the
    gateway's gap to the echo ceiling splits into this floor and modelir's own work.
    """
    import aiohttp
    import grpc
    from modelir.v1 import content_pb2, response_pb2, service_pb2, service_pb2_grpc, stream_pb2

    class Floor(service_pb2_grpc.ModelServiceServicer):
        def __init__(self) -> None:
            self.session: aiohttp.ClientSession | None = None

        async def Generate(self, request, context):
            if self.session is None:
                self.session = aiohttp.ClientSession()
            prompt = request.request.conversation.messages[-1].parts[0].text
            body = orjson.dumps({"model": "bench-model", "messages": [{"role": "user", "content": prompt}]})
            headers = {"content-type": "application/json"}
            async with self.session.post(upstream_url, data=body, headers=headers) as answer:
                data = orjson.loads(await answer.read())
            choice = data["choices"][0]
            return service_pb2.GenerateResponse(
                response=response_pb2.Response(
                    id=data["id"],
                    model=data["model"],
                    choices=[
                        response_pb2.Choice(
                            message=content_pb2.Message(
                                role=content_pb2.ROLE_ASSISTANT,
                                parts=[content_pb2.Part(text=choice["message"]["content"])],
                            ),
                            finish_reason=response_pb2.FINISH_REASON_STOP,
                        )
                    ],
                )
            )

        async def StreamGenerate(self, request, context):
            """The least a Python stream gateway of this shape does: each upstream chunk's JSON parsed (it must
            know what a chunk holds), the text of what one read brought sent as one message, the usage at the end.
            No accounting, no per-chunk event, no coalescing task, no checks."""
            if self.session is None:
                self.session = aiohttp.ClientSession()
            prompt = request.request.conversation.messages[-1].parts[0].text
            limit = request.request.sampling.max_output_tokens
            body = {"model": "bench-model", "messages": [{"role": "user", "content": prompt}], "stream": True}
            body.update({"max_tokens": limit} if limit else {})
            headers = {"content-type": "application/json"}
            usage = None
            async with self.session.post(upstream_url, data=orjson.dumps(body), headers=headers) as answer:
                pending = b""
                async for data in answer.content.iter_any():
                    pending += data
                    *events, pending = pending.split(b"\n\n")
                    texts = []
                    for event in events:
                        payload = event.removeprefix(b"data: ")
                        if payload == b"[DONE]":
                            continue
                        chunk = orjson.loads(payload)
                        usage = chunk.get("usage") or usage
                        texts += [c["delta"].get("content") or "" for c in chunk["choices"]]
                    if text := "".join(texts):
                        yield service_pb2.StreamGenerateResponse(
                            event=stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(text=text))
                        )
            end = stream_pb2.StreamEnd()
            if usage:
                end.usage.output_token_count = usage["completion_tokens"]
            yield service_pb2.StreamGenerateResponse(event=stream_pb2.StreamEvent(end=end))

    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.server.max_pending_requests", 100_000)])
        service_pb2_grpc.add_ModelServiceServicer_to_server(Floor(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print("READY", port, flush=True)
        await server.wait_for_termination()

    _run(main())


def otlp_sink() -> None:
    """An OTLP/gRPC receiver that accepts every span and metric export and keeps nothing: the local collector
    the telemetry-on gateway exports to."""
    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        async def Export(self, request, context):
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        async def Export(self, request, context):
            return metrics_service_pb2.ExportMetricsServiceResponse()

    from aiohttp import web

    traces_answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
    metrics_answer = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()

    async def http_export(request: web.Request) -> web.Response:
        await request.read()
        answer = traces_answer if request.path == "/v1/traces" else metrics_answer
        return web.Response(body=answer, content_type="application/x-protobuf")

    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", http_export)
        app.router.add_post("/v1/metrics", http_export)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print("READY", port, site._server.sockets[0].getsockname()[1], flush=True)  # OTLP/gRPC, OTLP/HTTP
        await server.wait_for_termination()

    _run(main())


def _run(coro) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(coro)


if __name__ == "__main__":
    {"upstream": upstream, "echo": echo, "floor": floor, "otlp_sink": otlp_sink}[sys.argv[1]](*sys.argv[2:])
