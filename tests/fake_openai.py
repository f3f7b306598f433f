"""A local OpenAI-compatible chat server for tests and benchmarks (127.0.0.1 only).

It answers `/v1/chat/completions` unary or as SSE with the same content, so streamed and unary results can be
compared. Behaviour knobs: `fail_first` (statuses to answer before succeeding), `delay` (seconds before
answering), `cut_stream` (close the connection after the first content chunk).
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

ANSWER = ["Hel", "lo", " world", "!"]


def completion_body(model: str) -> dict:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(ANSWER)},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": len(ANSWER), "total_tokens": 7 + len(ANSWER)},
    }


def _chunk(model: str, delta: dict, finish=None, usage=None, choices=True) -> bytes:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if choices else [],
        "usage": usage,
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class FakeOpenAI:
    def __init__(self) -> None:
        self.fail_first: list[int] = []
        self.delay = 0.0
        self.cut_stream = False
        self.body_override: dict | None = None  # answer this body (unary) instead of the usual one
        self.requests: list[tuple[dict, dict]] = []  # (headers, body)
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        self.started.set()
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        if self.fail_first:
            status = self.fail_first.pop(0)
            return web.json_response(
                {"error": {"message": "slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
                status=status,
                headers={"retry-after": "0.2", "x-request-id": self._request_id()},
            )
        model = body["model"]
        if not body.get("stream"):
            return web.json_response(
                self.body_override or completion_body(model),
                headers={"x-request-id": self._request_id(), "set-cookie": "session=secret; HttpOnly"},
            )
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "x-request-id": self._request_id(), "set-cookie": "s=1"}
        )
        await response.prepare(request)
        await response.write(_chunk(model, {"role": "assistant", "content": ""}))
        for piece in ANSWER:
            await response.write(_chunk(model, {"content": piece}))
            if self.cut_stream:
                request.transport.close()
                return response
        await response.write(_chunk(model, {}, finish="stop"))
        usage = {"prompt_tokens": 7, "completion_tokens": len(ANSWER), "total_tokens": 7 + len(ANSWER)}
        await response.write(_chunk(model, {}, usage=usage, choices=False))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _request_id(self) -> str:
        """The provider's id for the request being answered, as OpenAI sends it (`x-request-id`)."""
        return f"req-fake-{len(self.requests)}"

    async def __aenter__(self) -> FakeOpenAI:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self.runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        return self

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


async def _run_offline(programs: list[str]) -> int:
    """Each program in turn, talking to this fake instead of OpenAI (`OPENAI_BASE_URL`, a made-up key); the rest of
    the environment is the caller's. Returns how many failed."""
    import os
    import sys

    failed = 0
    async with FakeOpenAI() as fake:
        env = os.environ | {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-offline"}
        for program in programs:
            print(f"==> {program}", flush=True)
            process = await asyncio.create_subprocess_exec(sys.executable, program, env=env)
            if await process.wait() != 0:
                print(f"==> {program} failed with status {process.returncode}", file=sys.stderr, flush=True)
                failed += 1
    return failed


if __name__ == "__main__":
    # The examples offline: `python -m tests.fake_openai examples/*.py` runs each program against this fake.
    import sys

    if len(sys.argv) < 2:
        sys.exit("usage: python -m tests.fake_openai PROGRAM.py [PROGRAM.py ...]  (runs each against this fake)")
    sys.exit(1 if asyncio.run(_run_offline(sys.argv[1:])) else 0)
