"""Running the async API from synchronous code: one background event loop, in a daemon thread, for every caller.

The sync twins of `ModelInterface`, `classify` and `RemoteModel` submit their coroutines here, so a script can call
`model.run(...)` whether or not an event loop is already running in its own thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
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
    """Every item of an async iterator, as a list (to hand a whole stream to sync code at once)."""
    return [item async for item in items]


def iterate_sync(items: AsyncIterator[T]) -> Iterator[T]:
    """The items of an async iterator, each handed to sync code as soon as the background loop has it.

    One item is fetched per step, so a stream's first event reaches the caller while the rest is still coming.
    Leaving the loop early (a `break`, an exception, garbage collection) closes the async iterator on its loop,
    which ends the underlying call instead of leaving it running.
    """
    loop = background_loop()
    try:
        while True:
            try:
                item = asyncio.run_coroutine_threadsafe(_next(items), loop).result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            asyncio.run_coroutine_threadsafe(aclose(), loop).result()


async def _next(items: AsyncIterator[T]) -> T:
    return await items.__anext__()
