"""A fault-injecting upstream on 127.0.0.1 that speaks the OpenAI chat, Anthropic, Gemini and Ollama wires.

The fault is chosen by the provider model id the request names (the `model` field of the body, or the model in a
Gemini path), so one server serves every case at once: `Model(OpenAIChat(provider_model="reset-mid-body"), ...)`.
A suffix after `~` names the caller (`reset-mid-body~7`), so concurrent cases count their own hits.
A healthy answer follows each provider's documented shape; each fault breaks it the way real networks, proxies and
providers do. `FAULTS` lists them; `Upstream.hits` counts requests per fault (to see retries).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass

from aiohttp import web

TEXT = ["Hel", "lo", " there"]

# name -> what the upstream does. Each is applied to unary and streamed calls alike.
FAULTS = {
    "ok": "a healthy answer",
    "429": "429 with no hint",
    "429-retry-after-1": "429 with Retry-After: 1",
    "429-retry-after-0": "429 with Retry-After: 0",
    "429-retry-after-huge": "429 with Retry-After: 86400",
    "429-retry-after-inf": "429 with Retry-After: inf",
    "429-ratelimit-reset-long": "429 with x-ratelimit-remaining-requests: 0 and a one-day reset",
    "500": "500 with a JSON error body",
    "503-html": "503 with an HTML error page",
    "200-html": "200 with an HTML page where JSON belongs",
    "reset-before": "the connection closes before any response",
    "reset-mid-body": "headers and half a body, then the connection closes",
    "malformed-json": "200 with a body cut inside the JSON",
    "wrong-shape": '200 with valid JSON of the wrong shape ({"id": "x"})',
    "empty-object": "200 with {}",
    "truncated-event": "a stream whose last event is cut in the middle",
    "slow-first-byte": "no byte for 30 seconds",
    "endless-stream": "a stream that never ends (a delta every 10 ms)",
    "non-sse-stream": "a streamed call answered 200 application/json",
    "not-utf8": "a healthy answer with a byte that is not UTF-8 inside a JSON key",
}


@dataclass(frozen=True, slots=True)
class Wire:
    """How one protocol spells a healthy answer."""

    name: str
    ndjson: bool = False

    def unary(self, model: str) -> dict:
        text = "".join(TEXT)
        if self.name == "openai":
            return {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            }
        if self.name == "anthropic":
            return {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 3},
            }
        if self.name == "gemini":
            return {
                "candidates": [
                    {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
                ],
                "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8},
                "modelVersion": model,
                "responseId": "resp-1",
            }
        return {
            "model": model,
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": text},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 5,
            "eval_count": 3,
        }

    def events(self, model: str, pieces: list[str]) -> list[tuple[str, dict]]:
        """(SSE event name, data) pairs of a healthy stream of `pieces`."""
        if self.name == "openai":
            out = [("", _openai_chunk(model, {"role": "assistant", "content": ""}))]
            out += [("", _openai_chunk(model, {"content": piece})) for piece in pieces]
            out.append(("", _openai_chunk(model, {}, "stop")))
            return out
        if self.name == "anthropic":
            start = self.unary(model) | {
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 5, "output_tokens": 1},
            }
            out = [
                ("message_start", {"type": "message_start", "message": start}),
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                ),
            ]
            out += [
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
                )
                for p in pieces
            ]
            out += [
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": 3},
                    },
                ),
                ("message_stop", {"type": "message_stop"}),
            ]
            return out
        if self.name == "gemini":
            out = [
                (
                    "",
                    {
                        "candidates": [{"content": {"role": "model", "parts": [{"text": p}]}, "index": 0}],
                        "modelVersion": model,
                    },
                )
                for p in pieces
            ]
            out[-1][1]["candidates"][0]["finishReason"] = "STOP"
            out[-1][1]["usageMetadata"] = {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8}
            return out
        out = [
            (
                "",
                {
                    "model": model,
                    "created_at": "2026-01-01T00:00:00Z",
                    "message": {"role": "assistant", "content": p},
                    "done": False,
                },
            )
            for p in pieces
        ]
        out.append(("", self.unary(model) | {"message": {"role": "assistant", "content": ""}}))
        return out

    @property
    def opening_events(self) -> int:
        """How many events open a stream before its first text delta (OpenAI's role chunk, Anthropic's starts)."""
        return {"openai": 1, "anthropic": 2}.get(self.name, 0)

    def encode(self, event: str, data: dict) -> bytes:
        if self.ndjson:
            return json.dumps(data).encode() + b"\n"
        prefix = f"event: {event}\n".encode() if event else b""
        return prefix + b"data: " + json.dumps(data).encode() + b"\n\n"

    def done(self) -> bytes:
        return b"data: [DONE]\n\n" if self.name == "openai" else b""

    @property
    def content_type(self) -> str:
        return "application/x-ndjson" if self.ndjson else "text/event-stream"


def _openai_chunk(model: str, delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


WIRES = {
    "openai": Wire("openai"),
    "anthropic": Wire("anthropic"),
    "gemini": Wire("gemini"),
    "ollama": Wire("ollama", ndjson=True),
}


class Upstream:
    """The aiohttp application; `start()` binds 127.0.0.1 on a free port and returns the base URL."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1beta/models/{call}", self._gemini)
        app.router.add_post("/api/chat", self._ollama)
        self._app = app

    async def start(self) -> str:
        # Handlers of slow faults are still sleeping when the test ends: do not wait for them on cleanup.
        self._runner = web.AppRunner(self._app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await self._answer(request, WIRES["openai"], body["model"], bool(body.get("stream")))

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await self._answer(request, WIRES["anthropic"], body["model"], bool(body.get("stream")))

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["call"].partition(":")
        return await self._answer(request, WIRES["gemini"], model, method == "streamGenerateContent")

    async def _ollama(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        return await self._answer(request, WIRES["ollama"], body["model"], body.get("stream", True) is not False)

    async def _answer(self, request: web.Request, wire: Wire, model: str, stream: bool) -> web.StreamResponse:
        self.hits[model] += 1
        fault = model.partition("~")[0]
        try:
            return await self._fault(request, wire, fault, stream)
        except ConnectionError:  # the caller went away (a deadline, a cancelled stream): nothing to answer
            return web.Response(status=499)

    async def _fault(self, request: web.Request, wire: Wire, fault: str, stream: bool) -> web.StreamResponse:
        if fault.startswith("429"):
            headers = {
                "429-retry-after-1": {"retry-after": "1"},
                "429-retry-after-0": {"retry-after": "0"},
                "429-retry-after-huge": {"retry-after": "86400"},
                "429-retry-after-inf": {"retry-after": "inf"},
                "429-ratelimit-reset-long": {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1d"},
            }.get(fault, {})
            return web.json_response(
                {"error": {"message": "slow down", "type": "rate_limit"}}, status=429, headers=headers
            )
        if fault == "500":
            return web.json_response({"error": {"message": "boom", "type": "server_error"}}, status=500)
        if fault == "503-html":
            return web.Response(
                status=503, text="<html><body>Service Unavailable</body></html>", content_type="text/html"
            )
        if fault == "200-html":
            return web.Response(status=200, text="<html><body>Welcome to nginx</body></html>", content_type="text/html")
        if fault == "reset-before":
            _reset(request)
            return web.Response(status=200)  # never sent: the socket is gone
        if fault == "slow-first-byte":
            await asyncio.sleep(30)
        if (
            fault in ("malformed-json", "wrong-shape", "empty-object")
            or (fault == "non-sse-stream" and stream)
            or not stream
        ):
            payload = {
                "wrong-shape": b'{"id": "x"}',
                "empty-object": b"{}",
            }.get(fault, json.dumps(wire.unary(fault)).encode())
            if fault == "malformed-json":
                payload = payload[: len(payload) // 2]
            if fault == "reset-mid-body":
                return await _cut_body(request, payload, "application/json")
            if fault == "not-utf8":
                payload = payload.replace(b'"role"', b'"ro\xffle"', 1)
            return web.Response(status=200, body=payload, content_type="application/json")
        return await self._stream(request, wire, fault)

    async def _stream(self, request: web.Request, wire: Wire, fault: str) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"content-type": wire.content_type})
        await response.prepare(request)
        if fault == "endless-stream":
            # The opening and the text of a healthy stream, then the same text delta for ever, with no ending.
            events = wire.events(fault, [*TEXT, " tick", " tick"])
            ticking = wire.opening_events + len(TEXT)
            for event, data in events[:ticking]:
                await response.write(wire.encode(event, data))
            while True:
                event, data = events[ticking]
                await response.write(wire.encode(event, data))
                await asyncio.sleep(0.01)
        events = wire.events(fault, TEXT)
        chunks = [wire.encode(event, data) for event, data in events]
        if fault == "not-utf8":
            chunks[0] = chunks[0].replace(b'"role"', b'"ro\xffle"', 1)
        if fault == "reset-mid-body":
            for chunk in chunks[: len(chunks) // 2]:
                await response.write(chunk)
            _reset(request)
            return response
        if fault == "truncated-event":
            for chunk in chunks[:-1]:
                await response.write(chunk)
            await response.write(chunks[-1][: len(chunks[-1]) // 2])
            _reset(request)
            return response
        for chunk in chunks:
            await response.write(chunk)
        if done := wire.done():
            await response.write(done)
        await response.write_eof()
        return response


def _reset(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _cut_body(request: web.Request, payload: bytes, content_type: str) -> web.StreamResponse:
    response = web.StreamResponse(
        status=200, headers={"content-type": content_type, "content-length": str(len(payload))}
    )
    await response.prepare(request)
    await response.write(payload[: len(payload) // 2])
    _reset(request)
    return response
