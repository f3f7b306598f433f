"""`modelir serve` over an HTTP model ends cleanly on SIGTERM: sessions closed, no "Unclosed client session"."""

from __future__ import annotations

import signal

import pytest
from aiohttp import web
from modelir import view
from modelir.remote import RemoteModel

from tests.fake_openai import FakeOpenAI
from tests.test_cli import _start_server


@pytest.fixture
async def provider():
    fake = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", fake.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"
    await runner.cleanup()


async def test_sigterm_closes_the_models_http_sessions(provider, tmp_path):
    config = tmp_path / "models.yaml"
    config.write_text(
        f'models:\n  fake: {{transport: openai_chat, provider_model: gpt-fake, base_url: "{provider}"}}\n'
    )
    process, target = _start_server("--config", str(config))
    try:
        remote = RemoteModel(target, "fake")
        assert view(await remote.achat([("user", "hi")])).text == "Hello world!"  # the session is open now
        await remote.aclose()
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
        log = process.stderr.read()
        assert "shutting down" in log and "Unclosed" not in log, log
    finally:
        if process.poll() is None:
            process.kill()
