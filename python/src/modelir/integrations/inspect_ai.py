"""Inspect AI on any modelir model: the `modelir` model provider (`inspect eval ... --model modelir/<name>`).

    inspect eval task.py --model modelir/reference
    inspect eval task.py --model modelir/tiny -M config_file=models.yaml  # a model from a configuration file
    inspect eval task.py --model modelir/tiny -M target=localhost:50051   # a model on a modelir server

Inspect finds the provider through the `inspect_ai` entry point of the modelir package, which imports this module.
Messages, tools, tool choice and `GenerateConfig` become one IR `Request`; the IR `Response` becomes a
`ModelOutput`. Whatever the model's manifest lacks, modelir refuses with its capability error before any call;
whatever `GenerateConfig` asks that the IR cannot say is refused here, by field name; nothing is dropped.

Reasoning survives agent loops: each reasoning part travels in `ContentReasoning.signature` as the IR part itself
(text, summaries, opaque artifacts with their issuer, item id), so the next turn replays it byte for byte to the
issuer. Artifacts on text parts ride in `ContentText.internal`, those on tool calls in the assistant message's
metadata. A signature that modelir did not issue becomes a foreign artifact, which modelir's foreign-artifact
policy decides about (by default: rejected, naming it).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from inspect_ai.model import (
    ChatCompletionChoice,
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
    Logprob,
    Logprobs,
    ModelAPI,
    ModelOutput,
    ModelUsage,
    TopLogprob,
    modelapi,
)
from inspect_ai.model._model_output import StopReason
from inspect_ai.tool import ToolCall, ToolChoice, ToolFunction, ToolInfo
from pydantic import JsonValue

from modelir import errors
from modelir import logprobs as lp
from modelir.integrations._models import OpenedModel, open_model
from modelir.v1 import content_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2

_SIGNATURE_PREFIX = "modelir:"
_PART_KEY = "modelir_part"
_TOOL_CALL_PARTS_KEY = "modelir_tool_call_parts"
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
_STOP_REASONS: dict[int, StopReason] = {
    response_pb2.FINISH_REASON_STOP: "stop",
    response_pb2.FINISH_REASON_STOP_SEQUENCE: "stop",
    response_pb2.FINISH_REASON_LENGTH: "max_tokens",
    response_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls",
    response_pb2.FINISH_REASON_CONTENT_FILTER: "content_filter",
    response_pb2.FINISH_REASON_REFUSAL: "content_filter",
    response_pb2.FINISH_REASON_CONTEXT_WINDOW: "model_length",
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


@modelapi(name="modelir")
class ModelirAPI(ModelAPI):
    """One modelir model (`modelir/<name>`), from a configuration file, a gRPC server or the built-in models."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),  # noqa: B008  (Inspect's own signature)
        **model_args: Any,
    ) -> None:
        super().__init__(model_name=model_name, base_url=base_url, api_key=api_key, config=config)
        unknown = set(model_args) - {"config_file", "target", "token_env"}
        if unknown:
            raise ValueError(f"modelir: unknown model argument(s) {', '.join(sorted(unknown))}")
        if base_url:
            raise ValueError("modelir: name the model's server with -M target=host:port, not a base URL")
        # `config_file`, not `config`: Inspect's own `config` is the GenerateConfig.
        self._where = {
            "config": model_args.get("config_file"),
            "target": model_args.get("target"),
            "token_env": model_args.get("token_env"),
        }
        self._opened: OpenedModel | None = None

    async def _model(self) -> OpenedModel:
        if self._opened is None:  # opened on Inspect's loop: clients and channels belong to one loop
            self._opened = open_model(self.model_name, **self._where)
        return self._opened

    async def aclose(self) -> None:
        if self._opened is not None:
            await self._opened.aclose()
            self._opened = None

    def should_retry(self, ex: Exception) -> bool:
        return isinstance(ex, errors.ModelError) and ex.retryable

    async def generate(
        self,
        input: list[ChatMessage],
        tools: list[ToolInfo],
        tool_choice: ToolChoice,
        config: GenerateConfig,
    ) -> ModelOutput:
        model = (await self._model()).model
        request = to_request(self.model_name, input, tools, tool_choice, config)
        response = await model.arun(request)
        if response.HasField("error") and not response.choices:
            raise errors.ModelError(f"{self.model_name}: {response.error.message}")
        return to_output(response, self.model_name)


# ---- Inspect -> IR -----------------------------------------------------------------------------------


