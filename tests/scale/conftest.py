"""The fleet's real components for `make test-scale`: redis-server, a quota-enforcing fake provider, replicas of
`modelir serve` on distinct loopback addresses, and a local Ray cluster. Each is started here and stopped by its
own process id. `make test` skips this folder (it needs redis-server and takes minutes): `make test-scale` sets
MODELIR_TEST_SCALE=1.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # Ray reports usage over the network unless told not to
if os.environ.get("MODELIR_TEST_SCALE") != "1":
    collect_ignore_glob = ["test_*.py"]

ROOT = Path(__file__).resolve().parents[2]
MODELIR = str(Path(sys.executable).with_name("modelir"))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def stop(process: subprocess.Popen, sig: int = signal.SIGTERM, wait: float = 10.0) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_redis(port: int, workdir: Path) -> subprocess.Popen:
    """A redis-server on 127.0.0.1:`port` that keeps nothing on disk, answering PING when this returns."""
    binary = os.environ.get("MODELIR_REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: `make test-scale` installs it (apt-get install redis-server)")
    process = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return process
        except OSError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            stop(process)
            pytest.fail("redis-server did not start")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    port = free_port()
    process = start_redis(port, tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/0"
    stop(process)


class Provider:
    def __init__(self, port: int) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

    def control(self, **settings) -> None:
        self._http.post("/control", json=settings).raise_for_status()

    def stats(self) -> dict:
        return self._http.get("/stats").json()


@pytest.fixture(scope="session")
def provider() -> Iterator[Provider]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "tests.scale.fake_provider", str(port)], cwd=ROOT)
    fake = Provider(port)
    deadline = time.monotonic() + 15
    while True:
        try:
            fake.stats()
            break
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                stop(process)
                pytest.fail("the fake provider did not start")
            time.sleep(0.1)
    yield fake
    stop(process)


def replica_config(provider: Provider, replica: int, *, redis_url: str | None, prefix: str, **limits) -> dict:
    config: dict = {
        "models": {
            "chat": {
                "transport": "openai_chat",
                "base_url": provider.base_url,
                "provider_model": f"replica-{replica}",  # the provider's arrivals say which replica sent them
                "max_attempts": 2,
                **({"limits": limits} if limits else {}),
            }
        }
    }
    if redis_url is not None:
        config["limiter_backend"] = {"url": redis_url, "key_prefix": prefix}
    return config


class Fleet:
    """`count` replicas of `modelir serve`, replica i on 127.0.0.i, all on one port."""

    def __init__(self, workdir: Path, configs: list[dict], grace: float = 10.0) -> None:
        self.port = free_port()
        self.hosts = [f"127.0.0.{i + 1}" for i in range(len(configs))]
        self.processes: list[subprocess.Popen] = []
        for i, config in enumerate(configs):
            path = workdir / f"replica-{i + 1}.yaml"
            path.write_text(yaml.safe_dump(config))
            log = (workdir / f"replica-{i + 1}.log").open("wb")
            command = [MODELIR, "serve", "--config", str(path), "--host", self.hosts[i], "--port", str(self.port)]
            self.processes.append(
                subprocess.Popen([*command, "--grace", str(grace)], stdout=log, stderr=subprocess.STDOUT)
            )
        for host in self.hosts:
            self._wait_serving(f"{host}:{self.port}")

    @property
    def targets(self) -> list[str]:
        return [f"{host}:{self.port}" for host in self.hosts]

    def _wait_serving(self, target: str) -> None:
        deadline = time.monotonic() + 30
        with grpc.insecure_channel(target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    answer = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                    if answer.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replica {target} did not start serving")
                time.sleep(0.1)

    def cpu_seconds(self) -> list[float]:
        """User + system CPU each replica has used so far (from /proc)."""
        ticks = os.sysconf("SC_CLK_TCK")
        out = []
        for process in self.processes:
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            out.append((int(fields[11]) + int(fields[12])) / ticks)
        return out

    def signal(self, replica: int, sig: int) -> None:
        self.processes[replica].send_signal(sig)

    def stop(self) -> None:
        for process in self.processes:
            stop(process)


@pytest.fixture
def fleet_factory(tmp_path) -> Iterator:
    fleets: list[Fleet] = []

    def start(configs: list[dict], grace: float = 10.0) -> Fleet:
        fleet = Fleet(tmp_path, configs, grace)
        fleets.append(fleet)
        return fleet

    yield start
    for fleet in fleets:
        fleet.stop()


@pytest.fixture
def key_prefix() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"  # every test gets fresh limiter state in the one Redis


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """A local Ray cluster for this session (its own, never one that is already running); its GCS address."""
    import ray

    ray.init(
        address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING", _node_ip_address="127.0.0.1"
    )
    address = ray.get_runtime_context().gcs_address
    yield address
    ray.shutdown()
