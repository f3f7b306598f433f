"""The local scheduler: a pool of asyncio workers in this process, calling the model `concurrency` at a time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence

from modelir.batch.calls import call_to_record
from modelir.interface import ModelInterface
from modelir.v1 import capabilities_pb2, record_pb2, request_pb2


class LocalScheduler:
    def __init__(self, concurrency: int = 8) -> None:
        self.concurrency = max(1, concurrency)

    async def run(
        self,
        model: ModelInterface,
        manifest: capabilities_pb2.CapabilityManifest,
        todo: Sequence[tuple[str, request_pb2.Request]],
        previous_attempts: Mapping[str, int],
    ) -> AsyncIterator[record_pb2.Record]:
        """Yield one record per item of `todo`, in the order the calls finish."""
        queue: asyncio.Queue[tuple[str, request_pb2.Request]] = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)
        # Each worker hands back records, or the error (not a ModelError: those become records) that stopped it.
        finished: asyncio.Queue[record_pb2.Record | Exception] = asyncio.Queue()

        async def worker() -> None:
            try:
                while True:
                    try:
                        key, request = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    previous = previous_attempts.get(key, 0)
                    finished.put_nowait(await call_to_record(model, manifest, key, request, previous))
                    # An in-process model (the reference model) answers without ever suspending: yield, so that
                    # the run writes each record as it comes and Ctrl-C (a cancellation) reaches the workers.
                    await asyncio.sleep(0)
            except Exception as exc:
                finished.put_nowait(exc)

        workers = [asyncio.create_task(worker()) for _ in range(min(self.concurrency, max(1, len(todo))))]
        try:
            for _ in range(len(todo)):
                outcome = await finished.get()
                if isinstance(outcome, Exception):
                    raise outcome
                yield outcome
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
