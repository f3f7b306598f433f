"""IR -> Inspect: a modelir `Response` as Inspect's `ModelOutput` (choices, tool calls, logprobs, usage)."""

from __future__ import annotations

import json

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessageAssistant,
    Content,
    ContentReasoning,
    ContentText,
    Logprob,
    Logprobs,
    ModelOutput,
    ModelUsage,
    TopLogprob,
)
from inspect_ai.model._model_output import StopReason
from inspect_ai.tool import ToolCall
from pydantic import JsonValue

from modelir import errors
from modelir.integrations._inspect_parts import (
    PART_KEY,
    SIGNATURE_PREFIX,
    TOOL_CALL_PARTS_KEY,
    encode_part,
)
from modelir.logprobs import build as lp
from modelir.v1 import content_pb2, logprobs_pb2, response_pb2

_STOP_REASONS: dict[int, StopReason] = {
    response_pb2.FINISH_REASON_STOP: "stop",
    response_pb2.FINISH_REASON_STOP_SEQUENCE: "stop",
    response_pb2.FINISH_REASON_LENGTH: "max_tokens",
    response_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls",
    response_pb2.FINISH_REASON_CONTENT_FILTER: "content_filter",
    response_pb2.FINISH_REASON_REFUSAL: "content_filter",
    response_pb2.FINISH_REASON_CONTEXT_WINDOW: "model_length",
}


def to_output(response: response_pb2.Response, model: str) -> ModelOutput:
    choices = [_choice(choice, response.model or model) for choice in response.choices]
    if bool(response.input_scores) and choices:
        choices[0].prompt_logprobs = _logprobs(response.input_scores[0].tokens)
    u = response.usage
    usage = None
    if u.HasField("input_token_count") or u.HasField("output_token_count"):
        usage = ModelUsage(
            input_tokens=u.input_token_count,
            output_tokens=u.output_token_count,
            total_tokens=u.input_token_count + u.output_token_count,
            input_tokens_cache_read=u.cache_read_token_count if u.HasField("cache_read_token_count") else None,
            input_tokens_cache_write=u.cache_write_token_count if u.HasField("cache_write_token_count") else None,
            reasoning_tokens=u.reasoning_token_count if u.HasField("reasoning_token_count") else None,
        )
    return ModelOutput(
        model=response.model or model,
        choices=choices,
        usage=usage,
        response_id=response.id or None,
        # A soft error keeps the partial output and says what went wrong.
        error=response.errors[0].message if bool(response.errors) else None,
    )


def _choice(choice: response_pb2.Choice, model: str) -> ChatCompletionChoice:
    content: list[Content] = []
    tool_calls: list[ToolCall] = []
    stored_calls: dict[str, str] = {}
    for part in choice.message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            internal: JsonValue = {PART_KEY: encode_part(part)} if part.artifacts or part.item_id else None
            content.append(ContentText(text=part.text, internal=internal))
        elif kind == "reasoning":
            redacted = any(a.kind == content_pb2.OPAQUE_ARTIFACT_KIND_REDACTED_DATA for a in part.artifacts)
            content.append(
                ContentReasoning(
                    reasoning=part.reasoning.text,
                    summary="\n\n".join(part.reasoning.summary) or None,
                    signature=SIGNATURE_PREFIX + encode_part(part),
                    redacted=redacted,
                )
            )
        elif kind == "tool_call":
            tool_calls.append(_tool_call(part.tool_call))
            if part.artifacts or part.item_id:
                stored_calls[part.tool_call.id] = encode_part(part)
        else:
            raise errors.ModelError(f"{model}: a {kind} part in a response has no counterpart in Inspect's messages")
    message = ChatMessageAssistant(
        content=content,
        tool_calls=tool_calls or None,
        model=model,
        source="generate",
        metadata={TOOL_CALL_PARTS_KEY: stored_calls} if stored_calls else None,
    )
    return ChatCompletionChoice(
        message=message,
        stop_reason=_STOP_REASONS.get(choice.finish_reason, "unknown"),
        logprobs=_logprobs(choice.logprobs) if choice.HasField("logprobs") else None,
    )


def _tool_call(call: content_pb2.ToolCall) -> ToolCall:
    try:
        arguments = json.loads(call.arguments_json or "{}")
        parse_error = None
    except json.JSONDecodeError as exc:
        arguments, parse_error = {}, f"the arguments are not valid JSON: {exc}"
    return ToolCall(id=call.id, function=call.name, arguments=arguments, parse_error=parse_error)


def _logprobs(columns: logprobs_pb2.TokenLogprobs) -> Logprobs:
    token_bytes = lp.token_byte_slices(columns) if columns.token_byte_offsets else [None] * len(columns.token_logprobs)
    top_bytes: list[bytes | None] = [None] * len(columns.top_logprobs)
    if columns.top_token_byte_offsets:
        ends = [*columns.top_token_byte_offsets[1:], len(columns.top_token_bytes)]
        top_bytes = [columns.top_token_bytes[s:e] for s, e in zip(columns.top_token_byte_offsets, ends, strict=True)]
    content = []
    start = 0
    for i, logprob in enumerate(columns.token_logprobs):
        count = columns.top_counts[i] if columns.top_counts else 0
        tops = [
            TopLogprob(token=columns.top_tokens[j], logprob=columns.top_logprobs[j], bytes=_byte_list(top_bytes[j]))
            for j in range(start, start + count)
        ]
        start += count
        content.append(
            Logprob(
                token=columns.tokens[i],
                logprob=logprob,
                bytes=_byte_list(token_bytes[i]),
                top_logprobs=tops if columns.top_counts else None,
            )
        )
    return Logprobs(content=content)


def _byte_list(data: bytes | None) -> list[int] | None:
    return None if data is None else list(data)
