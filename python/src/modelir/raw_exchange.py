"""The kept raw exchange (`Request.include_raw`): status, content type, body or events, the answer's headers
without credentials or cookies, and, when asked, the lowered request body as sent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from modelir.transports.base import HttpRequest
from modelir.v1 import request_pb2, response_pb2

# Headers that can carry credentials or session state: never kept, whatever a provider echoes back.
_NEVER_KEPT = frozenset(
    {"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key", "x-goog-api-key"}
)


def headers(answer: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[response_pb2.HttpHeader]:
    """The answer's headers in order, names lowercased, without the ones that can carry credentials."""
    pairs = answer.items() if isinstance(answer, Mapping) else answer
    out = []
    for name, value in pairs:
        lowered = name.lower()
        if lowered not in _NEVER_KEPT:
            out.append(response_pb2.HttpHeader(name=lowered, value=value))
    return out


def exchange(
    request: request_pb2.Request,
    native: HttpRequest,
    *,
    transport: str,
    status: int,
    answer_headers: Mapping[str, str] | None,
    body: bytes = b"",
    events: list[response_pb2.RawStreamEvent] | None = None,
) -> response_pb2.RawExchange:
    kept = response_pb2.RawExchange(transport=transport, http_status=status, body=body, stream_events=events or ())
    if answer_headers is not None:
        kept.content_type = answer_headers.get("content-type", "")
        kept.response_headers.extend(headers(answer_headers))
    if request.include_lowered_request:
        kept.request_body = native.body
    return kept
