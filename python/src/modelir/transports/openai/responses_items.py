"""Responses output items beyond text, reasoning and function calls, and text annotations: lifted into IR parts and
citations, and lowered back into input items for replay.

From OpenAI's tool guides (https://platform.openai.com/docs/guides/tools-web-search, tools-file-search,
tools-code-interpreter, image-generation, tools-remote-mcp) and the recordings described in `shared/wire/NOTES.md`:
a hosted-tool item (`web_search_call`, `file_search_call`, `code_interpreter_call`, `image_generation_call`,
`mcp_list_tools`, `mcp_call`) is one output item holding both the call and its result, with no `call_id`; the
server runs it and the client answers nothing. It becomes two parts: a `server_tool_call` (the item id, the tool,
its input) and a `server_tool_result` (readable content, and the whole native item as `result_json`). On replay
the item is sent back from `result_json` with its id, and with its output members emptied (`outputs: null`,
`tools: []`, `output: null`, ...) as the recorded clients did and the service accepted: the server keeps them.
A `compaction` item becomes a `compaction` part with its encrypted state as an artifact; an item of any other type
becomes a `provider_part` (`openai_responses.<type>`, the native JSON verbatim) and is replayed verbatim.

Annotation indices are character offsets into the part's text (NOTES.md); the IR counts UTF-8 bytes.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import orjson

from modelir.transports import _common as common
from modelir.transports.openai import _typed as typed
from modelir.v1 import content_pb2

TRANSPORT = "openai_responses"
COMPACTION = content_pb2.OPAQUE_ARTIFACT_KIND_COMPACTION
# Hosted-tool item type -> (the tool's name in the IR, the members that are the call's input, the members that
# are its output and are emptied on replay, with their empty value).
_HOSTED: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = {
    "web_search_call": ("web_search", ("action",), {}),
    "file_search_call": ("file_search", ("queries",), {"results": None}),
    "code_interpreter_call": ("code_interpreter", ("code", "container_id"), {"outputs": None}),
    "image_generation_call": ("image_generation", (), {"result": None}),
    "mcp_list_tools": ("mcp_list_tools", (), {"tools": []}),
    "mcp_call": ("mcp", ("arguments",), {"output": None}),
}
HOSTED_TYPES = frozenset(_HOSTED)
_IMAGE_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg", "webp": "image/webp"}


def item_parts(item: typed.RawItem, issuer: content_pb2.Issuer) -> list[content_pb2.Part]:
    """The IR parts of an output item of a type the typed structs do not model."""
    value, item_id = item.value, str(item.value.get("id") or "")
    if item.type in _HOSTED:
        return _hosted_parts(item, item_id, issuer)
    if (
        item.type == "compaction"
        and isinstance(value.get("encrypted_content"), str)
        and set(value)
        <= {
            "type",
            "id",
            "encrypted_content",
        }
    ):
        part = content_pb2.Part(item_id=item_id, compaction=content_pb2.Compaction())
        part.artifacts.add(kind=COMPACTION, data=value["encrypted_content"].encode(), issuer=issuer)
        return [part]
    provider = content_pb2.ProviderPart(type=f"{TRANSPORT}.{item.type}", native_json=item.text, issuer=issuer)
    return [content_pb2.Part(item_id=item_id, provider_part=provider)]


def _hosted_parts(item: typed.RawItem, item_id: str, issuer: content_pb2.Issuer) -> list[content_pb2.Part]:
    value = item.value
    name, inputs, _ = _HOSTED[item.type]
    call = content_pb2.ServerToolCall(
        id=item_id, name=name, server_label=str(value.get("server_label") or ""), issuer=issuer
    )
    if item.type == "mcp_call":
        call.name = str(value.get("name") or name)
        call.arguments_json = str(value.get("arguments") or "")
    elif item.type == "web_search_call":
        call.arguments_json = orjson.dumps(value.get("action") or {}).decode()
    else:
        call.arguments_json = orjson.dumps({k: value[k] for k in inputs if k in value}).decode()
    result = content_pb2.ServerToolResult(
        tool_call_id=item_id,
        name=call.name,
        result_json=item.text,
        failed=value.get("status") == "failed" or bool(value.get("error")),
        issuer=issuer,
    )
    if item.type == "image_generation_call" and isinstance(value.get("result"), str):
        # The image is the blob; the native item keeps everything else (its base64 is not stored twice).
        image_format = str(value.get("output_format") or "png")
        result.content.add().blob.CopyFrom(
            content_pb2.Blob(
                mime_type=_IMAGE_TYPES.get(image_format, f"image/{image_format}"),
                data=base64.b64decode(value["result"]),
            )
        )
        result.result_json = orjson.dumps({k: v for k, v in value.items() if k != "result"}).decode()
    elif item.type == "code_interpreter_call":
        for output in value.get("outputs") or ():
            if isinstance(output, dict) and output.get("type") == "logs":
                result.content.add(text=str(output.get("logs") or ""))
    elif item.type == "file_search_call":
        for found in value.get("results") or ():
            if isinstance(found, dict) and isinstance(found.get("text"), str):
                result.content.add(text=found["text"])
    elif item.type == "mcp_call" and isinstance(value.get("output"), str):
        result.content.add(text=value["output"])
    return [content_pb2.Part(item_id=item_id, server_tool_call=call), content_pb2.Part(server_tool_result=result)]


def replay_item(part: content_pb2.Part) -> dict[str, Any] | None:
    """The input item that replays a part of these kinds (None for a hosted call: its result part carries the
    whole item)."""
    kind = part.WhichOneof("content")
    if kind == "server_tool_result":
        item: dict[str, Any] = orjson.loads(part.server_tool_result.result_json)
        item.update(_HOSTED[item["type"]][2])
        return item
    if kind == "compaction":
        encrypted = next(a for a in part.artifacts if a.kind == COMPACTION)
        return {"type": "compaction", "id": part.item_id, "encrypted_content": encrypted.data.decode()}
    if kind == "provider_part":
        native: dict[str, Any] = orjson.loads(part.provider_part.native_json)
        return native
    return None


def replay_problems(parts: list[content_pb2.Part], where: str) -> Iterable[str]:
    """Why parts of these kinds in one message cannot be replayed (`where` formats with the part's index)."""
    for j, part in enumerate(parts):
        kind = part.WhichOneof("content")
        place = where.format(j)
        if kind == "server_tool_call":
            following = parts[j + 1] if j + 1 < len(parts) else None
            if (
                following is None
                or following.WhichOneof("content") != "server_tool_result"
                or following.server_tool_result.tool_call_id != part.server_tool_call.id
            ):
                yield (
                    f"OpenAI Responses replays a hosted tool call from its result part, which must follow it and "
                    f"name it ({place})."
                )
        elif kind == "server_tool_result":
            try:
                item = orjson.loads(part.server_tool_result.result_json)
            except orjson.JSONDecodeError:
                item = None
            if not isinstance(item, dict) or item.get("type") not in _HOSTED or not item.get("id"):
                yield (
                    f"A hosted tool result is replayed from its native item, which its result_json must hold "
                    f"with the item's type and id ({place}.server_tool_result.result_json)."
                )
        elif kind == "compaction":
            if not part.item_id or not any(a.kind == COMPACTION for a in part.artifacts):
                yield f"A replayed compaction needs its item id and its compaction artifact ({place})."
        elif kind == "provider_part":
            provider = part.provider_part
            if provider.issuer.transport != TRANSPORT or not provider.type.startswith(f"{TRANSPORT}."):
                yield f"OpenAI Responses replays only its own provider parts, not {provider.type!r} ({place})."


# ---- annotations <-> citations -------------------------------------------------------------------------------

REPLAYED_CITATION_KINDS = (content_pb2.CITATION_KIND_URL, content_pb2.CITATION_KIND_FILE)
_URL_KEYS = frozenset({"type", "start_index", "end_index", "url", "title"})
_FILE_KEYS = frozenset({"type", "file_id", "filename", "index"})


def citation(raw: dict[str, Any], text: str, native: str) -> content_pb2.Citation:
    """One `output_text` annotation as a citation of `text`; `native` is its JSON text, kept when the citation's
    fields do not carry all of it."""
    kind = raw.get("type")
    out = content_pb2.Citation()
    known: frozenset[str] = frozenset()
    if kind == "url_citation":
        out.kind = content_pb2.CITATION_KIND_URL
        known = _URL_KEYS
    elif kind in ("file_citation", "container_file_citation", "file_path"):
        out.kind = content_pb2.CITATION_KIND_FILE
        known = _FILE_KEYS if kind == "file_citation" else frozenset()
    if isinstance(raw.get("url"), str):
        out.url = raw["url"]
    if isinstance(raw.get("title"), str):
        out.title = raw["title"]
    if isinstance(raw.get("file_id"), str):
        out.source_id = raw["file_id"]
    if isinstance(raw.get("filename"), str):
        out.filename = raw["filename"]
    start, end = raw.get("start_index"), raw.get("end_index")
    if isinstance(raw.get("index"), int):
        start = end = raw["index"]
    if isinstance(start, int) and isinstance(end, int):
        out.start_byte = common.char_to_byte_offset(text, start)
        out.end_byte = common.char_to_byte_offset(text, end)
    if not set(raw) <= known:
        out.native_json = native
    return out


def citations(annotations: list[Any] | None, text: str) -> list[content_pb2.Citation]:
    out = []
    for raw in annotations or ():
        value, native = typed.raw_json(raw)
        out.append(citation(value, text, native))
    return out


def chat_citation(raw: dict[str, Any], text: str) -> content_pb2.Citation:
    """A chat completions annotation (`{type: url_citation, url_citation: {start_index, end_index, url, title}}`,
    https://platform.openai.com/docs/guides/tools-web-search?api-mode=chat) as a citation of the content."""
    inner = raw.get(str(raw.get("type")))
    flat = (
        {"type": raw.get("type"), **inner} if isinstance(inner, dict) and set(raw) == {"type", raw.get("type")} else raw
    )
    return citation(flat, text, orjson.dumps(raw).decode())


def _char_offset(text: str, byte_offset: int) -> int:
    return len(text.encode()[:byte_offset].decode("utf-8", "ignore"))


def annotations_of(part: content_pb2.Part) -> list[dict[str, Any]]:
    """A text part's citations as `output_text.annotations` again (native JSON where it was kept)."""
    out = []
    for cited in part.citations:
        if cited.native_json:
            out.append(orjson.loads(cited.native_json))
            continue
        start = _char_offset(part.text, cited.start_byte)
        end = _char_offset(part.text, cited.end_byte)
        if cited.kind == content_pb2.CITATION_KIND_URL:
            out.append(
                {"type": "url_citation", "start_index": start, "end_index": end, "url": cited.url, "title": cited.title}
            )
        else:
            out.append(
                {"type": "file_citation", "file_id": cited.source_id, "filename": cited.filename, "index": start}
            )
    return out
