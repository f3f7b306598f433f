"""A streamed answer as raw events: SSE decoded by `httpx-sse`, NDJSON split into lines, a cut stream told apart
from a malformed answer."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
            yield RawEvent("", line)
        return
    async for sse in httpx_sse.EventSource(raw).aiter_sse():
        yield RawEvent(sse.event if sse.event != "message" else "", sse.data.encode())


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
