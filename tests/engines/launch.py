"""Starting the live engines on the project's tiny model, for the suites here: one place that knows each engine's
command line, its readiness probe and its clean stop (every server binds 127.0.0.1 on a free port)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tiny_gguf(folder: Path) -> Path:
    """The tiny model as GGUF (`engines/llamacpp/tiny_model.py`), written into `folder`."""
    gguf = folder / "tiny.gguf"
    subprocess.run([sys.executable, str(ROOT / "engines/llamacpp/tiny_model.py"), str(gguf)], check=True)
    return gguf


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{what} did not start: " + log.read_text()[-2000:])


@contextmanager
def llama_server(binary: str, folder: Path, *extra: str) -> Iterator[str]:
    """A llama-server on the tiny model (256 tokens of context, one slot), with `extra` flags; yields its URL."""
    port = free_port()
    log = folder / "server.log"
    command = [binary, "-m", str(tiny_gguf(folder)), "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, "-c", "256", "-np", "1", "-t", "2", *extra], stdout=log.open("w"), stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url + "/health", process, log, "llama-server")
        yield url
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def ollama(binary: str, folder: Path) -> Iterator[str]:
    """An Ollama serving the tiny model as `tiny` (`engines/ollama/Modelfile.template`); yields its URL."""
    modelfile = folder / "Modelfile"
    template = (ROOT / "engines/ollama/Modelfile.template").read_text()
    modelfile.write_text(template.replace("{gguf}", str(tiny_gguf(folder))))
    host = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "OLLAMA_HOST": host,
        "OLLAMA_MODELS": str(folder / "models"),
        "HOME": str(folder / "home"),
        "OLLAMA_NOPRUNE": "1",
    }
    log = folder / "server.log"
    process = subprocess.Popen([binary, "serve"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://{host}"
    try:
        _wait_ready(url + "/api/version", process, log, "ollama")
        created = subprocess.run(
            [binary, "create", "tiny", "-f", str(modelfile)], env=env, capture_output=True, text=True, timeout=120
        )
        assert created.returncode == 0, created.stderr
        yield url
    finally:
        process.terminate()
        process.wait(10)
