"""No credential leaves through a provider's error: every error shape that quotes the API key, on every surface.

The upstream answers each call with an error that quotes the key the call carried, in each shape a provider reports
an error inside a 200 answer or a stream. Each surface a caller or an operator reads is searched for the key:
`Response.errors` and `StreamEnd.errors` (the SDK), the gRPC answer and stream events (`RemoteModel`), the spans
(status, attributes, events), the logs, a record, and the command line's output. Each must carry the error, with
the key replaced by `[redacted]`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass

import pytest
from aiohttp import web
from modelir import Model, build_request, telemetry
from modelir.http.executor import Executor
from modelir.records.recording import record_of
from modelir.registry import build_transport
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.streams.fold import StreamAccumulator
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

KEY = "sk-leak-0123456789abcdefXYZ"


def _quoting(request: web.Request) -> str:
    """The key the call carried, quoted as a provider's error does."""
    headers = request.headers
    key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
    return f"Incorrect API key provided: {key}. You can find your API key in your account."


def _sse(events: list[tuple[str, dict]]) -> bytes:
    return b"".join(
        (f"event: {name}\n".encode() if name else b"") + b"data: " + json.dumps(data).encode() + b"\n\n"
        for name, data in events
    )


def _responses_object(status: str, message: str = "") -> dict:
    error = {"code": "invalid_api_key", "message": message} if message else None
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "status": status,
        "error": error,
        "incomplete_details": None,
        "model": "gpt-5",
        "output": [],
        "usage": None,
    }


async def _responses(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    message = _quoting(request)
    if not body.get("stream"):  # Responses `status: failed` with its `error`
        return web.json_response(_responses_object("failed", message))
    events = [
        (
            "response.created",
            {"type": "response.created", "sequence_number": 0, "response": _responses_object("in_progress")},
        ),
        (
            "error",
            {"type": "error", "sequence_number": 1, "code": "invalid_api_key", "message": message, "param": None},
        ),
        (
            "response.failed",
            {"type": "response.failed", "sequence_number": 2, "response": _responses_object("failed", message)},
        ),
    ]
    return web.Response(body=_sse(events), content_type="text/event-stream")


async def _anthropic(request: web.Request) -> web.StreamResponse:
    start = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "c",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        ),
        ("error", {"type": "error", "error": {"type": "authentication_error", "message": _quoting(request)}}),
    ]
    return web.Response(body=_sse(events), content_type="text/event-stream")


async def _ollama(request: web.Request) -> web.StreamResponse:
    lines = [
        {"model": "l", "created_at": "t", "message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"error": _quoting(request)},
    ]
    return web.Response(
        body=b"".join(json.dumps(x).encode() + b"\n" for x in lines), content_type="application/x-ndjson"
    )


async def _chat(request: web.Request) -> web.StreamResponse:
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}],
    }
    error = {"error": {"message": _quoting(request), "type": "invalid_request_error", "code": "invalid_api_key"}}
    return web.Response(body=_sse([("", chunk), ("", error)]), content_type="text/event-stream")


@dataclass(frozen=True)
class Shape:
    name: str
    transport: str
    base_path: str
    modes: tuple[str, ...]


SHAPES = [
    Shape("responses-status-failed", "openai_responses", "/v1", ("unary",)),
    Shape("responses-error-event", "openai_responses", "/v1", ("stream",)),
    Shape("anthropic-event-error", "anthropic_messages", "", ("stream",)),
    Shape("ollama-error-line", "ollama", "", ("stream",)),
    Shape("openai-chat-error-chunk", "openai_chat", "/v1", ("stream",)),
]


@pytest.fixture
async def upstream():
    app = web.Application()
    app.router.add_post("/v1/responses", _responses)
    app.router.add_post("/v1/messages", _anthropic)
    app.router.add_post("/api/chat", _ollama)
    app.router.add_post("/v1/chat/completions", _chat)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    await runner.cleanup()


@pytest.fixture
def spans():
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    telemetry.install(tracer_provider=provider)
    yield exported
    telemetry.install()


def _model(shape: Shape, base_url: str) -> Model:
    transport = build_transport(shape.transport, {"provider_model": "m"})
    executor = Executor(base_url + shape.base_path, headers=transport.auth_headers(KEY))
    return Model(transport, name="m", executor=executor)


async def _call(model, mode: str):
    request = build_request("m", messages=[("user", "hi")])
    if mode == "unary":
        return await model.arun(request), []
    accumulator, events = StreamAccumulator(), []
    async for event in model.astream(request):
        events.append(event)
        accumulator.add(event)
    return accumulator.response(), events


def _assert_redacted(surface: str, text: str) -> None:
    assert KEY not in text, f"{surface}: the key leaked: {text[:2000]}"
    assert "[redacted]" in text, f"{surface}: the error never arrived: {text[:2000]}"


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
async def test_a_quoted_key_reaches_no_surface(shape, upstream, spans, caplog):
    caplog.set_level(logging.DEBUG)
    model = _model(shape, upstream)
    server, port = await build_server({"m": model}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "m")
    try:
        for mode in shape.modes:
            response, events = await _call(model, mode)
            _assert_redacted(f"Response.errors ({mode})", str(list(response.errors)))
            if events:
                _assert_redacted("StreamEnd.errors", str(events[-1].end.errors))
            record = record_of(model, build_request("m", messages=[("user", "hi")]), response)
            _assert_redacted("record", str(record) + record.SerializeToString().decode("utf-8", "replace"))

            remote_response, remote_events = await _call(remote, mode)
            _assert_redacted(f"gRPC answer ({mode})", str(remote_response))
            if remote_events:
                _assert_redacted("gRPC stream events", "".join(str(e) for e in remote_events))
    finally:
        await remote.aclose()
        await server.stop(None)
        await model.executor.aclose()
    finished = spans.get_finished_spans()
    assert finished
    _assert_redacted(
        "spans",
        "".join(
            f"{s.status.description} {dict(s.attributes or {})} "
            f"{[(e.name, dict(e.attributes or {})) for e in s.events]}"
            for s in finished
        ),
    )
    assert KEY not in caplog.text, caplog.text


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
async def test_a_quoted_key_is_not_printed_by_the_command_line(shape, upstream, tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n"
        f"  m:\n    transport: {shape.transport}\n    base_url: {upstream}{shape.base_path}\n"
        "    provider_model: m\n    credential_env: LEAK_TEST_KEY\n"
    )
    for mode in shape.modes:
        argv = ["generate", "--config", str(config), "--model", "m", "--chat", "hi"]
        for extra in ([], ["--json"]):
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "modelir.cli",
                *argv,
                *extra,
                *(["--stream"] if mode == "stream" else []),
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={**os.environ, "LEAK_TEST_KEY": KEY},
            )
            out, err = await process.communicate()
            _assert_redacted(f"modelir generate {mode} {extra}", out.decode() + err.decode())
