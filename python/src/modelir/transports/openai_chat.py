"""OpenAI Chat Completions (`POST /chat/completions`): lower, lift and the SSE stream lift.

Facts this follows (see shared/wire/NOTES.md section 1): tool-call arguments are a JSON *string*; `content` is null
when only tool calls come back; logprob entries carry `bytes` (text is rebuilt from them); with
`stream_options.include_usage` the usage arrives in an extra chunk with `choices: []`; tool-call fragments after
the first carry only `index`; cached and reasoning tokens are counted inside the totals, as in the IR.
"""

from __future__ import annotations

import base64
from typing import Any

import msgspec
import orjson

from modelir import errors
from modelir import logprobs as lp
from modelir.transports import _common as common
from modelir.transports import _openai_typed as typed
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, RawEvent, StreamLifter
from modelir.v1 import (
    capabilities_pb2,
    content_pb2,
    errors_pb2,
    request_pb2,
    response_pb2,
    stream_pb2,
)

C = capabilities_pb2  # Capability values as the module's plain ints: a lookup on the enum wrapper costs ~0.4 us
_ROLE_NAMES = {
    content_pb2.ROLE_SYSTEM: "system",
    content_pb2.ROLE_DEVELOPER: "developer",
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
    content_pb2.ROLE_TOOL: "tool",
}
_EFFORTS = {
    request_pb2.REASONING_EFFORT_NONE: "none",
    request_pb2.REASONING_EFFORT_MINIMAL: "minimal",
    request_pb2.REASONING_EFFORT_LOW: "low",
    request_pb2.REASONING_EFFORT_MEDIUM: "medium",
    request_pb2.REASONING_EFFORT_HIGH: "high",
}
_TOOL_CHOICE_MODES = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: "auto",
    request_pb2.TOOL_CHOICE_MODE_NONE: "none",
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: "required",
}
PROVIDER_OPTION_KEYS = (
    "logit_bias",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "store",
    "user",
    "verbosity",
)


