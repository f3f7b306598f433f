"""Anthropic content blocks lifted into IR parts, with citations, stop reasons and usage: shared by both lifts.

From Anthropic's Messages reference (https://docs.anthropic.com/en/api/messages): thinking blocks carry a
`signature`, `redacted_thinking` blocks an opaque `data`; `input_tokens` excludes cache reads and writes.

Provider-run tools (web search, web fetch, code execution; docs: platform.claude.com/docs/en/agents-and-tools/
tool-use/): the call is a `server_tool_use` block (`mcp_tool_use` for an MCP server) and its result a
`*_tool_result` block, both assistant content. A result's JSON is kept whole (the block itself, `type` and
`tool_use_id` included) in `ServerToolResult.result_json`, minus its `encrypted_content` members, which become
pointed `OPAQUE_ARTIFACT_KIND_ENCRYPTED_SEARCH_RESULT` artifacts. Citations have no offsets: each covers the whole
text block that carries it; `encrypted_index` becomes an `OPAQUE_ARTIFACT_KIND_ENCRYPTED_CITATION` artifact. A
block of any other type is a `provider_part` (`anthropic_messages.<type>`, its JSON verbatim). The top-level
`container` and a non-null `stop_details` are message facts with no content block: they become provider parts
`anthropic_messages.container` / `anthropic_messages.stop_details` at the end of the message, and a refusal's
`stop_details.explanation` also a `refusal` part.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelir.reading import stops
from modelir.transports import opaque_json
from modelir.v1 import content_pb2, response_pb2

TRANSPORT = "anthropic_messages"
SIGNATURE = content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE
REDACTED = content_pb2.OPAQUE_ARTIFACT_KIND_REDACTED_DATA
ENCRYPTED_RESULT = content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_SEARCH_RESULT
ENCRYPTED_CITATION = content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_CITATION
STOP_REASONS = {
    "end_turn": response_pb2.FINISH_REASON_STOP,
    "max_tokens": response_pb2.FINISH_REASON_LENGTH,
    "stop_sequence": response_pb2.FINISH_REASON_STOP_SEQUENCE,
    "tool_use": response_pb2.FINISH_REASON_TOOL_CALLS,
    "pause_turn": response_pb2.FINISH_REASON_PAUSED,
    "refusal": response_pb2.FINISH_REASON_REFUSAL,
    "model_context_window_exceeded": response_pb2.FINISH_REASON_CONTEXT_WINDOW,
}
# The provider parts that hold message facts rather than content blocks (see the module docstring).
CONTAINER = f"{TRANSPORT}.container"
STOP_DETAILS = f"{TRANSPORT}.stop_details"
# The members of a call block the IR models; any other (`caller`, ...) rides in the part's provider options.
_CALL_KEYS = frozenset({"type", "id", "name", "input", "server_name"})
CALL_TYPES = ("server_tool_use", "mcp_tool_use")

# Citation types -> the IR kind; the keys each type's request form takes (Anthropic's `TextCitationParam`: the
# response form adds `file_id`, which a request refuses, so replay sends only these).
CITATION_KINDS = {
    "web_search_result_location": content_pb2.CITATION_KIND_URL,
    "char_location": content_pb2.CITATION_KIND_DOCUMENT,
    "page_location": content_pb2.CITATION_KIND_DOCUMENT,
    "content_block_location": content_pb2.CITATION_KIND_DOCUMENT,
    "search_result_location": content_pb2.CITATION_KIND_DOCUMENT,
}
_DOCUMENT_KEYS = ("cited_text", "document_index", "document_title", "type")
CITATION_REQUEST_KEYS = {
    "web_search_result_location": frozenset({"cited_text", "encrypted_index", "title", "type", "url"}),
    "char_location": frozenset({*_DOCUMENT_KEYS, "start_char_index", "end_char_index"}),
    "page_location": frozenset({*_DOCUMENT_KEYS, "start_page_number", "end_page_number"}),
    "content_block_location": frozenset({*_DOCUMENT_KEYS, "start_block_index", "end_block_index"}),
    "search_result_location": frozenset(
        {"cited_text", "end_block_index", "search_result_index", "source", "start_block_index", "title", "type"}
    ),
}


def _opaque_member(path: list[str | int], key: str) -> content_pb2.OpaqueArtifactKind.ValueType | None:
    return ENCRYPTED_RESULT if key == "encrypted_content" else None


def lift_citation(native: dict[str, Any], issuer: content_pb2.Issuer) -> content_pb2.Citation:
    """One native citation. The modelled fields are filled; `native_json` keeps the whole citation (minus its
    `encrypted_index`, which is an artifact) unless the modelled fields rebuild it exactly."""
    kind = native.get("type") or ""
    citation = content_pb2.Citation(
        kind=CITATION_KINDS.get(kind, content_pb2.CITATION_KIND_UNSPECIFIED),
        url=native.get("url") or native.get("source") or "",
        title=native.get("title") or native.get("document_title") or "",
        cited_text=native.get("cited_text") or "",
    )
    for key in ("document_index", "search_result_index"):
        if isinstance(native.get(key), int):
            citation.source_id = str(native[key])
    if isinstance(native.get("encrypted_index"), str):
        citation.artifacts.add(kind=ENCRYPTED_CITATION, data=native["encrypted_index"].encode(), issuer=issuer)
    if citation_native(citation) != native:
        citation.native_json = orjson.dumps({k: v for k, v in native.items() if k != "encrypted_index"}).decode()
    return citation


def citation_native(citation: content_pb2.Citation) -> dict[str, Any] | None:
    """The native citation to replay, or None when it is not one of this transport's (a foreign citation, e.g. a
    Responses annotation, has no Anthropic form; an `encrypted_index` is only taken from this transport)."""
    index = next(
        (
            a.data.decode()
            for a in citation.artifacts
            if a.kind == ENCRYPTED_CITATION and a.issuer.transport == TRANSPORT
        ),
        None,
    )
    if citation.native_json:
        native = orjson.loads(citation.native_json)
        if not isinstance(native, dict) or native.get("type") not in CITATION_KINDS:
            return None
        if index is not None:
            native["encrypted_index"] = index
        return native
    if index is None:
        return None
    return {
        "type": "web_search_result_location",
        "cited_text": citation.cited_text,
        "url": citation.url,
        "title": citation.title,
        "encrypted_index": index,
    }


def _readable_content(block: dict[str, Any]) -> list[content_pb2.Part]:
    """The readable part of a result: a fetched document's text, or a program's stdout (then stderr)."""
    content = block.get("content")
    if not isinstance(content, dict):
        return []
    out = []
    document = content.get("content")
    if isinstance(document, dict) and isinstance(document.get("source"), dict):
        source = document["source"]
        if source.get("type") == "text" and isinstance(source.get("data"), str):
            out.append(content_pb2.Part(text=source["data"]))
    for stream in ("stdout", "stderr"):
        if isinstance(content.get(stream), str) and content[stream]:
            out.append(content_pb2.Part(text=content[stream]))
    return out


def _failed(block: dict[str, Any]) -> bool:
    content = block.get("content")
    kind = content.get("type") if isinstance(content, dict) else None
    return bool(block.get("is_error")) or (isinstance(kind, str) and kind.endswith("_error"))


def lift_block(block: dict[str, Any], issuer: content_pb2.Issuer, call_names: dict[str, str]) -> content_pb2.Part:
    """One content block as a part. `call_names` maps the ids of the server tool calls seen so far to their
    names (a result is named after its call); calls lifted here are added to it."""
    kind = block.get("type")
    if kind == "text":
        part = content_pb2.Part(text=block.get("text") or "")
        part.citations.extend(lift_citation(c, issuer) for c in block.get("citations") or ())
        return part
    if kind == "thinking":
        part = content_pb2.Part(reasoning=content_pb2.Reasoning(text=block.get("thinking") or ""))
        part.artifacts.add(kind=SIGNATURE, data=(block.get("signature") or "").encode(), issuer=issuer)
        return part
    if kind == "redacted_thinking":
        part = content_pb2.Part(reasoning=content_pb2.Reasoning())
        part.artifacts.add(kind=REDACTED, data=(block.get("data") or "").encode(), issuer=issuer)
        return part
    if kind == "tool_use":
        arguments = orjson.dumps(block.get("input") or {}).decode()
        return content_pb2.Part(
            tool_call=content_pb2.ToolCall(
                id=block.get("id") or "", name=block.get("name") or "", arguments_json=arguments
            )
        )
    if kind in CALL_TYPES:
        return server_tool_call(block, orjson.dumps(block.get("input") or {}).decode(), call_names, issuer)
    if isinstance(kind, str) and kind.endswith("_tool_result"):
        result_json, artifacts = opaque_json.extract(block, _opaque_member, issuer)
        call_id = block.get("tool_use_id") or ""
        result = content_pb2.ServerToolResult(
            tool_call_id=call_id,
            name=call_names.get(call_id) or kind.removesuffix("_tool_result"),
            content=_readable_content(block),
            result_json=result_json,
            failed=_failed(block),
            issuer=issuer,
        )
        return content_pb2.Part(server_tool_result=result, artifacts=artifacts)
    return provider_part(f"{TRANSPORT}.{kind}", block, issuer)


def server_tool_call(
    block: dict[str, Any], arguments_json: str, call_names: dict[str, str], issuer: content_pb2.Issuer
) -> content_pb2.Part:
    """A `server_tool_use` / `mcp_tool_use` block, with its input as JSON text (compact, as the stream gives)."""
    call = content_pb2.ServerToolCall(
        id=block.get("id") or "",
        name=block.get("name") or "",
        arguments_json=arguments_json,
        server_label=block.get("server_name") or "",
        issuer=issuer,
    )
    call_names[call.id] = call.name
    part = content_pb2.Part(server_tool_call=call)
    extra = {k: v for k, v in block.items() if k not in _CALL_KEYS}
    if extra:
        part.provider_options.add(transport=TRANSPORT, options_json=orjson.dumps(extra).decode())
    return part


def provider_part(kind: str, native: Any, issuer: content_pb2.Issuer) -> content_pb2.Part:
    return content_pb2.Part(
        provider_part=content_pb2.ProviderPart(type=kind, native_json=orjson.dumps(native).decode(), issuer=issuer)
    )


def message_facts(container: Any, stop_details: Any, issuer: content_pb2.Issuer) -> list[content_pb2.Part]:
    """The parts that carry `container` and `stop_details` (see the module docstring); none when they are null."""
    parts = []
    if isinstance(stop_details, dict):
        if isinstance(stop_details.get("explanation"), str) and stop_details["explanation"]:
            parts.append(content_pb2.Part(refusal=stop_details["explanation"]))
        parts.append(provider_part(STOP_DETAILS, stop_details, issuer))
    if isinstance(container, dict):
        parts.append(provider_part(CONTAINER, container, issuer))
    return parts


def finish(choice: response_pb2.Choice, stop_reason: str | None, stop_sequence: str | None) -> None:
    choice.raw_finish_reason = stop_reason or ""
    choice.finish_reason = (
        STOP_REASONS.get(stop_reason, response_pb2.FINISH_REASON_OTHER)
        if stop_reason
        else response_pb2.FINISH_REASON_UNSPECIFIED
    )
    stops.set_stop(choice, stop_sequence)


# Native usage members -> `Usage.details` keys (documented in response.proto).
_DETAILS = (
    ("cache_creation", "ephemeral_5m_input_tokens", "cache_write_5m_token_count"),
    ("cache_creation", "ephemeral_1h_input_tokens", "cache_write_1h_token_count"),
    ("server_tool_use", "web_search_requests", "web_search_request_count"),
    ("server_tool_use", "web_fetch_requests", "web_fetch_request_count"),
)


# The `usage.iterations` entries that are this answer's own sampling: server-side compaction runs its own
# iteration, and a fallback model may serve the answer. An advisor's sub-inference is billed apart (at the advisor
# model's rates), so it stays out of the sums (its entry is kept as a native fact, `native_fields`).
_OWN_ITERATIONS = ("message", "compaction", "fallback_message")
_COUNTS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _summed(raw: dict[str, Any]) -> dict[str, Any]:
    """The counts of every own iteration summed (with compaction, the top-level counts are only the last
    iteration's: 612 input tokens where 60,997 were processed), when the answer lists its iterations."""
    iterations = [i for i in raw.get("iterations") or () if isinstance(i, dict) and i.get("type") in _OWN_ITERATIONS]
    if not iterations:
        return raw
    totals = {key: sum(i.get(key) or 0 for i in iterations) for key in _COUNTS}
    return {**raw, **{key: value for key, value in totals.items() if key in raw or value}}


def usage(raw: dict[str, Any] | None, usage: response_pb2.Usage) -> str:
    """Fill `usage` from native usage; returns the `service_tier` it names ('' when none). Anthropic's
    `input_tokens` excludes cache reads and writes; the IR's input count includes them. `output_tokens` includes
    thinking (`output_tokens_details.thinking_tokens`, the reasoning count)."""
    if not raw:
        return ""
    raw = _summed(raw)
    if raw.get("input_tokens") is not None:
        read = raw.get("cache_read_input_tokens") or 0
        write = raw.get("cache_creation_input_tokens") or 0
        usage.input_token_count = raw["input_tokens"] + read + write
        if raw.get("cache_read_input_tokens") is not None:
            usage.cache_read_token_count = read
        if raw.get("cache_creation_input_tokens") is not None:
            usage.cache_write_token_count = write
    if raw.get("output_tokens") is not None:
        usage.output_token_count = raw["output_tokens"]
    details = raw.get("output_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("thinking_tokens"), int):
        usage.reasoning_token_count = details["thinking_tokens"]
    for group, native, key in _DETAILS:
        value = (raw.get(group) or {}).get(native) if isinstance(raw.get(group), dict) else None
        if isinstance(value, int):
            usage.details[key] = value
    tier = raw.get("service_tier")
    return tier if isinstance(tier, str) else ""
