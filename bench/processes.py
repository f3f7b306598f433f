"""Helper processes for the gateway benchmark: an instant OpenAI-style upstream and a bare gRPC echo server.

Each runs in its own process (so it does not share the benchmark client's interpreter lock) and prints
`READY <port>` once it listens on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import sys

import orjson


def upstream() -> None:
    from aiohttp import web

    body = orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": "bench-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
    )

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
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


def _run(coro) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(coro)


if __name__ == "__main__":
    {"upstream": upstream, "echo": echo}[sys.argv[1]]()