class OpenAIChat(HttpTransport):
    name = "openai_chat"
    version = "1.0.0"
    path = "/chat/completions"

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        return capabilities_pb2.CapabilityManifest(
            transport=self.name,
            transport_version=self.version,
            capabilities=sorted(
                [
                    C.CAPABILITY_CHAT,
                    C.CAPABILITY_SYSTEM_MESSAGES,
                    C.CAPABILITY_IMAGE_INPUT,
                    C.CAPABILITY_TOOLS,
                    C.CAPABILITY_TOOL_CHOICE,
                    C.CAPABILITY_REASONING,
                    C.CAPABILITY_REASONING_EFFORT,
                    C.CAPABILITY_SAMPLED_LOGPROBS,
                    C.CAPABILITY_TOP_K_LOGPROBS,
                    C.CAPABILITY_CONSTRAINT_JSON_SCHEMA,
                    C.CAPABILITY_STREAMING,
                    C.CAPABILITY_MULTIPLE_CHOICES,
                    C.CAPABILITY_TEMPERATURE,
                    C.CAPABILITY_TOP_P,
                    C.CAPABILITY_MAX_OUTPUT_TOKENS,
                    C.CAPABILITY_STOP_SEQUENCES,
                    C.CAPABILITY_SEED,
                    C.CAPABILITY_PRESENCE_FREQUENCY_PENALTIES,
                    C.CAPABILITY_PROVIDER_OPTIONS,
                ]
            ),
            limits=capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=128, max_stop_sequences=4),
            provider_option_keys=PROVIDER_OPTION_KEYS,
        )

    def extra_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        """What chat completions cannot carry, beyond the catalog: it has no reasoning output or replay."""
        reasons = []
        if request.HasField("reasoning"):
            if request.reasoning.include_thoughts:
                reasons.append("OpenAI chat completions return no reasoning text (reasoning.include_thoughts).")
            if request.reasoning.summary:
                reasons.append("OpenAI chat completions return no reasoning summaries (reasoning.summary).")
        for i, message in enumerate(request.conversation.messages):
            for j, part in enumerate(message.parts):
                kind = part.WhichOneof("content")
                if kind == "reasoning" or part.artifacts:
                    reasons.append(
                        f"OpenAI chat completions cannot replay reasoning (conversation.messages[{i}].parts[{j}])."
                    )
                elif kind == "tool_result" and part.tool_result.failed:
                    reasons.append(
                        "OpenAI chat completions cannot mark a tool result as failed "
                        f"(conversation.messages[{i}].parts[{j}].tool_result.failed); say so in its content."
                    )
                elif kind == "blob" and not part.blob.mime_type.startswith("image/"):
                    reasons.append(f"OpenAI chat completions take only image blobs, not {part.blob.mime_type!r}.")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        body: dict[str, Any] = {"model": self.model_for(request), "messages": _messages(request)}
        s = request.sampling
        common.copy_sampling(
            s,
            (
                ("temperature", "temperature"),
                ("top_p", "top_p"),
                ("max_output_tokens", "max_completion_tokens"),
                ("seed", "seed"),
                ("presence_penalty", "presence_penalty"),
                ("frequency_penalty", "frequency_penalty"),
            ),
            body,
        )
        if s.stop:
            body["stop"] = list(s.stop)
        if s.choice_count > 1:
            body["n"] = s.choice_count
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        choice = request.tool_choice.WhichOneof("choice")
        if choice == "mode":
            body["tool_choice"] = _TOOL_CHOICE_MODES[request.tool_choice.mode]
        elif choice == "tool_name":
            body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice.tool_name}}
        if request.reasoning.WhichOneof("amount") == "effort":
            body["reasoning_effort"] = _EFFORTS[request.reasoning.effort]
        if request.constraint.WhichOneof("kind") == "json_schema":
            schema = request.constraint.json_schema
            spec: dict[str, Any] = {"name": schema.name or "output", "schema": orjson.loads(schema.schema_json)}
            if schema.strict:
                spec["strict"] = True
            body["response_format"] = {"type": "json_schema", "json_schema": spec}
        if request.HasField("logprobs"):
            body["logprobs"] = True
            if request.logprobs.top_k:
                body["top_logprobs"] = request.logprobs.top_k
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(common.provider_options(request))
        return HttpRequest(
            "POST",
            self.path,
            orjson.dumps(body),
            (("content-type", "application/json"),),
            "sse" if stream else None,
        )

    # ---- lift --------------------------------------------------------------------------------------

    def error(self, response: HttpResponse):
        return common.openai_error(response)

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        try:
            body = typed.CHAT_DECODER.decode(response.body)
        except msgspec.ValidationError:
            # A shape the typed decoder does not know (an unusual compatible server): the generic path.
            return self.lift_parsed(request, common.parse_json(response.body, "response body"), response)
        except msgspec.DecodeError as exc:
            raise errors.MalformedResponseError(f"the provider's response body is not valid JSON: {exc}") from None
        return self._lift_typed(request, body, response)

    def _lift_typed(
        self, request: request_pb2.Request, body: typed.ChatCompletion, response: HttpResponse
    ) -> response_pb2.Response:
        """The same lift as `lift_parsed`, from typed structs (no generic dicts are ever built)."""
        out = response_pb2.Response(id=body.id or "", model=body.model or "")
        without_logprobs = []
        for raw in body.choices or ():
            choice = out.choices.add(index=raw.index)
            message = raw.message or typed.Message()
            choice.message.role = content_pb2.ROLE_ASSISTANT
            reasoning = message.reasoning_content or message.reasoning
            if reasoning:
                choice.message.parts.add().reasoning.text = reasoning
            if message.content is not None:
                choice.message.parts.add(text=message.content)
            if message.refusal is not None:
                choice.message.parts.add(text=message.refusal)
            for call in message.tool_calls or ():
                function = call.function or typed.FunctionCall()
                choice.message.parts.add(
                    tool_call=content_pb2.ToolCall(
                        id=call.id or "", name=function.name or "", arguments_json=function.arguments or ""
                    )
                )
            choice.finish_reason, choice.raw_finish_reason, choice.stop_sequence = self.finish(
                {"finish_reason": raw.finish_reason, "stop_reason": raw.stop_reason}
            )
            if message.refusal is not None:
                choice.finish_reason = response_pb2.FINISH_REASON_REFUSAL
            content = raw.logprobs.content if raw.logprobs is not None else None
            if content:
                self.adjust_logprobs(typed.columns(content, choice.logprobs))
            elif content is None:
                without_logprobs.append(choice.index)
        common.usage_from(body.usage, out.usage, input_key="prompt_tokens", output_key="completion_tokens")
        _soft_errors(request, out, without_logprobs)
        return out

    def lift_parsed(
        self, request: request_pb2.Request, body: dict[str, Any], response: HttpResponse
    ) -> response_pb2.Response:
        """The lift from an already parsed body (servers with extensions reuse it instead of parsing twice)."""
        out = response_pb2.Response(id=body.get("id") or "", model=body.get("model") or "")
        without_logprobs = []
        for raw in body.get("choices") or ():
            choice = out.choices.add(index=raw.get("index", 0))
            message = raw.get("message") or {}
            choice.message.role = content_pb2.ROLE_ASSISTANT
            # OpenAI-compatible reasoning servers (vLLM, DeepSeek) put reasoning text beside the content.
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if reasoning:
                choice.message.parts.add().reasoning.text = reasoning
            if message.get("content") is not None:
                choice.message.parts.add(text=message["content"])
            if message.get("refusal") is not None:
                choice.message.parts.add(text=message["refusal"])
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                choice.message.parts.add(
                    tool_call=content_pb2.ToolCall(
                        id=call.get("id") or "",
                        name=function.get("name") or "",
                        arguments_json=function.get("arguments") or "",
                    )
                )
            choice.finish_reason, choice.raw_finish_reason, choice.stop_sequence = self.finish(raw)
            if message.get("refusal") is not None:
                choice.finish_reason = response_pb2.FINISH_REASON_REFUSAL
            content = (raw.get("logprobs") or {}).get("content")
            if content:
                self.adjust_logprobs(lp.from_openai_content(content, into=choice.logprobs))
            elif content is None:
                without_logprobs.append(choice.index)
        common.usage_from(body.get("usage"), out.usage, input_key="prompt_tokens", output_key="completion_tokens")
        _soft_errors(request, out, without_logprobs)
        return out

    def finish(self, raw: dict[str, Any]) -> tuple[int, str, str]:
        """(normalised finish reason, raw finish reason, stop sequence) of a choice or final chunk."""
        raw_reason = raw.get("finish_reason")
        return common.finish_reason(raw_reason), raw_reason or "", ""

    def adjust_logprobs(self, logprobs):
        """A hook for servers whose logprobs need more than the OpenAI shape (vLLM: ids, -inf clamp), in place."""
        return logprobs

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _ChatStreamLifter(self, request)