def to_request(
    model: str, messages: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
) -> request_pb2.Request:
    request = request_pb2.Request(model=model)
    request.conversation.messages.extend(_message(m) for m in messages)
    for tool in tools:
        request.tools.add(
            name=tool.name,
            description=tool.description,
            parameters_json_schema=tool.parameters.model_dump_json(exclude_none=True),
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
        request.logprobs.top_k = config.top_logprobs or 0
    if config.reasoning_effort is not None:
        if config.reasoning_effort not in _EFFORTS:
            raise _unsupported(
                request.model, [f"GenerateConfig.reasoning_effort {config.reasoning_effort!r} is not an IR level"]
            )
        request.reasoning.effort = _EFFORTS[config.reasoning_effort]
        request.reasoning.include_thoughts = True  # Inspect shows the reasoning and hands it back next turn
    if config.reasoning_tokens is not None:
        if config.reasoning_effort is not None:
            raise _unsupported(
                request.model, ["the IR takes a reasoning effort or a token budget, not both: set one of them"]
            )
        request.reasoning.budget_tokens = config.reasoning_tokens
        request.reasoning.include_thoughts = True
    if config.reasoning_summary not in (None, "none"):
        request.reasoning.summary = _SUMMARIES[config.reasoning_summary]
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
    stored = (message.metadata or {}).get(_TOOL_CALL_PARTS_KEY, {})
    for call in message.tool_calls or ():
        if call.id in stored:
            part = _decode_part(stored[call.id], f"metadata.{_TOOL_CALL_PARTS_KEY}")
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
            stored = item.internal.get(_PART_KEY) if isinstance(item.internal, dict) else None
            if isinstance(stored, str):
                part = _decode_part(stored, "ContentText.internal")
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
    if item.signature and item.signature.startswith(_SIGNATURE_PREFIX):
        part = _decode_part(item.signature[len(_SIGNATURE_PREFIX) :], "ContentReasoning.signature")
        if not item.redacted:  # the text as Inspect holds it now: an edit must meet the issuer's check, not vanish
            part.reasoning.text = item.reasoning
        return part
    part = content_pb2.Part(reasoning=content_pb2.Reasoning(text="" if item.redacted else item.reasoning))
    if item.summary:
        part.reasoning.summary.append(item.summary)
    if item.redacted or item.signature:
        # Issued by a model outside modelir: an artifact of a foreign issuer, for the artifact policy to judge.
        part.artifacts.add(
            kind=content_pb2.REASONING_ARTIFACT_KIND_REDACTED_DATA
            if item.redacted
            else content_pb2.REASONING_ARTIFACT_KIND_SIGNATURE,
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


# ---- IR -> Inspect -----------------------------------------------------------------------------------


def to_output(response: response_pb2.Response, model: str) -> ModelOutput:
    choices = [_choice(choice, response.model or model) for choice in response.choices]
    if response.HasField("input_scores") and choices:
        choices[0].prompt_logprobs = _logprobs(response.input_scores.tokens)
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
        error=response.error.message if response.HasField("error") else None,
    )


def _choice(choice: response_pb2.Choice, model: str) -> ChatCompletionChoice:
    content: list[Content] = []
    tool_calls: list[ToolCall] = []
    stored_calls: dict[str, str] = {}
    for part in choice.message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            internal: JsonValue = {_PART_KEY: _encode_part(part)} if part.artifacts or part.item_id else None
            content.append(ContentText(text=part.text, internal=internal))
        elif kind == "reasoning":
            redacted = any(a.kind == content_pb2.REASONING_ARTIFACT_KIND_REDACTED_DATA for a in part.artifacts)
            content.append(
                ContentReasoning(
                    reasoning=part.reasoning.text,
                    summary="\n\n".join(part.reasoning.summary) or None,
                    signature=_SIGNATURE_PREFIX + _encode_part(part),
                    redacted=redacted,
                )
            )
        elif kind == "tool_call":
            tool_calls.append(_tool_call(part.tool_call))
            if part.artifacts or part.item_id:
                stored_calls[part.tool_call.id] = _encode_part(part)
        else:
            raise errors.ModelError(f"{model}: a {kind} part in a response has no counterpart in Inspect's messages")
    message = ChatMessageAssistant(
        content=content,
        tool_calls=tool_calls or None,
        model=model,
        source="generate",
        metadata={_TOOL_CALL_PARTS_KEY: stored_calls} if stored_calls else None,
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
    token_bytes = lp.token_byte_slices(columns) if columns.token_byte_offsets else [None] * len(columns.logprobs)
    top_bytes: list[bytes | None] = [None] * len(columns.top_logprobs)
    if columns.top_token_byte_offsets:
        ends = [*columns.top_token_byte_offsets[1:], len(columns.top_token_bytes)]
        top_bytes = [columns.top_token_bytes[s:e] for s, e in zip(columns.top_token_byte_offsets, ends, strict=True)]
    content = []
    start = 0
    for i, logprob in enumerate(columns.logprobs):
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


# ---- helpers -----------------------------------------------------------------------------------------


def _encode_part(part: content_pb2.Part) -> str:
    return base64.b64encode(part.SerializeToString(deterministic=True)).decode()


def _decode_part(encoded: str, where: str) -> content_pb2.Part:
    try:
        return content_pb2.Part.FromString(base64.b64decode(encoded, validate=True))
    except ValueError as exc:  # binascii.Error and protobuf's DecodeError are both ValueErrors
        raise errors.InvalidRequestError(
            [errors_pb2.FieldViolation(field=where, description=f"not a modelir part as modelir wrote it: {exc}")]
        ) from None


def _unsupported(model: str, reasons: list[str]) -> errors.UnsupportedCapabilityError:
    return errors.UnsupportedCapabilityError(errors_pb2.UnsupportedCapabilities(model=model, reasons=reasons))
