"""The Ray scheduler: a batch's calls made by Ray actors on a cluster, its records written by the driver.

The driver (the `modelir run` process) keeps everything a local run keeps: the ledger (resume and the one record
file), provenance (workers build records with `calls`, as the local pool does) and progress. The keys to do
are cut into chunks and sent to a pool of actors, each opening the model once (`ModelSpec`) and calling it
`concurrency` at a time; a chunk comes back as its records. When an actor dies mid-chunk (a killed worker, a lost
node) Ray restarts it and the chunk is sent again, up to `chunk_retries` times; after that each of its keys gets
a failed record, so every key still ends with exactly one record and a resume retries it. Ray is the `ray`
extra, imported when a run asks for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from modelir import errors
from modelir.batch.calls import call_many, fail_record, new_record
from modelir.batch.model_spec import ModelSpec
from modelir.interface import ModelInterface
from modelir.v1 import capabilities_pb2, record_pb2, request_pb2

logger = logging.getLogger("modelir.batch")


class BatchWorker:
    """A Ray actor (made remote by the scheduler): one opened model, calling it for a chunk at a time."""

    def __init__(self, spec: ModelSpec, concurrency: int) -> None:
        self.model = spec.open()
        self.concurrency = max(1, concurrency)
        self.manifest: capabilities_pb2.CapabilityManifest | None = None

    def pid(self) -> int:
        return os.getpid()

    async def run_chunk(self, items: list[tuple[str, bytes, int]]) -> list[bytes]:
        """Records (serialized) for `(key, serialized request, attempts already spent)` items."""
        if self.manifest is None:
            self.manifest = await self.model.acapabilities()
        requests = [(key, request_pb2.Request.FromString(request), previous) for key, request, previous in items]
        records = await call_many(self.model, self.manifest, requests, self.concurrency)
        return [record.SerializeToString() for record in records]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError("Ray runs need the `ray` extra: pip install 'modelir[ray]'") from None
    return ray


class RayScheduler:
    def __init__(
        self,
        spec: ModelSpec,
        *,
        address: str | None = None,
        workers: int | None = None,
        concurrency: int = 8,
        chunk_size: int = 32,
        chunk_retries: int = 2,
        cpus_per_worker: float = 1.0,
    ) -> None:
        self.spec = spec
        self.address = address  # None or "local": start a local cluster for this run (and stop it after)
        self.workers = workers
        self.concurrency = concurrency
        self.chunk_size = max(1, chunk_size)
        self.chunk_retries = max(0, chunk_retries)
        self.cpus_per_worker = cpus_per_worker
        self.actors: list[Any] = []  # the live actor handles, while a run is on

    async def _restarted(self, ray: Any, actor: int, lost: tuple[type[BaseException], ...]) -> None:
        """Wait until Ray has restarted a dead actor, so that what is sent to it next is not lost to the restart."""
        from ray.exceptions import GetTimeoutError

        gone: tuple[type[BaseException], ...] = (*lost, GetTimeoutError)
        try:
            await asyncio.to_thread(ray.get, self.actors[actor].pid.remote(), timeout=120)
        except gone:
            pass  # the next chunk sent to it fails and counts as a try: no wait forever on a node that is gone

    async def run(
        self,
        model: ModelInterface,
        manifest: capabilities_pb2.CapabilityManifest,
        todo: Sequence[tuple[str, request_pb2.Request]],
        previous_attempts: Mapping[str, int],
    ) -> AsyncIterator[record_pb2.Record]:
        ray = _ray()
        from ray import exceptions as ray_errors

        lost = (ray_errors.RayActorError, ray_errors.WorkerCrashedError, ray_errors.ActorUnavailableError)
        started = False
        if not ray.is_initialized():
            # "local" starts a new cluster even when another one runs on this machine (plain init would join it);
            # a cluster of this machine alone listens on the loopback address only.
            local = {"_node_ip_address": "127.0.0.1"} if self.address in (None, "local") else {}
            if local:  # a throwaway cluster for one run sends no usage report (RAY_USAGE_STATS_ENABLED=1 to)
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            ray.init(address=self.address or "local", include_dashboard=False, logging_level=logging.WARNING, **local)
            started = True
        try:
            worker_class = ray.remote(BatchWorker).options(
                max_restarts=-1, max_task_retries=0, num_cpus=self.cpus_per_worker
            )
            cpus = ray.cluster_resources().get("CPU", 1)
            count = self.workers or max(1, int(cpus // max(self.cpus_per_worker, 0.01)))
            self.actors = [worker_class.remote(self.spec, self.concurrency) for _ in range(count)]
            chunks: deque[tuple[list[tuple[str, request_pb2.Request]], int]] = deque(
                (list(todo[i : i + self.chunk_size]), 0) for i in range(0, len(todo), self.chunk_size)
            )
            in_flight: dict[Any, tuple[int, list[tuple[str, request_pb2.Request]], int]] = {}

            def submit(actor: int) -> None:
                if chunks:
                    chunk, tries = chunks.popleft()
                    payload = [(k, r.SerializeToString(), previous_attempts.get(k, 0)) for k, r in chunk]
                    in_flight[self.actors[actor].run_chunk.remote(payload)] = (actor, chunk, tries)

            for actor in range(count):
                for _ in range(2):  # one chunk running, one queued, per actor
                    submit(actor)
            while in_flight:
                ready, _ = await asyncio.to_thread(ray.wait, list(in_flight), num_returns=1, timeout=1.0)
                for ref in ready:
                    actor, chunk, tries = in_flight.pop(ref)
                    try:
                        payloads = await asyncio.to_thread(ray.get, ref)
                    except lost as exc:
                        if tries < self.chunk_retries:
                            logger.warning("a Ray worker died; sending its %d requests again", len(chunk))
                            chunks.appendleft((chunk, tries + 1))
                            await self._restarted(ray, actor, lost)
                        else:
                            for key, request in chunk:
                                previous = previous_attempts.get(key, 0)
                                yield _lost_record(key, request, model.name, manifest, exc, tries + 1, previous)
                    else:
                        for payload in payloads:
                            yield record_pb2.Record.FromString(payload)
                    submit(actor)
        finally:
            for handle in self.actors:
                ray.kill(handle)
            self.actors = []
            if started:
                ray.shutdown()


def _lost_record(
    key: str,
    request: request_pb2.Request,
    model_name: str,
    manifest: capabilities_pb2.CapabilityManifest,
    exc: BaseException,
    attempts: int,
    previous_attempts: int,
) -> record_pb2.Record:
    record = new_record(key, request, model_name, manifest)
    error = errors.InternalError(f"the Ray worker running this request died ({type(exc).__name__}); resume retries it")
    fail_record(record, error, attempts, previous_attempts)
    return record
