"""Anthropic Messages lowering: IR messages, parts and tools as the request's content blocks, system prompt and tool
declarations (cache breakpoints, citations, server-tool replay, block options); `blocks` lifts them back."""

from __future__ import annotations

import base64
from typing import Any

import orjson

from modelir.pipeline import content_kinds
from modelir.pipeline.survey import SeenMessage, Survey
from modelir.transports import _common as common
from modelir.transports import opaque_json
from modelir.transports.anthropic import blocks
from modelir.v1 import content_pb2, request_pb2

SIGNATURE = blocks.SIGNATURE
REDACTED = blocks.REDACTED
# The provider-run tool types this wire declares (Anthropic's server tools; each is sent as `{type, name,
# ...config}`), with the name Anthropic gives each when the IR leaves `ProviderTool.name` empty.
PROVIDER_TOOL_TYPES = {
    "web_search_20250305": "web_search",
    "web_search_20260209": "web_search",
    "web_search_20260318": "web_search",
    "web_fetch_20250910": "web_fetch",
    "web_fetch_20260209": "web_fetch",
    "web_fetch_20260309": "web_fetch",
    "web_fetch_20260318": "web_fetch",
    "code_execution_20250522": "code_execution",
    "code_execution_20250825": "code_execution",
    "code_execution_20260120": "code_execution",
    "code_execution_20260521": "code_execution",
    "tool_search_tool_regex_20251119": "tool_search_tool_regex",
    "tool_search_tool_bm25_20251119": "tool_search_tool_bm25",
}
# The media types of input blobs: images, and documents (PDF, plain text) as `document` blocks.
# Cache-breakpoint TTLs Anthropic takes (`cache_control.ttl`), in seconds.
_CACHE_TTLS = {300: "5m", 3600: "1h"}


def role(message: content_pb2.Message) -> str:
    return "assistant" if message.role == content_pb2.ROLE_ASSISTANT else "user"


def merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive turns of one role (e.g. a tool message after a user message) become one turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"].extend(message["content"])
        else:
            out.append(message)
    return out


def system(messages: list[tuple[content_pb2.Message, SeenMessage]]) -> Any:
    """The system prompt: one string, or text blocks when a part carries a cache breakpoint or options."""
    if not any(
        m.provider_options or any(p.provider_options or p.HasField("cache_breakpoint") for p in m.parts)
        for m, _ in messages
    ):
        return "\n\n".join("".join(p.text for p in m.parts) for m, _ in messages)
    return [block for m, noted in messages for block in content(m, noted)]


def content(message: content_pb2.Message, noted: SeenMessage) -> list[dict[str, Any]]:
    """A message's blocks, from its parts as the request's `survey` noted them (each part's kind, a tool result's
    content after it); the message's own provider options go on its last block (where a message-level
    `cache_control` belongs)."""
    content = []
    parts = noted.parts
    for n, (_, k, part, kind, _) in enumerate(parts):
        if k >= 0:
            continue  # lowered with its tool result
        inner = None
        if kind == "tool_result":
            inner = []
            for _, inner_k, inner_part, inner_kind, _ in parts[n + 1 :]:
                if inner_k < 0:
                    break
                inner.append((inner_part, inner_kind))
        if (block := _block(part, kind, inner)) is not None:
            content.append(block)
    options = _entry_options(message.provider_options, blocks.TRANSPORT)
    if options and content:
        content[-1].update(options)
    return content


def replayed_container(seen: Survey, first: int) -> str | None:
    """The id of the last code-execution container in the replayed turns (messages `first` on: the system prompt
    is not a turn): the conversation continues in it. A container is a provider part, which the survey notes
    among the parts a provider issued."""
    container = None
    for i, _, part, kind in seen.issued:
        if i >= first and kind == "provider_part" and part.provider_part.type == blocks.CONTAINER:
            container = orjson.loads(part.provider_part.native_json).get("id") or container
    return container


def cache_control(part: content_pb2.Part) -> dict[str, Any] | None:
    ttl = part.cache_breakpoint.ttl
    if not part.cache_breakpoint.HasField("ttl"):
        return {"type": "ephemeral"}
    name = _CACHE_TTLS.get(ttl.seconds) if not ttl.nanos else None
    return {"type": "ephemeral", "ttl": name} if name else None


def _block(
    part: content_pb2.Part, kind: str | None, inner: list[tuple[content_pb2.Part, str | None]] | None = None
) -> dict[str, Any] | None:
    """One part (of `kind`) as a content block, with its cache breakpoint and options; None for a part with no
    input form (a refusal, the stop details, the container, which `replayed_container` sends). `inner`: a tool
    result's content with its kinds, when the survey noted them."""
    block = _content_block(part, kind, inner)
    if block is None:
        return None
    if part.HasField("cache_breakpoint"):
        block["cache_control"] = cache_control(part)
    block.update(_entry_options(part.provider_options, blocks.TRANSPORT))
    return block


