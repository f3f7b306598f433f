"""`modelir serve --workers N`: N processes on one port, each accepting connections and serving calls; SIGTERM
drains them all; a worker that dies takes the group down instead of leaving it half served."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from modelir import build_request
from modelir.v1 import service_pb2, service_pb2_grpc

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT and /proc: Linux")

MODELIR = [sys.executable, "-m", "modelir.cli"]


def _start(workers: int) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen(
        [*MODELIR, "serve", "--port", "0", "--workers", str(workers), "--access-log", "off"],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    for line in process.stderr:
        match = re.search(rf"all {workers} workers serving on 127\.0\.0\.1:(\d+)", line)
        if match:
            return process, int(match.group(1))
    raise AssertionError("the workers never said they serve")


def _workers(supervisor: int) -> list[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def _established(pid: int, port: int) -> int:
    """How many established TCP connections to local `port` process `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                count += 1
    return count


async def _calls_over_connections(port: int, connections: int, while_open=lambda: None) -> tuple[list[str], object]:
    """One Generate on each of `connections` separate TCP connections: the answers' texts, and what `while_open`
    returns when called with every connection still open."""
    request = service_pb2.GenerateRequest(request=build_request("reference", prompt="hi", max_output_tokens=4))
    # A local subchannel pool per channel: otherwise grpc shares one connection between identical channels.
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(connections)
    ]
    try:
        answers = await asyncio.gather(*(service_pb2_grpc.ModelServiceStub(c).Generate(request) for c in channels))
        return [a.response.choices[0].message.parts[0].text for a in answers], while_open()
    finally:
        for channel in channels:
            await channel.close()


def _stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()


async def test_two_workers_share_the_port_and_both_serve():
    process, port = _start(2)
    try:
        workers = _workers(process.pid)
        assert len(workers) == 2
        # Counted while the connections are open: 16 connections all landing on one of two workers has odds of 1 in
        # 32,768.
        texts, held = await _calls_over_connections(port, 16, lambda: {pid: _established(pid, port) for pid in workers})
        assert all(texts)
        assert isinstance(held, dict) and sum(held.values()) == 16 and all(held.values()), held  # both accepted
        assert _stop(process) == 0
        stderr = process.stderr.read() if process.stderr else ""
        assert stderr.count("shutting down: draining in-flight calls") == 2, stderr
    finally:
        if process.poll() is None:
            process.kill()


def test_a_worker_that_dies_stops_the_group():
    process, port = _start(2)
    try:
        texts, _ = asyncio.run(_calls_over_connections(port, 4))
        assert all(texts)
        first, second = _workers(process.pid)
        os.kill(first, signal.SIGKILL)
        assert process.wait(30) == 1  # the supervisor stopped the other worker and says something went wrong
        assert not Path(f"/proc/{second}").exists()  # it waited for it to end
        assert "stopping the others" in (process.stderr.read() if process.stderr else "")
    finally:
        if process.poll() is None:
            process.kill()


def test_workers_must_be_positive():
    done = subprocess.run([*MODELIR, "serve", "--workers", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--workers" in done.stderr and "Traceback" not in done.stderr
