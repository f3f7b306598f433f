"""The other direction of IR 1.0 / 1.1: this release's client against a server of IR 1.0.0.

The server is this repository at `RELEASE_1_0_COMMIT`, the last main of IR 1.0.0: its `python/` package is installed
once per machine (from the clone's own history with `git archive`; its dependencies from PyPI at that commit's
pinned constraints) into a venv of its own under `~/.cache/modelir/cross-release/<commit>`, behind a lock, and its
`modelir serve` is started with that commit's service suite. Every service case that existed at 1.0 is replayed with
this release's stubs (`tests/test_service_conformance.py`'s runner) and gets what it expects; `RemoteModel` refuses a
request that uses a field IR 1.0 does not have before sending it. A clone without that commit (a shallow one) skips.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import grpc
import pytest
from modelir import RemoteModel, UnsupportedCapabilityError, build_request
from modelir.v1 import capabilities_pb2, service_pb2, service_pb2_grpc

from tests.test_service_conformance import call, differences, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
RELEASE_1_0_COMMIT = "968f88e"  # the last main of IR 1.0.0
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "modelir" / "cross-release"


def _commit(name: str) -> str | None:
    """The full id of commit `name` in this clone, or None when the clone does not have it."""
    ran = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    return ran.stdout.strip() if ran.returncode == 0 else None


def _install(commit: str, home: Path) -> None:
    """That commit's `python/` and `conformance/service/` under `home/tree`, its package in the venv `home/venv`."""
    tree, venv = home / "tree", home / "venv"
    for stale in (tree, venv):
        shutil.rmtree(stale, ignore_errors=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "python", "conformance/service"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as files:
        files.extractall(tree, filter="data")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    constraints = tree / "python" / "constraints.txt"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-c", str(constraints), str(tree / "python")], check=True)
    (home / "installed").write_text(commit + "\n")


@pytest.fixture(scope="module")
def release_1_0() -> Path:
    """The cache directory of IR 1.0.0's server (installed on first use; other processes wait on the lock)."""
    commit = _commit(RELEASE_1_0_COMMIT)
    if commit is None:
        pytest.skip(f"this clone lacks commit {RELEASE_1_0_COMMIT} (IR 1.0.0's last main): a shallow clone?")
    home = CACHE / commit
    home.mkdir(parents=True, exist_ok=True)
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "installed").exists():
            _install(commit, home)
    return home


@pytest.fixture(scope="module")
def servers_1_0(release_1_0):
    """IR 1.0.0's `modelir serve`, one per server of its suite; yields the suite's directory and the addresses."""
    suite = release_1_0 / "tree" / "conformance" / "service"
    binary = str(release_1_0 / "venv" / "bin" / "modelir")
    names = json.loads((suite / "servers.json").read_text())
    started = {name: start_server(name, suite=suite, binary=binary) for name in names}
    yield suite, {name: address for name, (_, address) in started.items()}
    for process, _ in started.values():
        stop_server(process)


def test_the_server_is_ir_1_0(servers_1_0):
    _, addresses = servers_1_0
    with grpc.insecure_channel(addresses["open"]) as channel:
        info = service_pb2_grpc.ModelServiceStub(channel).GetServerInfo(service_pb2.GetServerInfoRequest(), timeout=10)
    assert info.ir_version == "1.0.0"


def test_this_client_gets_what_every_1_0_case_expects_from_a_1_0_server(servers_1_0):
    suite, addresses = servers_1_0
    cases = sorted((suite / "cases").glob("*.json"))
    assert cases
    problems = []
    for path in cases:
        case = json.loads(path.read_text())
        with grpc.insecure_channel(addresses[case["server"]]) as channel:
            actual = call(channel, case)
        ignore = frozenset(case.get("ignore", []))
        problems += [f"{path.stem}: {p}" for p in differences(case["expect"], actual, ignore=ignore)]
    assert not problems, "\n".join(problems)


async def test_a_field_ir_1_0_lacks_is_refused_before_it_is_sent(servers_1_0):
    _, addresses = servers_1_0
    remote = RemoteModel(addresses["open"], "reference")
    try:
        request = build_request("reference", prompt="hi")
        request.service_tier = "flex"  # IR 1.1: a 1.0 server would drop it unseen
        with pytest.raises(UnsupportedCapabilityError) as caught:
            await remote.arun(request)
        assert list(caught.value.missing) == [capabilities_pb2.CAPABILITY_SERVICE_TIER]
        assert "SERVICE_TIER" in str(caught.value)
        assert (await remote.arun(build_request("reference", prompt="hi"))).choices  # what 1.0 knows still runs
    finally:
        await remote.aclose()
