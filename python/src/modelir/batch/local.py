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
        finished: asyncio.Queue[record_pb2.Record] = asyncio.Queue()

        async def worker() -> None:
            while True:
                try:
                    key, request = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                finished.put_nowait(await call_to_record(model, manifest, key, request, previous_attempts.get(key, 0)))

        workers = {asyncio.create_task(worker()) for _ in range(min(self.concurrency, max(1, len(todo))))}
        alive = set(workers)
        try:
            for _ in range(len(todo)):
                get = asyncio.ensure_future(finished.get())
                while not get.done():
                    await asyncio.wait([get, *alive], return_when=asyncio.FIRST_COMPLETED)
                    for task in [t for t in alive if t.done()]:
                        alive.discard(task)
                        if task.exception() is not None:  # not a ModelError (those become records): a bug
                            get.cancel()
                            raise task.exception()  # type: ignore[misc]
                yield get.result()
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
