"""The server's access log: one line per call, formatted in a few microseconds and written in batches.

Going through `logging` cost about 6% of the gateway's CPU (a `LogRecord`, `%`-formatting, `strftime` and one
`write` + `flush` per call). Here a line is one f-string (or one `orjson.dumps` for JSON lines), appended to a
buffer that is written out when it passes 64 KiB, half a second after its first line, on `flush()`, and at exit.
A crash can lose at most that half second of lines. The fields are the server span's: method, model, transport,
status, latency, token counts and trace id.
"""

from __future__ import annotations

import asyncio
import atexit
import sys
import time
from typing import BinaryIO

import orjson

FORMATS = ("text", "json", "off")


class AccessLog:
    """Writes access-log lines to `stream` (binary) as `text`, `json` (JSON lines) or not at all (`off`)."""

    def __init__(
        self,
        stream: BinaryIO | None = None,
        *,
        fmt: str = "text",
        flush_after: float = 0.5,
        max_buffered_bytes: int = 64 * 1024,
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"access log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
        self.fmt = fmt
        self._stream = stream
        # Lines wait in `_buffer` (`_buffered` bytes in all) until there are `_max_buffered` bytes, until
        # `_timer` fires `_flush_after` seconds after the first of them, or until `flush()`.
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._max_buffered = max_buffered_bytes
        self._flush_after = flush_after
        self._timer: asyncio.TimerHandle | None = None
        self._second = -1
        self._second_text = ""
        atexit.register(self.flush)

    def _out(self) -> BinaryIO:
        return self._stream if self._stream is not None else sys.stderr.buffer

    def _timestamp(self, now: float) -> str:
        """`2026-12-01 09:41:07,123`, as the `logging` lines around it; `strftime` runs once per second."""
        second = int(now)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        return f"{self._second_text},{int((now - second) * 1000):03d}"

    def write(
        self,
        method: str,
        model: str,
        transport: str,
        status: str,
        latency_seconds: float,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        trace_id: str = "",
    ) -> None:
        if self.fmt == "off":
            return
        now = time.time()
        if self.fmt == "json":
            line = orjson.dumps(
                {
                    "time": now,
                    "method": method,
                    "model": model,
                    "transport": transport,
                    "status": status,
                    "latency_ms": round(latency_seconds * 1e3, 3),
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "trace_id": trace_id or None,
                },
                option=orjson.OPT_APPEND_NEWLINE,
            )
        else:
            line = (
                f"{self._timestamp(now)} INFO modelir.access {method} model={model} transport={transport} "
                f"status={status} latency_ms={latency_seconds * 1e3:.1f} "
                f"input_tokens={'-' if input_tokens is None else input_tokens} "
                f"output_tokens={'-' if output_tokens is None else output_tokens} trace_id={trace_id or '-'}\n"
            ).encode()
        self._buffer.append(line)
        self._buffered += len(line)
        if self._buffered >= self._max_buffered:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()  # no loop to flush later from: write it now
                return
            self._timer = loop.call_later(self._flush_after, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        out = self._out()
        try:
            out.write(data)
            out.flush()
        except (OSError, ValueError):  # a closed stream at interpreter exit: nothing left to write to
            pass


_current = AccessLog()


def access_log() -> AccessLog:
    """The process's access log (text lines on standard error unless `configure` said otherwise)."""
    return _current


def configure(fmt: str = "text", stream: BinaryIO | None = None) -> AccessLog:
    """Replace the process's access log: `text`, `json` (JSON lines) or `off`."""
    global _current
    _current.flush()
    _current = AccessLog(stream, fmt=fmt)
    return _current
