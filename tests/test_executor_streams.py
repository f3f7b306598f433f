"""Streams on the executor's two wires, against one real local server: straight on aiohttp (the default) and
through httpx (a caller's `httpx.AsyncClient`). The same events whatever the reads split, the same typed errors,
the partial output kept when the connection breaks, the connection closed when the consumer stops or is cancelled,
and reused after a stream that ended cleanly."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from aiohttp import web
from modelir import errors
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.transports.base import HttpRequest, RawEvent, error_for_status

QUICK = RetryPolicy(backoff_base=0.01, backoff_max=0.02)

# Pieces cut mid-field, mid-CRLF and mid-UTF-8 character, one event spanning three writes.
PIECES = [b'data: {"a"', b": 1}\r", b"\n\r\nevent: x\ndata: caf\xc3", b"\xa9\n", b"data: two\n\n", b"data: end\n\n"]
EVENTS = [RawEvent("", b'{"a": 1}'), RawEvent("x", "café\ntwo".encode()), RawEvent("", b"end")]


def _error_from(response):
    return error_for_status(response, response.body.decode())


@pytest.fixture
async def server():
    state = {"peers": [], "closed": asyncio.Event()}

    async def _start(request: web.Request) -> web.StreamResponse:
        state["peers"].append(request.transport.get_extra_info("peername"))  # the client's port: its connection
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        return resp

    async def split(request: web.Request) -> web.StreamResponse:
        resp = await _start(request)
        for piece in PIECES:
            await resp.write(piece)
            await asyncio.sleep(0.005)  # each piece its own read
        await resp.write_eof()
        return resp

    async def cut(request: web.Request) -> web.StreamResponse:
        resp = await _start(request)
        await resp.write(b"data: first\n\ndata: half")
        await asyncio.sleep(0.02)
        request.transport.abort()  # the connection breaks mid-event
        return resp

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = await _start(request)
        await resp.write(b"data: first\n\n")
        try:
            while True:
                await asyncio.sleep(0.01)
                await resp.write(b": ping\n\n")
        except (ConnectionError, RuntimeError):  # aiohttp's reset is a ConnectionResetError
            state["closed"].set()
        return resp

    async def busy(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "slow down"}}, status=429, headers={"retry-after": "999"})

    async def page(request: web.Request) -> web.Response:
        return web.Response(text="<html>proxy</html>", content_type="text/html")

    app = web.Application()
    for path, handler in [("split", split), ("cut", cut), ("endless", endless), ("busy", busy), ("page", page)]:
        app.router.add_post(f"/v1/{path}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state["url"] = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    yield state
    await runner.cleanup()


def _request(path: str) -> HttpRequest:
    return HttpRequest("POST", f"/{path}", b"{}", (("content-type", "application/json"),))


@pytest.fixture(params=["aiohttp", "httpx client"])
async def executor(request, server):
    async with httpx.AsyncClient() as client:
        extra = {"client": client} if request.param == "httpx client" else {}
        executor = Executor(server["url"], retry=QUICK, **extra)
        executor.wire = request.param
        yield executor
        await executor.aclose()


async def test_events_split_across_reads_are_the_same_on_both_wires(executor):
    events = [e async for e in executor.stream(_request("split"), error_from=_error_from)]
    assert events == EVENTS


async def test_a_connection_is_reused_after_a_clean_end_on_aiohttp(executor, server):
    for _ in range(3):
        assert [e async for e in executor.stream(_request("split"), error_from=_error_from)] == EVENTS
    if executor.wire == "aiohttp":
        assert len(set(server["peers"])) == 1, "each clean stream should hand its connection back to the pool"


async def test_a_break_mid_stream_keeps_the_output_and_raises_truncated(executor):
    got = []
    with pytest.raises(errors.TruncatedStreamError):
        async for event in executor.stream(_request("cut"), error_from=_error_from):
            got.append(event)
    assert got == [RawEvent("", b"first")]


@pytest.mark.parametrize("how", ["stop", "cancel"])
async def test_a_consumer_that_stops_or_is_cancelled_closes_the_upstream(executor, server, how):
    first = asyncio.Event()

    async def consume() -> None:
        stream = executor.stream(_request("endless"), error_from=_error_from)
        async for _ in stream:
            first.set()
            if how == "stop":
                await stream.aclose()
                return
        raise AssertionError("the endless stream ended")

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    if how == "cancel":
        task.cancel()
    with pytest.raises(asyncio.CancelledError) if how == "cancel" else _nothing():
        await task
    await asyncio.wait_for(server["closed"].wait(), 5)


async def test_an_error_status_is_typed_on_both_wires(executor):
    with pytest.raises(errors.RateLimitedError) as caught:
        async for _ in executor.stream(_request("busy"), error_from=_error_from):
            pass
    assert "slow down" in str(caught.value)


async def test_an_answer_that_is_not_a_stream_is_malformed_on_both_wires(executor):
    with pytest.raises(errors.MalformedResponseError, match=r"text/html.*proxy"):
        async for _ in executor.stream(_request("page"), error_from=_error_from):
            pass


async def test_a_deadline_mid_stream_is_typed_and_closes_the_upstream(executor, server):
    got = []
    deadline = time.monotonic() + 0.1
    with pytest.raises(errors.DeadlineExceededError):
        async for event in executor.stream(_request("endless"), error_from=_error_from, deadline=deadline):
            got.append(event)
    assert got == [RawEvent("", b"first")]
    await asyncio.wait_for(server["closed"].wait(), 5)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
