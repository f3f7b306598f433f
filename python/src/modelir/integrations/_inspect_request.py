"""Inspect -> IR: Inspect's messages, tools, tool choice and `GenerateConfig` as one modelir `Request`.

Whatever `GenerateConfig` asks that the IR cannot say is refused by field name; nothing is dropped.
"""

from __future__ import annotations

import base64
import json

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    Content,
    ContentImage,
    ContentReasoning,
    ContentText,
    GenerateConfig,
)
from inspect_ai.tool import ToolChoice, ToolFunction, ToolInfo

from modelir import errors
from modelir.integrations._inspect_parts import (
    PART_KEY,
    SIGNATURE_PREFIX,
    TOOL_CALL_PARTS_KEY,
    decode_part,
)
from modelir.v1 import content_pb2, errors_pb2, request_pb2

_EFFORTS = {
    "none": request_pb2.REASONING_EFFORT_NONE,
    "minimal": request_pb2.REASONING_EFFORT_MINIMAL,
    "low": request_pb2.REASONING_EFFORT_LOW,
    "medium": request_pb2.REASONING_EFFORT_MEDIUM,
    "high": request_pb2.REASONING_EFFORT_HIGH,
}
_SUMMARIES = {
    "auto": request_pb2.REASONING_SUMMARY_AUTO,
    "concise": request_pb2.REASONING_SUMMARY_CONCISE,
    "detailed": request_pb2.REASONING_SUMMARY_DETAILED,
}
_TOOL_CHOICE_MODES = {
    "auto": request_pb2.TOOL_CHOICE_MODE_AUTO,
    "none": request_pb2.TOOL_CHOICE_MODE_NONE,
    "any": request_pb2.TOOL_CHOICE_MODE_REQUIRED,
}
# GenerateConfig fields that Inspect itself carries out around the provider call (retries, timeouts, its own
# connection limit and cache, the system message it inserts, tool output truncation, fallbacks, which reasoning
# history it passes on), so the provider has nothing to map.
_HANDLED_BY_INSPECT = frozenset(
    {
        "max_retries",
        "timeout",
        "attempt_timeout",
        "stream_idle_timeout",
        "max_connections",
        "adaptive_connections",
        "system_message",
        "max_tool_output",
        "cache",
        "fallback_models",
        "fail_on_refusal",
        "reasoning_history",
        # A permission to map tools onto provider-internal ones "where possible": the IR has none, so none apply.
        "internal_tools",
    }
)
# GenerateConfig fields that are IR sampling fields under another name.
_SAMPLING_FIELDS = (
    ("max_tokens", "max_output_tokens"),
    ("temperature", "temperature"),
    ("top_p", "top_p"),
    ("top_k", "top_k"),
    ("seed", "seed"),
    ("num_choices", "choice_count"),
    ("frequency_penalty", "frequency_penalty"),
    ("presence_penalty", "presence_penalty"),
)
_MAPPED = frozenset(
    {
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop_seqs",
        "num_choices",
        "frequency_penalty",
        "presence_penalty",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "reasoning_tokens",
        "reasoning_summary",
        "response_schema",
        "parallel_tool_calls",
    }
)


def to_request(
    model: str, messages: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
) -> request_pb2.Request:
    request = request_pb2.Request(model=model)
    request.conversation.messages.extend(_message(m) for m in messages)
    for tool in tools:
        request.tools.add().function.CopyFrom(
            request_pb2.FunctionTool(
                name=tool.name,
                description=tool.description,
                parameters_json_schema=tool.parameters.model_dump_json(exclude_none=True),
            )
        )
    if tools:
        if isinstance(tool_choice, ToolFunction):
            request.tool_choice.tool_name = tool_choice.name
        else:
            request.tool_choice.mode = _TOOL_CHOICE_MODES[tool_choice]
    _apply_config(request, config)
    return request


def _apply_config(request: request_pb2.Request, config: GenerateConfig) -> None:
    asked = {name for name, value in config if value is not None}
    unmappable = sorted(asked - _MAPPED - _HANDLED_BY_INSPECT)
    if unmappable:
        raise _unsupported(
            request.model, [f"GenerateConfig.{name} has no counterpart in the modelir IR" for name in unmappable]
        )
    s = request.sampling
    for name, field in _SAMPLING_FIELDS:
        value = getattr(config, name)
        if value is not None:
            setattr(s, field, value)
    if config.stop_seqs:
        s.stop.extend(config.stop_seqs)
    if config.logprobs or config.top_logprobs:
        request.logprob_options.top_logprob_count = config.top_logprobs or 0
    if config.reasoning_effort is not None:
        if config.reasoning_effort not in _EFFORTS:
            raise _unsupported(
                request.model, [f"GenerateConfig.reasoning_effort {config.reasoning_effort!r} is not an IR level"]
            )
        request.reasoning_controls.effort = _EFFORTS[config.reasoning_effort]
        request.reasoning_controls.include_thoughts = True  # Inspect shows the reasoning and hands it back next turn
    if config.reasoning_tokens is not None:
        if config.reasoning_effort is not None:
            raise _unsupported(
                request.model, ["the IR takes a reasoning effort or a token budget, not both: set one of them"]
            )
        request.reasoning_controls.budget_tokens = config.reasoning_tokens
        request.reasoning_controls.include_thoughts = True
    if config.reasoning_summary not in (None, "none"):
        request.reasoning_controls.summary = _SUMMARIES[config.reasoning_summary]
    if config.response_schema is not None:
        request.constraint.json_schema.schema_json = config.response_schema.json_schema.model_dump_json(
            exclude_none=True
        )
    if config.parallel_tool_calls is False:
        # The IR has no switch for parallel calls: a model that may make several cannot be told not to.
        raise _unsupported(request.model, ["GenerateConfig.parallel_tool_calls=False has no counterpart in the IR"])


