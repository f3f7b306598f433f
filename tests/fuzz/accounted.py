"""Did a lifted answer drop a native member silently? Every member its wire's `native_fields` section neither reads,
keeps nor ignores must be named in the response's `unread_native_fields` warning, and kept as a provider part when
it holds content (`transports/accounting.py`). The fuzzer's mutations add, rename and retype members: this checks,
on each lifted input, that the mechanism ran on the path the answer took (unary, stream, every route)."""

from __future__ import annotations

import httpx
from modelir.transports import accounting
from modelir.transports.base import HttpTransport
from modelir.v1 import request_pb2, response_pb2

from tests.recordings import parse_sse


def _payloads(answer: httpx.Response, stream: bool) -> list[bytes]:
    try:
        content = answer.content
    except httpx.ResponseNotRead:  # a stream cut mid-body: its bytes went to the lift only
        return []
    if not stream:
        return [content]
    text = content.decode("utf-8", "replace")
    if "event-stream" not in answer.headers.get("content-type", ""):
        return [line.encode() for line in text.splitlines() if line.strip()]
    return [data.encode() for _, data in parse_sse(text)]


def silently_dropped(
    transport: HttpTransport,
    request: request_pb2.Request,
    answer: httpx.Response,
    response: response_pb2.Response,
    *,
    stream: bool,
) -> list[str]:
    """The unread members of `answer` that `response` neither names in a warning nor keeps (empty: none)."""
    section = accounting.schema(transport.native_fields(request, "stream" if stream else "unary"))
    if section is None:
        return ["(no native_fields section)"]
    named = " ".join(w.message for w in response.warnings if w.code == accounting.UNREAD)
    kept = {
        p.provider_part.type
        for c in response.choices
        for p in c.message.parts
        if p.WhichOneof("content") == "provider_part"
    }
    choices = {c.index for c in response.choices}
    dropped = []
    for payload in _payloads(answer, stream):
        for finding in accounting.findings(section, payload):
            if finding.fact:
                continue
            if finding.path not in named:
                dropped.append(f"{finding.path} (not named)")
            elif accounting.worth_keeping(finding) and finding.choice in choices:
                if f"{transport.name}.{finding.below_choice}" not in kept:
                    dropped.append(f"{finding.path} (not kept)")
    return dropped
