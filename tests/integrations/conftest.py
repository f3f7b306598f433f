"""A modelir server for the integrations' remote tests: `modelir serve` (the reference model) on a free local port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    modelir = os.path.join(os.path.dirname(sys.executable), "modelir")
    process = subprocess.Popen([modelir, "serve", "--port", str(port)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    else:
        process.kill()
        raise RuntimeError("modelir serve did not start")
    yield f"127.0.0.1:{port}"
    process.terminate()
    process.wait(10)
