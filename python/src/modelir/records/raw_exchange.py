"""The kept raw exchange (`Request.include_raw`): status, content type, body or events, the answer's headers
without credentials or cookies, and, when asked, the lowered request body as sent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from modelir.http.redaction import REDACTED, redact_bytes
from modelir.transports.base import HttpRequest
from modelir.v1 import embedding_pb2, request_pb2, response_pb2

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
    request: request_pb2.Request | embedding_pb2.EmbedRequest,
    native: HttpRequest,
    *,
    transport: str,
    status: int,
    answer_headers: Mapping[str, str] | None,
    body: bytes = b"",
    events: list[response_pb2.RawStreamEvent] | None = None,
    secrets: tuple[str, ...] = (),
) -> response_pb2.RawExchange:
    """The kept exchange; the configured credentials are redacted from everything in it (a provider can reflect the
    key in a body or an event)."""
    if secrets:
        body = redact_bytes(body, secrets)
        for event in events or ():
            event.data = redact_bytes(event.data, secrets)
    kept = response_pb2.RawExchange(transport=transport, http_status=status, body=body, stream_events=events or ())
    if answer_headers is not None:
        kept.content_type = answer_headers.get("content-type", "")
        for header in headers(answer_headers):
            if any(secret in header.value for secret in secrets):
                header.value = REDACTED
            kept.response_headers.append(header)
    if isinstance(request, request_pb2.Request) and request.include_lowered_request:
        kept.request_body = native.body
    return kept
