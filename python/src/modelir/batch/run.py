"""A batch run: inputs in, one record per key out, resumable, whichever scheduler makes the calls.

The run owns what must not depend on the scheduler: which keys are still to do (from the ledger), the record
file, provenance (built in `calls`) and progress. A scheduler only turns the keys to do into records.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from modelir.batch.ledger import SUCCESS, Ledger
from modelir.batch.local import LocalScheduler
from modelir.batch.progress import Progress
from modelir.interface import ModelInterface
from modelir.v1 import capabilities_pb2, record_pb2, request_pb2


class Scheduler(Protocol):
    def run(
        self,
        model: ModelInterface,
        manifest: capabilities_pb2.CapabilityManifest,
        todo: Sequence[tuple[str, request_pb2.Request]],
        previous_attempts: Mapping[str, int],
    ) -> AsyncIterator[record_pb2.Record]:
        """Yield exactly one record (successful or failed) for every item of `todo`."""
        ...


@dataclass(slots=True)
class Summary:
    total: int
    skipped: int
    ok: int
    failed: int


async def run_batch(
    model: ModelInterface,
    inputs: Iterable[tuple[str, request_pb2.Request]],
    output: str | Path,
    *,
    concurrency: int = 8,
    scheduler: Scheduler | None = None,
    resume: bool = False,
    retry_failed: bool = True,
    fmt: str | None = None,
    progress_stream: TextIO | None = None,
    run_metadata: dict[str, str] | None = None,
) -> Summary:
    """Run every input not yet done into `output`. Without a scheduler, a local pool of `concurrency` workers."""
    inputs = list(inputs)
    scheduler = scheduler or LocalScheduler(concurrency)
    ledger = Ledger.open(output, resume=resume, retry_failed=retry_failed, fmt=fmt, run_metadata=run_metadata)
    try:
        ledger.check_inputs(inputs, model.name)
    except BaseException:
        ledger.close()
        raise
    counts = {"ok": 0, "failed": 0}
    todo = [(key, request) for key, request in inputs if key not in ledger.done]
    progress = Progress(len(inputs), progress_stream, already=len(inputs) - len(todo))
    try:
        manifest = await model.acapabilities()
        expected = {key for key, _ in todo}
        async for record in scheduler.run(model, manifest, todo, ledger.previous_attempts):
            if record.key not in expected:
                raise RuntimeError(f"the scheduler returned a record for {record.key!r}, which was not to do")
            expected.discard(record.key)
            ledger.append(record)
            ok = record.status in SUCCESS
            counts["ok" if ok else "failed"] += 1
            progress.update(ok=ok)
        if expected:
            raise RuntimeError(f"the scheduler returned no record for {len(expected)} keys, e.g. {min(expected)!r}")
    finally:
        ledger.close()
        progress.finish()
    return Summary(total=len(inputs), skipped=len(inputs) - len(todo), ok=counts["ok"], failed=counts["failed"])