def _soft_errors(request: request_pb2.Request, response: response_pb2.Response, without_logprobs: list[int]) -> None:
    """Set the soft error a complete response deserves (first found): missing logprobs, broken JSON."""
    for choice in response.choices:
        if request.HasField("logprobs") and choice.index in without_logprobs:
            response.error.CopyFrom(common.missing_logprobs_error(choice.index))
            return
        text = "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")
        if choice.finish_reason != response_pb2.FINISH_REASON_REFUSAL and (
            error := common.constraint_error(request, text)
        ):
            response.error.CopyFrom(error)
            return


def _tool(tool: request_pb2.Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": common.json_object(tool.parameters_json_schema)}
    if tool.description:
        function["description"] = tool.description
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _blob_url(blob: content_pb2.Blob) -> str:
    if blob.WhichOneof("source") == "uri":
        return blob.uri
    return f"data:{blob.mime_type};base64,{base64.b64encode(blob.data).decode()}"


def _content(parts) -> str | list[dict[str, Any]]:
    """A plain string when the parts are one text; the array form when there are images."""
    kinds = [p.WhichOneof("content") for p in parts]
    if all(k == "text" for k in kinds) and len(kinds) == 1:
        return parts[0].text
    out = []
    for part, kind in zip(parts, kinds, strict=True):
        if kind == "text":
            out.append({"type": "text", "text": part.text})
        elif kind == "blob":
            out.append({"type": "image_url", "image_url": {"url": _blob_url(part.blob)}})
    return out


def _messages(request: request_pb2.Request) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in request.conversation.messages:
        results = [p.tool_result for p in message.parts if p.WhichOneof("content") == "tool_result"]
        others = [p for p in message.parts if p.WhichOneof("content") not in ("tool_result", "tool_call")]
        calls = [p.tool_call for p in message.parts if p.WhichOneof("content") == "tool_call"]
        for result in results:  # each tool result is a message of its own on this wire
            out.append({"role": "tool", "tool_call_id": result.tool_call_id, "content": _content(result.content)})
        if message.role == content_pb2.ROLE_TOOL and not others:
            continue
        entry: dict[str, Any] = {"role": _ROLE_NAMES[message.role]}
        if others:
            entry["content"] = _content(others)
        elif not calls:
            entry["content"] = ""
        if calls:
            entry["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                for c in calls
            ]
        if message.name:
            entry["name"] = message.name
        out.append(entry)
    return out


class _ChatStreamLifter(StreamLifter):
    """Chat completion chunks -> IR events. Tool-call fragments are routed by their `index`."""

    def __init__(self, transport: OpenAIChat, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.done = False
        self.usage = response_pb2.Usage()
        self.finishes: dict[int, dict[str, Any]] = {}
        self.parts: dict[int, dict[tuple[str, int], int]] = {}  # choice -> (kind, key) -> part index
        self.texts: dict[int, list[str]] = {}
        self.refused: set[int] = set()
        self.has_logprobs: set[int] = set()
        self.error: errors_pb2.ResponseError | None = None

    def _part(self, choice: int, kind: str, key: int = 0) -> int:
        parts = self.parts.setdefault(choice, {})
        if (kind, key) not in parts:
            parts[(kind, key)] = len(parts)
        return parts[(kind, key)]

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        if event.data.strip() == b"[DONE]":
            self.done = True
            return []
        chunk = common.parse_json(event.data, "stream chunk")
        out = []
        if isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            self.error = errors_pb2.ResponseError(
                reason=errors_pb2.ERROR_REASON_PROVIDER_UNAVAILABLE,
                message=str(error.get("message") or "the provider reported an error mid-stream"),
                provider_code=str(error.get("code") or error.get("type") or ""),
            )
            return out
        if not self.started and chunk.get("id"):  # Azure's first chunk has an empty id: wait for a real one
            self.started = True
            out.append(
                stream_pb2.StreamEvent(
                    start=stream_pb2.StreamStart(id=chunk.get("id") or "", model=chunk.get("model") or "")
                )
            )
        for raw in chunk.get("choices") or ():
            index = raw.get("index", 0)
            self.finishes.setdefault(index, {})
            delta = raw.get("delta") or {}
            logprobs = (raw.get("logprobs") or {}).get("content")
            chunk_logprobs = self.transport.adjust_logprobs(lp.from_openai_content(logprobs)) if logprobs else None
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(
                            choice_index=index,
                            part_index=self._part(index, "reasoning"),
                            reasoning=stream_pb2.ReasoningDelta(text=reasoning),
                        )
                    )
                )
            if logprobs is not None:
                self.has_logprobs.add(index)
            if delta.get("content"):
                self.texts.setdefault(index, []).append(delta["content"])
                event_delta = stream_pb2.PartDelta(
                    choice_index=index, part_index=self._part(index, "text"), text=delta["content"]
                )
                if chunk_logprobs is not None:
                    event_delta.logprobs.CopyFrom(chunk_logprobs)
                    chunk_logprobs = None
                out.append(stream_pb2.StreamEvent(delta=event_delta))
            if delta.get("refusal"):
                self.refused.add(index)
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(
                            choice_index=index, part_index=self._part(index, "refusal"), text=delta["refusal"]
                        )
                    )
                )
            for call in delta.get("tool_calls") or ():
                function = call.get("function") or {}
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(
                            choice_index=index,
                            part_index=self._part(index, "tool", call.get("index", 0)),
                            tool_call=stream_pb2.ToolCallDelta(
                                id=call.get("id") or "",
                                name=function.get("name") or "",
                                arguments_json=function.get("arguments") or "",
                            ),
                        )
                    )
                )
            if chunk_logprobs is not None:
                out.append(
                    stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(choice_index=index, logprobs=chunk_logprobs))
                )
            if raw.get("finish_reason") is not None:
                self.finishes[index] = raw
        if chunk.get("usage"):
            common.usage_from(chunk["usage"], self.usage, input_key="prompt_tokens", output_key="completion_tokens")
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        if self.usage.ListFields():
            end.usage.CopyFrom(self.usage)
        for index in sorted(self.finishes):
            finish, raw_reason, stop_sequence = self.transport.finish(self.finishes[index])
            if index in self.refused:
                finish = response_pb2.FINISH_REASON_REFUSAL
            end.finishes.add(
                choice_index=index, finish_reason=finish, raw_finish_reason=raw_reason, stop_sequence=stop_sequence
            )
        if self.error is not None:
            end.error.CopyFrom(self.error)
        elif interrupted or not self.done:
            end.error.CopyFrom(common.truncated_error("the stream ended before [DONE]; the output is partial"))
        else:
            for index in sorted(self.finishes):
                if self.request.HasField("logprobs") and index not in self.has_logprobs:
                    end.error.CopyFrom(common.missing_logprobs_error(index))
                    break
                if index not in self.refused and (
                    error := common.constraint_error(self.request, "".join(self.texts.get(index, [])))
                ):
                    end.error.CopyFrom(error)
                    break
        return [stream_pb2.StreamEvent(end=end)]
