"""Message content from plain Python: chat messages, images (from paths, URLs or bytes), tool results."""

from __future__ import annotations

import datetime
import enum
import json
import mimetypes
import os
import re
from pathlib import Path
from typing import Any

from modelir.v1 import content_pb2
from modelir.writing.arguments import ArgumentError, enum_value

ContentLike = str | content_pb2.Part | bytes | os.PathLike[str]


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image(
    source: str | bytes | os.PathLike[str], *, mime_type: str | None = None, field: str = "image"
) -> content_pb2.Part:
    """An image part from a file path, raw bytes, or an http(s)/gs/data URL (the URL is passed, not fetched)."""
    if isinstance(source, bytes | bytearray):
        mime = mime_type or _sniff(bytes(source))
        if mime is None:
            raise ArgumentError(f"{field}.mime_type", "a MIME type: the bytes are not PNG, JPEG, GIF or WebP")
        return content_pb2.Part(blob=content_pb2.Blob(mime_type=mime, data=bytes(source)))
    if isinstance(source, str) and re.match(r"^(https?|gs|data):", source):
        mime = mime_type or (source[5:].split(";", 1)[0] if source.startswith("data:") else None)
        mime = mime or mimetypes.guess_type(source.split("?", 1)[0])[0]
        if mime is None:
            raise ArgumentError(f"{field}.mime_type", "a MIME type: it cannot be told from the URL")
        return content_pb2.Part(blob=content_pb2.Blob(mime_type=mime, uri=source))
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise ArgumentError(field, "an existing file, image bytes, or an http(s)/gs/data URL", str(source))
        data = path.read_bytes()
        mime = mime_type or _sniff(data) or mimetypes.guess_type(path.name)[0]
        if mime is None:
            raise ArgumentError(f"{field}.mime_type", f"a MIME type: {path.name} is not a known image type")
        return content_pb2.Part(blob=content_pb2.Blob(mime_type=mime, data=data))
    raise ArgumentError(field, "a file path, image bytes, or an http(s)/gs/data URL", source)


def _part(item: ContentLike, field: str) -> content_pb2.Part:
    if isinstance(item, content_pb2.Part):
        return item
    if isinstance(item, str):
        return content_pb2.Part(text=item)
    if isinstance(item, bytes | bytearray | os.PathLike):
        return image(item, field=field)
    raise ArgumentError(field, "text (str), a Part, image bytes or an image path", item)


def chat_message(role: str, *content: ContentLike, name: str = "") -> content_pb2.Message:
    """A message from text, images (bytes or a path; `image()` for URLs) and parts:
    `chat_message("user", "What is this?", Path("cat.png"))`."""
    role_value = enum_value(content_pb2.Role, role, field="role")
    parts = [_part(item, f"content[{i}]") for i, item in enumerate(content)]
    return content_pb2.Message(role=role_value, parts=parts, name=name)


def tool_result(
    call: content_pb2.ToolCall | content_pb2.Part, result: Any, *, failed: bool = False
) -> content_pb2.Message:
    """The tool message answering `call`: text as is, anything else as JSON; `failed=True` marks an error."""
    if isinstance(call, content_pb2.Part):
        call = call.tool_call
    if not isinstance(call, content_pb2.ToolCall) or (not call.id and not call.name):
        raise ArgumentError("tool_result.call", "the ToolCall being answered (from view(response).tool_calls)", call)
    if isinstance(result, content_pb2.Part):
        content = [result]
    elif isinstance(result, str):
        content = [content_pb2.Part(text=result)]
    else:
        try:
            content = [content_pb2.Part(text=json.dumps(result, default=_jsonable))]
        except TypeError:
            raise ArgumentError("tool_result.result", "text, or a JSON-serializable value", result) from None
    answer = content_pb2.ToolResult(tool_call_id=call.id, name=call.name, content=content, failed=failed)
    return content_pb2.Message(role=content_pb2.ROLE_TOOL, parts=[content_pb2.Part(tool_result=answer)])


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(type(value).__name__)
