"""Batch progress on the terminal: done / failed / rate / ETA, whichever scheduler runs the calls."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """done / failed / rate / ETA: one redrawn line on a terminal, a plain line every `every` seconds otherwise."""

    def __init__(self, total: int, stream: TextIO | None = None, every: float = 5.0, *, already: int = 0) -> None:
        # Counted against the whole input: a resumed run starts at the `already` done before it.
        self.total = total
        self.already = already
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.every = every
        self.done = self.failed = 0
        self.started = self._last = time.monotonic()
        self._drawn = 0  # the length of the line on the terminal: a shorter one is padded over it

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (self.done + self.failed) / elapsed
        left = self.total - self.already - self.done - self.failed
        eta = f"{left / rate:,.0f}s" if rate > 0 else "?"
        before = f" ({self.already} before this run)" if self.already else ""
        done = self.already + self.done
        return f"done {done}/{self.total}{before}  failed {self.failed}  {rate:,.1f}/s  ETA {eta}"

    def update(self, *, ok: bool) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
        now = time.monotonic()
        if self.tty and now - self._last >= 0.1:
            self.stream.write("\r" + self._redrawn())
            self.stream.flush()
            self._last = now
        elif not self.tty and now - self._last >= self.every:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self._last = now

    def _redrawn(self) -> str:
        """The line, padded with spaces over what the previous one left (no `ETA 8ss` from `ETA 10s`)."""
        line = self.line()
        padded = line.ljust(self._drawn)
        self._drawn = len(line)
        return padded

    def finish(self) -> None:
        self.stream.write(("\r" + self._redrawn() if self.tty else self.line()) + "\n")
        self.stream.flush()
