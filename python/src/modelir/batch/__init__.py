"""Batch runs: many requests through one model into a record file, resumable after a crash.

Every call becomes one record (failures too, with their error). Resuming skips keys that already have a
successful record, retries failed ones (unless told not to), and appends; the newest record of a key wins.
The pieces: `inputs` (reading and keys), `ledger` (the record file and resume), `calls` (a call becomes a record
with provenance), `progress`, `run` (the run itself), and the schedulers that make the calls: `local` (asyncio
workers in this process) and `ray_scheduler` (Ray actors on a cluster, the `ray` extra).
"""

from modelir.batch.calls import call_to_record
from modelir.batch.inputs import BatchInputError, position_key, read_inputs, request_key
from modelir.batch.ledger import SUCCESS, ChangedInputError, Ledger
from modelir.batch.local import LocalScheduler
from modelir.batch.progress import Progress
from modelir.batch.run import Scheduler, Summary, run_batch

__all__ = [
    "SUCCESS",
    "BatchInputError",
    "ChangedInputError",
    "Ledger",
    "LocalScheduler",
    "Progress",
    "Scheduler",
    "Summary",
    "call_to_record",
    "position_key",
    "read_inputs",
    "request_key",
    "run_batch",
]
