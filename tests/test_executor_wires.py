"""The executor's two wires give the same answers and the same errors: aiohttp driven directly (the default) and
httpx (a caller's `httpx.AsyncClient` or an httpx transport), against one real local server."""

from __future__ import annotations

import asyncio
import socket
import types

import httpx
import pytest
from aiohttp import web
from modelir import Model, build_request, errors
from modelir.http import retry
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.transports.base import HttpRequest, error_for_status
from modelir.transports.openai.chat import OpenAIChat

from tests.fake_openai import FakeOpenAI

QUICK = RetryPolicy(backoff_base=0.01, backoff_max=0.02)


def _error_from(response):
    return error_for_status(response, response.body.decode())


@pytest.fixture
async def server():
    """Answers /echo with the request's method, headers and body as JSON; /flaky fails with 503 on odd calls."""
    calls = {"flaky": 0}

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(
            {"method": request.method, "headers": dict(request.headers), "body": (await request.read()).decode()},
            headers={"X-Request-Id": "req-1"},
        )

    async def flaky(request: web.Request) -> web.Response:
        calls["flaky"] += 1
        if calls["flaky"] % 2:
            return web.Response(status=503, text="busy")
        return web.Response(text="fine")

    app = web.Application()
    app.router.add_route("*", "/v1/echo", echo)
    app.router.add_post("/v1/flaky", flaky)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    await runner.cleanup()


def _executors(base_url: str, client: httpx.AsyncClient) -> dict[str, Executor]:
    headers = {"Authorization": "Bearer sk-test-123456", "User-Agent": "custom/1"}
    return {
        "aiohttp": Executor(base_url, headers=headers, retry=QUICK),
        "httpx client": Executor(base_url, headers=headers, retry=QUICK, client=client),
    }


async def test_both_wires_send_the_same_request_and_read_the_same_answer(server):
    async with httpx.AsyncClient() as client:
        seen = {}
        for name, executor in _executors(server, client).items():
            request = HttpRequest("POST", "/echo", b'{"a": 1}', (("content-type", "application/json"),))
            sent = await executor.send(request, error_from=_error_from)
            echoed = httpx.Response(200, content=sent.response.body).json()
            headers = {k.lower(): v for k, v in echoed["headers"].items()}
            assert sent.response.status == 200 and sent.attempts == 1
            assert sent.response.headers.get("x-request-id") == "req-1"  # looked up case-insensitively on both
            assert headers["authorization"] == "Bearer sk-test-123456" and headers["user-agent"] == "custom/1"
            assert headers["content-type"] == "application/json"
            seen[name] = (echoed["method"], echoed["body"])
            get = await executor.send(HttpRequest("GET", "/echo"), error_from=_error_from)
            seen[name] += (httpx.Response(200, content=get.response.body).json()["body"],)
            await executor.aclose()
        assert not client.is_closed  # the caller's client stays the caller's
    assert seen["aiohttp"] == seen["httpx client"] == ("POST", '{"a": 1}', "")


async def test_both_wires_retry_a_503_then_succeed(server):
    async with httpx.AsyncClient() as client:
        for executor in _executors(server, client).values():
            sent = await executor.send(HttpRequest("POST", "/flaky", b"{}"), error_from=_error_from)
            assert (sent.response.status, sent.response.body, sent.attempts) == (200, b"fine", 2)
            await executor.aclose()


async def test_both_wires_give_a_typed_error_for_a_closed_port():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with httpx.AsyncClient() as client:
        for executor in _executors(f"http://127.0.0.1:{port}", client).values():
            with pytest.raises(errors.ProviderUnavailableError, match="could not reach the provider") as caught:
                await executor.send(HttpRequest("POST", "/x", b"{}"), error_from=_error_from)
            assert "sk-test-123456" not in str(caught.value)
            await executor.aclose()


def test_a_transport_and_a_client_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        Executor("http://x.invalid", transport=httpx.MockTransport(lambda r: httpx.Response(200)), client=object())  # type: ignore[arg-type]


async def test_a_model_reads_the_running_loop_from_its_executor_not_asyncio_per_call(monkeypatch):
    """On Python 3.11 every `asyncio.get_running_loop()` is a `getpid` system call: once the executor has made its
    aiohttp session (bound to the running loop), a call's deadline timeout takes the loop from it (#37)."""
    asked = []

    def get_running_loop():
        asked.append(1)
        return asyncio.get_running_loop()

    monkeypatch.setattr(
        retry, "asyncio", types.SimpleNamespace(get_running_loop=get_running_loop, timeout_at=asyncio.timeout_at)
    )
    async with FakeOpenAI() as fake:
        executor = Executor(fake.base_url)
        assert executor.loop is None  # no session yet
        model = Model(OpenAIChat(provider_model="m"), name="m", executor=executor)
        request = build_request("m", messages=[("user", "Hi")])
        await model.arun(request)
        assert executor.loop is asyncio.get_running_loop()
        asked.clear()
        response = await model.arun(request)
        await executor.aclose()
    assert response.choices[0].message.parts[0].text == "Hello world!"
    assert asked == []
