"""`modelir serve` refuses what it cannot serve well, in one line: a busy port (grpc would share it silently, and
calls would alternate between two servers) and a TLS key that is not its certificate's; `modelir generate` closes
its HTTP sessions (no "Unclosed client session" at exit)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from modelir.server import build_server

from tests.fake_openai import FakeOpenAI
from tests.test_robust_server import _self_signed

MODELIR = [sys.executable, "-m", "modelir.cli"]


async def test_a_second_server_on_a_busy_port_is_refused():
    first, port = await build_server({}, "127.0.0.1:0")
    await first.start()
    try:
        with pytest.raises(OSError, match="could not bind"):
            await build_server({}, f"127.0.0.1:{port}")
        process = await asyncio.create_subprocess_exec(
            *MODELIR, "serve", "--port", str(port), "--access-log", "off",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await asyncio.wait_for(process.communicate(), 60)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise AssertionError("a second `modelir serve` started on a busy port") from None
    finally:
        await first.stop(None)
    assert process.returncode != 0
    assert "could not bind" in err.decode() and "Traceback" not in err.decode(), err.decode()


def test_a_tls_key_that_is_not_the_certificates_is_one_line(tmp_path):
    cert, _ = _self_signed()
    _, other_key = _self_signed()
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(other_key)
    config = tmp_path / "models.yaml"
    config.write_text(
        "models:\n  reference:\n    transport: reference\n"
        "server:\n  tls:\n    cert_file: cert.pem\n    key_file: key.pem\n"
    )
    done = subprocess.run(
        [*MODELIR, "serve", "--config", str(config), "--port", "0", "--access-log", "off"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "server.tls" in lines[0] and "private key" in lines[0], done.stderr


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
async def test_generate_closes_its_sessions(tmp_path, stream):
    async with FakeOpenAI() as fake:
        config = tmp_path / "models.yaml"
        config.write_text(
            f"models:\n  mini:\n    transport: openai_chat\n    base_url: {fake.base_url}\n    provider_model: m\n"
        )
        process = await asyncio.create_subprocess_exec(
            *MODELIR, "generate", "--config", str(config), "--model", "mini", "--chat", "hi",
            *(["--stream"] if stream else []),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
    assert process.returncode == 0 and "Hello world!" in out.decode()
    assert "Unclosed" not in err.decode(), err.decode()
