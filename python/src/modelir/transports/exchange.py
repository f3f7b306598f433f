"""A native HTTP exchange as data: the request a transport lowers to, the answer it lifts, one raw stream event, and
the UTF-8 repair every answer goes through before its lift. Plain values, so that lowering and lifting stay pure
and the executor alone does I/O (`transports.base` re-exports them, where most code imports them from)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A native HTTP request, as data."""

    method: str
    path: str  # relative to the model's base URL
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    stream_format: str | None = None  # "sse", "ndjson", or None for a unary answer


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A native HTTP answer, as data. Header names are lower case."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class RawEvent(NamedTuple):
    """One event of a native stream: an SSE event (name and data) or one NDJSON line (data only). `damaged`: bytes
    that were not UTF-8 arrived since the previous event and were replaced with U+FFFD (`http.decoding`). A named
    tuple: one is made per streamed token, and a frozen dataclass costs about twice as much to make."""

    event: str
    data: bytes
    damaged: bool = False


def utf8_repaired(body: bytes) -> tuple[bytes, str]:
    """`body` and "" when it is UTF-8 (as every JSON answer must be); else the body with each invalid sequence
    replaced by U+FFFD, and what was wrong. A lift reads the repaired body, so what arrived intact is kept, and the
    damage is reported (`MALFORMED_RESPONSE`) instead of a key that no longer matches dropping its value silently."""
    try:
        body.decode()
    except UnicodeDecodeError as exc:
        repaired = body.decode("utf-8", "replace").encode()
        return (
            repaired,
            f"the provider's answer is not valid UTF-8 (first at byte {exc.start}); its output may be incomplete",
        )
    return body, ""
