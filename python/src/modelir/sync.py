"""Running the async API from synchronous code: one background event loop, in a daemon thread, for every caller.

The sync twins of `ModelInterface`, `classify` and `RemoteModel` submit their coroutines here, so a script can call
`model.run(...)` whether or not an event loop is already running in its own thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The shared loop, started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="modelir-sync", daemon=True).start()
        return _loop


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on the background loop and wait for its result (its exception is raised here)."""
    return asyncio.run_coroutine_threadsafe(coro, background_loop()).result()


async def collect(items: AsyncIterator[T]) -> list[T]:
    """Every item of an async iterator, as a list (to hand a stream to sync code)."""
    return [item async for item in items]
