"""A streamed answer as raw events: SSE decoded incrementally on the bytes as they arrive (`SseDecoder`, the
WHATWG event-stream rules), NDJSON split into lines, a cut stream told apart from a malformed answer, and bytes that
are not UTF-8 replaced with U+FFFD and flagged on the event (`RawEvent.damaged`), never silently: `Model` reports
them as `MALFORMED_RESPONSE`.

The SSE decoder works on bytes and builds nothing per event but the `RawEvent`: every line ending (LF, CR, CRLF) is
a bytes `split`, an event's data is its `data:` lines joined, and only data that is not ASCII is decoded (to check
it is UTF-8). `httpx-sse`, which it replaces, decoded the whole stream to text, split it into `str` lines and built a
`ServerSentEvent` per event, only for the lift to encode the data back to bytes: about half of what a streamed token
cost the gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import orjson

from modelir import errors
from modelir.transports.base import RawEvent


class StreamBody(Protocol):
    """A streamed answer as the decoders read it: an `httpx.Response`, or the executor's aiohttp one."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    async def aread(self) -> bytes: ...
    def aiter_bytes(self) -> AsyncIterator[bytes]: ...
    async def aclose(self) -> None: ...


async def decode_stream(raw: StreamBody, stream_format: str | None) -> AsyncIterator[RawEvent]:
    async for batch in decode_batches(raw, stream_format):
        for event in batch:
            yield event


async def decode_batches(raw: StreamBody, stream_format: str | None) -> AsyncIterator[list[RawEvent]]:
    """The raw events of a streamed answer, as the lists that each read of the body completes (never empty)."""
    content_type = raw.headers.get("content-type", "").partition(";")[0].strip().lower()
    if stream_format != "ndjson" and content_type and content_type != "text/event-stream":
        # An answer, not a stream: a proxy's page or a server that ignored `stream`. Retrying will not change it.
        body = (await raw.aread())[:500].decode("utf-8", "replace")
        raise errors.MalformedResponseError(
            f"the provider answered a streamed call with {content_type!r}, not an event stream: {body}",
            http_status=raw.status_code,
        )
    if stream_format == "ndjson":
        async for line in ndjson_lines(raw):
            try:
                line.decode()
            except UnicodeDecodeError:
                yield [RawEvent("", line.decode("utf-8", "replace").encode(), damaged=True)]
                continue
            yield [RawEvent("", line)]
        return
    decoder = SseDecoder()
    delivered = False
    async for chunk in raw.aiter_bytes():
        if not delivered and len(chunk) > _FIRST_PIECE:
            # Nothing has left yet and one read brought a lot (a fast upstream's whole answer): its first events
            # leave before the rest of it is decoded.
            if events := decoder.feed(chunk[:_FIRST_PIECE]):
                delivered = True
                yield events
            chunk = chunk[_FIRST_PIECE:]
        if events := decoder.feed(chunk):
            delivered = True
            yield events


_BOM = b"\xef\xbb\xbf"
_FIRST_PIECE = 2048  # bytes of a long first read decoded before the rest (a few chunks of a chat stream)


class SseDecoder:
    """An event stream (text/event-stream) decoded incrementally: `feed` the bytes as they arrive, in pieces of any
    size, and get the events they complete. Follows the WHATWG rules: lines end with CRLF, LF or CR (a CRLF split
    across two pieces is one line ending); one leading BOM is dropped; a line starting with `:` is a comment; `field:
    value` loses one space after the colon, a line without a colon is a field with no value; `data` lines join with
    LF; `event` names the event (`message`, the default, is ""); `id` and `retry` are read and not needed by any
    lift; unknown fields are ignored; a blank line dispatches the event if it has data (an event with no `data`
    line is none); an event the stream ends inside is never dispatched (it was cut)."""

    __slots__ = ("_buffer", "_data", "_event", "_skip_lf", "_started")

    def __init__(self) -> None:
        self._buffer = b""  # an unfinished line
        self._skip_lf = False  # the last piece ended with a CR
        self._data: list[bytes] = []
        self._event = b""
        self._started = False

    def feed(self, chunk: bytes) -> list[RawEvent]:
        """The events that `chunk` completes, in order."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._buffer = buffer  # may still be a BOM
                return []
            self._started = True
            buffer = buffer.removeprefix(_BOM)
        if b"\r" in buffer:
            # A CR that ends the piece ends its line now; an LF that opens the next piece is then its CRLF's half.
            self._skip_lf = buffer.endswith(b"\r")
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buffer.split(b"\n")
        self._buffer = lines.pop()  # what follows the last line ending: unfinished
        events: list[RawEvent] = []
        data = self._data
        for line in lines:
            if not line:
                if not data:
                    self._event = b""
                elif len(data) == 1 and not self._event and data[0].isascii():  # the usual event, made here
                    events.append(RawEvent("", data[0]))
                    data.clear()
                else:
                    events.append(self._dispatch())
                    data = self._data
                continue
            if line[:6] == b"data: ":  # nearly every line: the usual spelling, read without the general split
                data.append(line[6:])
                continue
            name, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data.append(value)
            elif name == b"event":
                self._event = value
            # A comment (empty name), `id`, `retry` and unknown fields: nothing a lift reads.
        return events

    def _dispatch(self) -> RawEvent:
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        event = self._event
        self._data, self._event = [], b""
        damaged = False
        if not data.isascii():
            try:
                data.decode()
            except UnicodeDecodeError:
                data, damaged = data.decode("utf-8", "replace").encode(), True
        if not event.isascii():
            event = event.decode("utf-8", "replace").encode()
        name = event.decode() if event and event != b"message" else ""
        return RawEvent(name, data, damaged)


async def ndjson_lines(raw: StreamBody) -> AsyncIterator[bytes]:
    """The non-blank lines of an NDJSON body. A stream that delivered lines and then ends inside one (no newline,
    and what is left is the start of a JSON object that does not parse) was cut, whatever the connection said:
    `TruncatedStreamError`, as a broken SSE stream gives. A body that is one broken line is a malformed answer,
    not a cut stream: it goes to the lift, which says so."""
    buffer = bytearray()
    delivered = False
    async for chunk in raw.aiter_bytes():
        buffer += chunk
        if b"\n" not in chunk:
            continue  # a long line arriving in pieces is split once, when it ends
        *lines, rest = bytes(buffer).split(b"\n")
        buffer = bytearray(rest)
        for line in lines:
            if line.strip():
                delivered = True
                yield line.rstrip(b"\r")
    pending = bytes(buffer).strip()
    if pending:
        if delivered and pending.startswith(b"{"):
            try:
                orjson.loads(pending)
            except orjson.JSONDecodeError:
                raise errors.TruncatedStreamError(f"the stream ended inside a line ({len(pending)} bytes)") from None
        yield pending  # a whole last line without its newline, or a malformed answer (the lift says so)