def _document(blob: content_pb2.Blob) -> dict[str, Any]:
    if blob.WhichOneof("source") == "uri":
        return {"type": "document", "source": {"type": "url", "url": blob.uri}}
    if blob.mime_type == "text/plain":
        return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": blob.data.decode()}}
    data = base64.b64encode(blob.data).decode()
    return {"type": "document", "source": {"type": "base64", "media_type": blob.mime_type, "data": data}}


def _content_block(
    part: content_pb2.Part, kind: str | None, inner: list[tuple[content_pb2.Part, str | None]] | None
) -> dict[str, Any] | None:
    if kind == "text":
        block: dict[str, Any] = {"type": "text", "text": part.text}
        citations = [c for c in map(blocks.citation_native, part.citations) if c is not None]
        if citations:
            block["citations"] = [
                {k: v for k, v in c.items() if k in blocks.CITATION_REQUEST_KEYS.get(c["type"], c)} for c in citations
            ]
        return block
    if kind == "blob":
        blob = part.blob
        if not blob.mime_type.startswith("image/"):
            return _document(blob)
        if blob.WhichOneof("source") == "uri":
            return {"type": "image", "source": {"type": "url", "url": blob.uri}}
        data = base64.b64encode(blob.data).decode()
        return {"type": "image", "source": {"type": "base64", "media_type": blob.mime_type, "data": data}}
    if kind == "tool_call":
        call = part.tool_call
        return {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": orjson.loads(call.arguments_json or "{}"),
        }
    if kind == "tool_result":
        result = part.tool_result
        if inner is None:  # a result inside a result, which the survey does not enter
            inner = [(p, p.WhichOneof("content")) for p in result.content]
        content: Any = [b for p, p_kind in inner if (b := _block(p, p_kind)) is not None]
        if len(inner) == 1 and inner[0][1] == "text":
            content = inner[0][0].text
        return {
            "type": "tool_result",
            "tool_use_id": result.tool_call_id,
            "content": content,
            "is_error": result.failed,
        }
    if kind == "reasoning":  # the artifact says which block it was, and its bytes go back exactly as received
        for artifact in part.artifacts:
            if artifact.kind == REDACTED:
                return {"type": "redacted_thinking", "data": artifact.data.decode()}
            if artifact.kind == SIGNATURE:
                return {"type": "thinking", "thinking": part.reasoning.text, "signature": artifact.data.decode()}
    if kind == "server_tool_call":
        server = part.server_tool_call
        call_block: dict[str, Any] = {"type": "server_tool_use", "id": server.id, "name": server.name}
        if server.server_label:
            call_block.update(type="mcp_tool_use", server_name=server.server_label)
        call_block["input"] = orjson.loads(server.arguments_json or "{}")
        return call_block
    if kind == "server_tool_result":
        restored = opaque_json.restore(part.server_tool_result.result_json, part.artifacts)
        return restored if isinstance(restored, dict) else {"content": restored}
    if kind == "provider_part":
        if part.provider_part.type in (blocks.CONTAINER, blocks.STOP_DETAILS):
            return None
        native = orjson.loads(part.provider_part.native_json or "{}")
        return native if isinstance(native, dict) else {"content": native}
    if kind == "refusal":
        return None
    raise content_kinds.NotCarriedError(blocks.TRANSPORT, kind if kind != "reasoning" else "unsigned reasoning")


def tool(tool: request_pb2.Tool) -> dict[str, Any]:
    if tool.WhichOneof("kind") == "provider":
        provider = tool.provider
        declared: dict[str, Any] = {
            "type": provider.type,
            "name": provider.name or PROVIDER_TOOL_TYPES.get(provider.type, provider.type),
        }
        declared.update(orjson.loads(provider.config_json) if provider.config_json else {})
        return declared
    out: dict[str, Any] = {
        "name": tool.function.name,
        "input_schema": common.json_object(tool.function.parameters_json_schema),
    }
    if tool.function.description:
        out["description"] = tool.function.description
    return out


def _entry_options(entries: Any, transport: str) -> dict[str, Any]:
    """This transport's entry of a message's or part's provider options (other entries are for other wires)."""
    for entry in entries:
        if entry.transport == transport:
            options = orjson.loads(entry.options_json or b"{}")
            return options if isinstance(options, dict) else {}
    return {}
