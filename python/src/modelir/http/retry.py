"""When and how long to wait: the retry policy (attempts, backoff with full jitter, provider hints) and the
deadline as an asyncio timeout."""

from __future__ import annotations

import asyncio
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4
    backoff_base: float = 0.5  # seconds before the second attempt, doubled each time (before jitter)
    backoff_max: float = 30.0
    retry_after_max: float = 120.0  # a provider hint longer than this is not worth waiting for
    # An attempt is not started with less than this left before the deadline: it could not finish, and the caller
    # would learn "deadline exceeded" instead of what the provider said (429, 503).
    min_attempt_seconds: float = 0.25

    def backoff(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max, base * 2**(attempt-1))]."""
        return random.uniform(0, min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))


def timeout_for(deadline: float | None, loop: asyncio.AbstractEventLoop | None = None) -> Any:
    """A timeout for a `time.monotonic()` deadline, on the running loop's clock; no context at all without one
    (entering `asyncio.timeout_at(None)` still costs a `current_task()` lookup and its bookkeeping).

    `loop` is the running loop when the caller knows it already (`Executor.loop`): on Python 3.11 every
    `asyncio.get_running_loop()` is a `getpid` system call, and a served call is short enough for that to show."""
    if deadline is None:
        return nullcontext()
    if loop is None:
        loop = asyncio.get_running_loop()
    return asyncio.timeout_at(loop.time() + (deadline - time.monotonic()))