def _message(message: ChatMessage) -> content_pb2.Message:
    if isinstance(message, ChatMessageSystem):
        return content_pb2.Message(role=content_pb2.ROLE_SYSTEM, parts=_parts(message.content))
    if isinstance(message, ChatMessageUser):
        return content_pb2.Message(role=content_pb2.ROLE_USER, parts=_parts(message.content))
    if isinstance(message, ChatMessageTool):
        result = content_pb2.ToolResult(
            tool_call_id=message.tool_call_id or "",
            name=message.function or "",
            failed=message.error is not None,
        )
        if message.error is not None and not message.text:
            result.content.add(text=message.error.message)
        else:
            result.content.extend(_parts(message.content))
        return content_pb2.Message(role=content_pb2.ROLE_TOOL, parts=[content_pb2.Part(tool_result=result)])
    assert isinstance(message, ChatMessageAssistant)
    out = content_pb2.Message(role=content_pb2.ROLE_ASSISTANT, parts=_parts(message.content, model=message.model))
    stored = (message.metadata or {}).get(TOOL_CALL_PARTS_KEY, {})
    for call in message.tool_calls or ():
        if call.id in stored:
            part = decode_part(stored[call.id], f"metadata.{TOOL_CALL_PARTS_KEY}")
        else:
            part = content_pb2.Part(tool_call=content_pb2.ToolCall(id=call.id, name=call.function))
        # The arguments as Inspect holds them now (an approver or a solver may have edited them).
        part.tool_call.arguments_json = json.dumps(call.arguments)
        out.parts.append(part)
    return out


def _parts(content: str | list[Content], *, model: str | None = None) -> list[content_pb2.Part]:
    if isinstance(content, str):
        return [content_pb2.Part(text=content)]
    parts = []
    for item in content:
        if isinstance(item, ContentText):
            stored = item.internal.get(PART_KEY) if isinstance(item.internal, dict) else None
            if isinstance(stored, str):
                part = decode_part(stored, "ContentText.internal")
                part.text = item.text
            else:
                part = content_pb2.Part(text=item.text)
        elif isinstance(item, ContentReasoning):
            part = _reasoning_part(item, model)
        elif isinstance(item, ContentImage):
            if item.detail != "auto":
                raise _unsupported("", [f"ContentImage.detail {item.detail!r} has no counterpart in the modelir IR"])
            part = content_pb2.Part(blob=_image(item.image))
        else:
            raise _unsupported("", [f"Inspect content of type {item.type!r} has no counterpart in the modelir IR"])
        parts.append(part)
    return parts


def _reasoning_part(item: ContentReasoning, model: str | None) -> content_pb2.Part:
    if item.signature and item.signature.startswith(SIGNATURE_PREFIX):
        part = decode_part(item.signature[len(SIGNATURE_PREFIX) :], "ContentReasoning.signature")
        if not item.redacted:  # the text as Inspect holds it now: an edit must meet the issuer's check, not vanish
            part.reasoning.text = item.reasoning
        return part
    part = content_pb2.Part(reasoning=content_pb2.Reasoning(text="" if item.redacted else item.reasoning))
    if item.summary:
        part.reasoning.summary.append(item.summary)
    if item.redacted or item.signature:
        # Issued by a model outside modelir: an artifact of a foreign issuer, for the artifact policy to judge.
        part.artifacts.add(
            kind=content_pb2.OPAQUE_ARTIFACT_KIND_REDACTED_DATA
            if item.redacted
            else content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE,
            data=(item.reasoning if item.redacted else item.signature or "").encode(),
            issuer=content_pb2.Issuer(transport="inspect", model=model or ""),
        )
    return part


def _image(image: str) -> content_pb2.Blob:
    if image.startswith("data:"):
        header, _, data = image.partition(",")
        mime = header.removeprefix("data:").split(";")[0]
        return content_pb2.Blob(mime_type=mime, data=base64.b64decode(data))
    return content_pb2.Blob(uri=image)


def _unsupported(model: str, reasons: list[str]) -> errors.UnsupportedCapabilityError:
    return errors.UnsupportedCapabilityError(errors_pb2.UnsupportedCapabilities(model=model, reasons=reasons))
