"""Pieces every transport shares: JSON bodies, the provider-options escape hatch, sampling fields."""

from __future__ import annotations

from typing import Any

import orjson

from modelir import errors
from modelir.logprobs.build import VLLM_MINUS_INFINITY
from modelir.pipeline.survey import Survey
from modelir.v1 import content_pb2, embedding_pb2, request_pb2

__all__ = ["VLLM_MINUS_INFINITY"]


SYSTEM_ROLES = (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER)


def late_system_messages(request: request_pb2.Request) -> list[int]:
    """The system or developer messages that come after the conversation began, for wires with one system prompt."""
    late, began = [], False
    for i, message in enumerate(request.conversation.messages):
        began = began or message.role not in SYSTEM_ROLES
        if began and message.role in SYSTEM_ROLES:
            late.append(i)
    return late


def non_text_tool_results(request: request_pb2.Request, transport: str, seen: Survey | None = None) -> list[str]:
    """Reasons to refuse tool results holding more than text, for wires whose tool results are text only (from
    `seen`, the request's `survey`, when given)."""
    if seen is not None:
        return [
            f"{transport} takes only text in tool results "
            f"(conversation.messages[{i}].parts[{j}].tool_result.content[{k}] is {kind})."
            for i, message in enumerate(seen.messages)
            for j, k, _, kind, _ in message.parts
            if k >= 0 and kind != "text"
        ]
    return [
        f"{transport} takes only text in tool results "
        f"(conversation.messages[{i}].parts[{j}].tool_result.content[{k}] is {inner.WhichOneof('content')})."
        for i, message in enumerate(request.conversation.messages)
        for j, part in enumerate(message.parts)
        if part.WhichOneof("content") == "tool_result"
        for k, inner in enumerate(part.tool_result.content)
        if inner.WhichOneof("content") != "text"
    ]


def parse_json(body: bytes, what: str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise errors.MalformedResponseError(f"the provider's {what} is not valid JSON: {exc}") from None


def array(container: Any, key: str) -> list[Any]:
    """The JSON array at `container[key]`: empty when absent or null, and a shape error (`TypeError`, typed as a
    malformed answer by the caller) for anything else. `container.get(key) or []` would read `false`, `0` or `""`
    as "no choices" and turn a wrong-shape answer into an empty success."""
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{key!r} is a JSON {type(value).__name__}, not an array")
    return value


def provider_options(request: request_pb2.Request | embedding_pb2.EmbedRequest, transport: str) -> dict[str, Any]:
    """The request's provider options for `transport` (entries for other transports are for fallbacks)."""
    for entry in request.provider_options:
        if entry.transport == transport:
            options: dict[str, Any] = orjson.loads(entry.options_json or b"{}")
            return options
    return {}


def json_object(text: str) -> Any:
    return orjson.loads(text) if text else {"type": "object", "properties": {}}


def copy_sampling(
    sampling: request_pb2.SamplingParams, target: dict[str, Any], fields: str, *, present: dict[str, Any] | None = None
) -> None:
    """Copy the sampling fields a request sets into a native body. `fields` names them, space-separated, as
    `ir_name` when the wire uses the IR's name and `ir_name:native_name` when it renames it. `stop` and
    `stop_token_ids` are copied when not empty, `choice_count` when above one, the rest when set.

    The keys go in the order `fields` names them; what is set is read with one `ListFields` (a request sets two or
    three of the dozen; `present` is that reading when the caller has it: `Survey.sampling`), and `fields` is
    parsed once per wire."""
    spec = _SAMPLING_SPECS.get(fields)
    if spec is None:
        spec = _SAMPLING_SPECS[fields] = tuple((f, k or f) for f, _, k in (s.partition(":") for s in fields.split()))
    if present is None:
        present = {descriptor.name: value for descriptor, value in sampling.ListFields()}
    if not present:
        return
    for field, key in spec:
        value = present.get(field)
        if value is None:
            continue
        if field in ("stop", "stop_token_ids"):
            target[key] = list(value)
        elif field != "choice_count" or value > 1:
            target[key] = value


# `copy_sampling`'s `fields`, parsed: (IR name, native name) pairs in order.
_SAMPLING_SPECS: dict[str, tuple[tuple[str, str], ...]] = {}


def char_to_byte_offset(text: str, index: int) -> int:
    """The UTF-8 byte offset of the code point at `index` in `text` (citations are stored in bytes; providers that
    count characters, such as Responses annotations, are converted with this). Clamped to the text's ends."""
    return len(text[: max(0, min(index, len(text)))].encode())
