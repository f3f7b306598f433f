"""The executor against real local HTTP servers: retries, Retry-After, deadlines, streams, cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web
from modelir import errors
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.transports.base import HttpRequest, error_for_status


def _error_from(response):
    return error_for_status(response, response.body.decode())


class Upstream:
    """An aiohttp server on 127.0.0.1 whose handler the test supplies; records what happened."""

    def __init__(self, handler):
        self.handler = handler
        self.calls = 0
        self.cancelled = asyncio.Event()
        self.times: list[float] = []

    async def _handle(self, request):
        self.calls += 1
        self.times.append(time.monotonic())
        try:
            return await self.handler(self, request)
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def __aenter__(self):
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.executor = Executor(f"http://127.0.0.1:{port}", retry=RetryPolicy(backoff_base=0.05))
        return self

    async def __aexit__(self, *exc):
        await self.executor.aclose()
        await self.runner.cleanup()


async def test_429_with_retry_after_then_200():
    async def handler(up, request):
        if up.calls == 1:
            return web.json_response({"error": "slow down"}, status=429, headers={"Retry-After": "1"})
        return web.json_response({"ok": True})

    async with Upstream(handler) as up:
        sent = await up.executor.send(HttpRequest("POST", "/v1/x", b"{}"), error_from=_error_from)
    assert sent.response.status == 200 and sent.attempts == 2
    assert up.times[1] - up.times[0] >= 0.95  # the provider's hint was honoured, not the short backoff


async def test_5xx_retries_with_backoff_then_gives_up():
    async def handler(up, request):
        return web.Response(status=503, text="overloaded")

    async with Upstream(handler) as up:
        with pytest.raises(errors.ProviderUnavailableError, match="503") as caught:
            await up.executor.send(HttpRequest("POST", "/", b""), error_from=_error_from)
    assert up.calls == 4 and caught.value.http_status == 503


async def test_4xx_is_not_retried():
    async def handler(up, request):
        return web.Response(status=400, text="bad field")

    async with Upstream(handler) as up:
        with pytest.raises(errors.ProviderRejectedError, match="bad field"):
            await up.executor.send(HttpRequest("POST", "/", b""), error_from=_error_from)
    assert up.calls == 1


async def test_deadline_expires_while_upstream_is_slow():
    async def handler(up, request):
        await asyncio.sleep(10)
        return web.Response(text="late")

    async with Upstream(handler) as up:
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceededError):
            await up.executor.send(HttpRequest("GET", "/"), error_from=_error_from, deadline=started + 0.3)
        assert time.monotonic() - started < 2
        await asyncio.wait_for(up.cancelled.wait(), 5)  # the upstream saw the request go away


async def test_caller_cancellation_reaches_the_upstream():
    started = asyncio.Event()

    async def handler(up, request):
        started.set()
        await asyncio.sleep(30)
        return web.Response(text="never")

    async with Upstream(handler) as up:
        task = asyncio.create_task(up.executor.send(HttpRequest("GET", "/"), error_from=_error_from))
        await asyncio.wait_for(started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(up.cancelled.wait(), 5)


async def _sse(request, events, *, cut=False):
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in events:
        await response.write(event)
    if cut:
        request.transport.close()  # the connection breaks mid-stream
        return response
    await response.write_eof()
    return response


async def test_stream_retries_before_the_first_event_only():
    async def handler(up, request):
        if up.calls == 1:
            return web.Response(status=502, text="bad gateway")
        return await _sse(request, [b"event: a\ndata: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"])

    async with Upstream(handler) as up:
        attempts = []
        events = [
            e
            async for e in up.executor.stream(
                HttpRequest("POST", "/", stream_format="sse"), error_from=_error_from, attempts=attempts
            )
        ]
    assert [(e.event, e.data) for e in events] == [("a", b"1"), ("", b"2"), ("", b"[DONE]")]
    assert attempts == [2]


async def test_stream_cut_after_output_raises_truncated_and_is_not_retried():
    async def handler(up, request):
        return await _sse(request, [b"data: 1\n\n"], cut=True)

    async with Upstream(handler) as up:
        received = []
        with pytest.raises(errors.TruncatedStreamError):
            async for event in up.executor.stream(
                HttpRequest("POST", "/", stream_format="sse"), error_from=_error_from
            ):
                received.append(event.data)
    assert received == [b"1"] and up.calls == 1


async def test_ndjson_stream_is_split_into_lines():
    async def handler(up, request):
        return await _sse(request, [b'{"a":1}\n{"b"', b':2}\n\n{"done":true}\n'])

    async with Upstream(handler) as up:
        lines = [
            e.data
            async for e in up.executor.stream(HttpRequest("POST", "/", stream_format="ndjson"), error_from=_error_from)
        ]
    assert lines == [b'{"a":1}', b'{"b":2}', b'{"done":true}']


def test_retry_after_parses_seconds_dates_and_ms():
    from modelir.transports.base import retry_after_seconds

    assert retry_after_seconds({"retry-after": "3"}) == 3
    assert retry_after_seconds({"retry-after-ms": "250"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10
    assert retry_after_seconds({}) is None


async def test_cookies_set_by_a_provider_are_never_sent_back():
    # One executor serves every caller of a model: a cookie kept from one answer would leak into the next call.
    async def handler(up, request):
        response = web.json_response({"cookie": request.headers.get("Cookie")})
        response.set_cookie("session", f"caller-{up.calls}")
        return response

    async with Upstream(handler) as up:
        # By host name: cookie jars ignore cookies from bare IP addresses, which would hide a leak.
        executor = Executor(up.executor._base_url.replace("127.0.0.1", "localhost"))
        try:
            for _ in range(2):
                sent = await executor.send(HttpRequest("POST", "/v1/x", b"{}"), error_from=_error_from)
                assert sent.response.body == b'{"cookie": null}'
        finally:
            await executor.aclose()
