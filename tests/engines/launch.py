"""Starting the live engines on the project's tiny model, for the suites here: one place that knows each engine's
command line, its readiness probe and its clean stop (every server binds 127.0.0.1 on a free port)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
        [
            *command,
            *("-c", "256", "-np", "1", "-t", "2"),
            # The KV cache in float32 and no flash attention (llama.cpp's defaults: float16, and flash attention,
            # which rounds Q to float16 on CPU; together ~1e-3 from the truth): the engine computes what the numpy
            # truth does, to float32's precision.
            *("-ctk", "f32", "-ctv", "f32", "-fa", "off"),
            *extra,
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
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
        # Flash attention off (on CPU it rounds Q to float16: 7e-3 from the truth, against 1.4e-3 without it).
        "OLLAMA_FLASH_ATTENTION": "false",
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


# ---- vLLM ------------------------------------------------------------------------------------------------------------

VLLM_CACHE = Path.home() / ".cache/modelir/vllm"
# vLLM's start waits for torch.compile: 40-80 s warm, several minutes cold on a loaded machine.
VLLM_STARTUP_SECONDS = 600


def vllm_model(python: str, context: int) -> Path:
    """The tiny model in Hugging Face form (`engines/llamacpp/hf_model.py`) at a path that stays the same while its
    writers do: vLLM keys its torch.compile cache by the model's path, so a fresh temporary directory would compile
    again on every run (minutes on CPU)."""
    writers = [ROOT / "engines/llamacpp/tiny_model.py", ROOT / "engines/llamacpp/hf_model.py"]
    key = hashlib.sha256(b"".join(w.read_bytes() for w in writers)).hexdigest()[:12]
    model = VLLM_CACHE / f"tiny-{key}-{context}"
    if not (model / "config.json").exists():
        VLLM_CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=VLLM_CACHE))
        subprocess.run([python, str(ROOT / "engines/llamacpp/hf_model.py"), str(staging), str(context)], check=True)
        try:
            staging.rename(model)
        except OSError:  # another run put it there first
            shutil.rmtree(staging)
    return model


@contextmanager
def vllm_server(python: str, folder: Path, context: int, *extra: str) -> Iterator[str]:
    """vLLM's OpenAI server on the tiny model, served as `tiny`, with `extra` flags; yields its URL. The server runs
    in its own process group, so its engine-core child goes with it whatever ends the tests."""
    port = free_port()
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CACHE_ROOT": str(VLLM_CACHE),  # torch.compile's output, kept between runs
    }
    log = folder / "server.log"
    process = subprocess.Popen(
        [
            *(python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(vllm_model(python, context))),
            *("--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"),
            *("--max-model-len", str(context), "--max-num-seqs", "4", *extra),
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + VLLM_STARTUP_SECONDS
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(1)
        else:
            raise RuntimeError("vLLM did not start: " + log.read_text()[-3000:])
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
