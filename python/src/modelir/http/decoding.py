"""A streamed answer as raw events: SSE decoded by `httpx-sse`, NDJSON split into lines, a cut stream told apart
from a malformed answer, and bytes that are not UTF-8 replaced with U+FFFD and flagged on the event
(`RawEvent.damaged`), never silently: `Model` reports them as `MALFORMED_RESPONSE`."""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from typing import cast

import httpx
import httpx_sse
import orjson

from modelir import errors
from modelir.transports.base import RawEvent


async def decode_stream(raw: httpx.Response, stream_format: str | None) -> AsyncIterator[RawEvent]:
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
                yield RawEvent("", line.decode("utf-8", "replace").encode(), damaged=True)
                continue
            yield RawEvent("", line)
        return
    text = _CheckedText(raw)
    seen = 0
    async for sse in httpx_sse.EventSource(cast(httpx.Response, text)).aiter_sse():
        damaged, seen = text.damaged > seen, text.damaged
        yield RawEvent(sse.event if sse.event != "message" else "", sse.data.encode(), damaged)


class _CheckedText:
    """The response as `httpx_sse.EventSource` reads it (`headers`, `aiter_text`), decoding UTF-8 strictly and
    counting what it had to replace (httpx's own `aiter_text` replaces invalid bytes without a word)."""

    def __init__(self, raw: httpx.Response) -> None:
        self.headers = raw.headers
        self._raw = raw
        self._strict = codecs.getincrementaldecoder("utf-8")()
        self.damaged = 0  # chunks in which bytes that are not UTF-8 were replaced

    def _decode(self, chunk: bytes, final: bool = False) -> str:
        state = self._strict.getstate()
        try:
            return self._strict.decode(chunk, final)
        except UnicodeDecodeError:
            self.damaged += 1
            lenient = codecs.getincrementaldecoder("utf-8")("replace")
            lenient.setstate(state)  # a sequence split across chunks is still whole
            text = lenient.decode(chunk, final)
            self._strict.setstate(lenient.getstate())
            return text

    async def aiter_text(self) -> AsyncIterator[str]:
        async for chunk in self._raw.aiter_bytes():
            if text := self._decode(chunk):
                yield text
        if tail := self._decode(b"", final=True):
            yield tail


async def ndjson_lines(raw: httpx.Response) -> AsyncIterator[bytes]:
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
