"""Batch runs on a real local Ray cluster: several thousand requests against the fake provider with a Ray worker
killed mid-run end with exactly one record per key, a resume leaves exactly one successful record per key, and
`records verify` passes; `modelir run --ray` starts its own cluster;
`modelir.batch.ray_data` serves Ray Data pipelines."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from modelir import build_request
from modelir.batch import SUCCESS, request_key, run_batch
from modelir.batch.model_spec import ModelSpec
from modelir.batch.ray_scheduler import RayScheduler
from modelir.records import files as records
from modelir.v1 import record_pb2

from tests.scale.conftest import MODELIR, replica_config

pytestmark = pytest.mark.timeout(300)
REQUESTS = 3000


def _inputs(count: int, model: str = "chat") -> list:
    return [
        (f"k{i:05d}", build_request(model, messages=[("user", f"q {i}")], max_output_tokens=4)) for i in range(count)
    ]


def _write_inputs(path: Path, inputs: list) -> None:
    from google.protobuf import json_format

    with path.open("w") as handle:
        for key, request in inputs:
            handle.write(json.dumps({"key": key, "request": json_format.MessageToDict(request)}) + "\n")


class KillOneWorker:
    """Wraps the Ray scheduler: after `after` records, SIGKILLs the process of one of its actors."""

    def __init__(self, inner: RayScheduler, after: int) -> None:
        self.inner = inner
        self.after = after
        self.killed: int | None = None

    async def run(self, *args):
        import ray

        count = 0
        async for record in self.inner.run(*args):
            count += 1
            if count == self.after:
                self.killed = await asyncio.to_thread(ray.get, self.inner.actors[0].pid.remote())
                os.kill(self.killed, signal.SIGKILL)
            yield record


def _by_key(path: Path) -> tuple[Counter, Counter]:
    """(records per key, successful records per key)."""
    scan = records.scan(path)
    assert not scan.problems, scan.problems
    every = Counter(r.key for r in scan.records)
    ok = Counter(r.key for r in scan.records if r.status in SUCCESS)
    return every, ok


def _verify(path: Path) -> str:
    result = subprocess.run([MODELIR, "records", "verify", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


@pytest.fixture
def config_file(tmp_path, provider) -> Path:
    provider.control()  # no quota, no delay
    path = tmp_path / "ray.yaml"
    path.write_text(yaml.safe_dump(replica_config(provider, 1, redis_url=None, prefix="")))
    return path


async def test_ray_batch_with_a_worker_killed_then_resumed_has_one_success_per_key(ray_cluster, config_file, tmp_path):
    spec = ModelSpec.from_config_file(config_file, "chat")
    inputs = _inputs(REQUESTS)
    output = tmp_path / "records.jsonl"
    # No chunk is sent again here, so the killed worker's chunks end as failed records for the resume to retry.
    scheduler = KillOneWorker(RayScheduler(spec, address=ray_cluster, workers=2, chunk_retries=0), after=800)
    driver_model = spec.open()
    first = await run_batch(driver_model, inputs, output, scheduler=scheduler)
    every, ok = _by_key(output)
    print(f"first run: {first}, killed worker pid {scheduler.killed}")
    assert scheduler.killed is not None
    assert set(every) == {k for k, _ in inputs} and max(every.values()) == 1, "one record per key, ok or failed"
    assert first.failed > 0 and first.ok + first.failed == REQUESTS

    input_file = tmp_path / "inputs.jsonl"
    _write_inputs(input_file, inputs)
    command = [MODELIR, "run", "--config", str(config_file), "--model", "chat", "--input", str(input_file)]
    resumed = await asyncio.to_thread(
        subprocess.run,
        [*command, "--output", str(output), "--resume", "--ray", ray_cluster],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    print("resume:", resumed.stderr.strip().splitlines()[-1])
    every, ok = _by_key(output)
    assert set(ok) == {k for k, _ in inputs} and set(ok.values()) == {1}, "exactly one successful record per key"
    print("verify:", _verify(output))
    for record in records.read_records(output):
        assert record.provenance.ir_version and record.provenance.transport == "openai_chat"
        assert record.provenance.provider_model == "replica-1" or record.status == record_pb2.RECORD_STATUS_FAILED
    await driver_model.executor.aclose()


async def test_a_killed_worker_is_restarted_and_its_chunks_sent_again(ray_cluster, config_file, tmp_path):
    spec = ModelSpec.from_config_file(config_file, "chat")
    scheduler = KillOneWorker(RayScheduler(spec, address=ray_cluster, workers=2), after=500)
    output = tmp_path / "records.jsonl"
    driver_model = spec.open()
    summary = await run_batch(driver_model, _inputs(REQUESTS), output, scheduler=scheduler)
    await driver_model.executor.aclose()
    every, ok = _by_key(output)
    print(f"with resends: {summary}")
    assert scheduler.killed is not None and summary.ok == REQUESTS and summary.failed == 0
    assert len(ok) == REQUESTS and set(every.values()) == {1}


def test_modelir_run_ray_starts_its_own_local_cluster(tmp_path):
    inputs = _inputs(200, model="reference")
    input_file, output = tmp_path / "inputs.jsonl", tmp_path / "records.jsonl"
    _write_inputs(input_file, inputs)
    command = [MODELIR, "run", "--model", "reference", "--input", str(input_file), "--output", str(output)]
    result = subprocess.run([*command, "--ray", "--ray-workers", "2"], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "done 200/200" in result.stderr  # progress is shown
    every, ok = _by_key(output)
    assert len(ok) == 200 and set(every.values()) == {1}
    _verify(output)


def test_ray_data_map_batches_calls_the_model_per_batch(ray_cluster, config_file, tmp_path):
    import ray.data
    from google.protobuf import json_format
    from modelir.batch.ray_data import ModelCaller, write_records

    rows = [{"request": json_format.MessageToJson(r), "key": k} for k, r in _inputs(300)]
    dataset = ray.data.from_items(rows).map_batches(
        ModelCaller,
        fn_constructor_kwargs={"model": "chat", "config": str(config_file)},
        concurrency=1,
        batch_size=50,
        num_cpus=0.5,
    )
    output = tmp_path / "records.jsonl"
    assert write_records(dataset, output) == 300
    every, ok = _by_key(output)
    assert len(ok) == 300 and set(every.values()) == {1}
    sample = next(records.read_records(output))
    assert sample.provenance.provider_model == "replica-1"
    assert request_key(sample.request) != sample.key  # the given key column was kept
    _verify(output)
