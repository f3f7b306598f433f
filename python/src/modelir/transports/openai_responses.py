"""OpenAI Responses (`POST /responses`): input items, instructions, function-call round trips, reasoning with
encrypted content, output-text logprobs and the named SSE event stream.

Facts this follows (shared/wire/NOTES.md section 3): a reasoning item is replayed with its `id`, `summary` and
`encrypted_content`, together with the item that followed it (with that item's id), or the API answers 400;
`encrypted_content` is taken from `response.completed` (or `output_item.done` when the stream ends early), never
from `output_item.added` (the real service re-encrypts it in each of these events, so all three differ);
`response.status` and `incomplete_details.reason` say how the response ended; usage counts cached and reasoning
tokens inside the totals, as in the IR.
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
ENCRYPTED = content_pb2.REASONING_ARTIFACT_KIND_ENCRYPTED_CONTENT
_EFFORTS = {
    request_pb2.REASONING_EFFORT_NONE: "none",
    request_pb2.REASONING_EFFORT_MINIMAL: "minimal",
    request_pb2.REASONING_EFFORT_LOW: "low",
    request_pb2.REASONING_EFFORT_MEDIUM: "medium",
    request_pb2.REASONING_EFFORT_HIGH: "high",
}
_SUMMARIES = {
    request_pb2.REASONING_SUMMARY_AUTO: "auto",
    request_pb2.REASONING_SUMMARY_CONCISE: "concise",
    request_pb2.REASONING_SUMMARY_DETAILED: "detailed",
}
_TOOL_CHOICE_MODES = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: "auto",
    request_pb2.TOOL_CHOICE_MODE_NONE: "none",
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: "required",
}
PROVIDER_OPTION_KEYS = (
    "background",
    "max_tool_calls",
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "store",
    "truncation",
    "user",
)
_ROLES = {
    content_pb2.ROLE_SYSTEM: "system",
    content_pb2.ROLE_DEVELOPER: "developer",
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
}


class OpenAIResponses(HttpTransport):
    name = "openai_responses"
    version = "1.0.0"
    path = "/responses"

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
                    C.CAPABILITY_TEMPERATURE,
                    C.CAPABILITY_TOP_P,
                    C.CAPABILITY_MAX_OUTPUT_TOKENS,
                    C.CAPABILITY_PROVIDER_OPTIONS,
                ]
            ),
            limits=capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=1),
            provider_option_keys=PROVIDER_OPTION_KEYS,
        )

    def extra_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.reasoning.include_thoughts:
            reasons.append(
                "OpenAI Responses return reasoning summaries, not reasoning text: use reasoning.summary "
                "instead of reasoning.include_thoughts."
            )
        for i, message in enumerate(request.conversation.messages):
            parts = list(message.parts)
            for j, part in enumerate(parts):
                kind = part.WhichOneof("content")
                where = f"conversation.messages[{i}].parts[{j}]"
                if kind == "reasoning":
                    if part.reasoning.text:
                        reasons.append(f"OpenAI Responses cannot take reasoning text back ({where}.reasoning.text).")
                    if not part.item_id:
                        reasons.append(f"A replayed reasoning item needs its item id ({where}.item_id).")
                    following = parts[j + 1] if j + 1 < len(parts) else None
                    if following is None or not following.item_id:
                        # The API answers 400 "provided without its required following item" otherwise.
                        reasons.append(
                            f"A replayed reasoning item must be followed by the item that followed it, with its "
                            f"item id ({where})."
                        )
                    for artifact in part.artifacts:
                        if artifact.kind != ENCRYPTED:
                            reasons.append(f"OpenAI Responses take only encrypted reasoning content ({where}).")
                elif kind == "tool_result" and part.tool_result.failed:
                    reasons.append(
                        f"OpenAI Responses cannot mark a tool result as failed ({where}.tool_result.failed)."
                    )
                elif kind == "blob" and not part.blob.mime_type.startswith("image/"):
                    reasons.append(f"Only image blobs are supported here, not {part.blob.mime_type!r} ({where}).")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        messages = list(request.conversation.messages)
        instructions = []
        while (
            messages
            and messages[0].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER)
            and all(p.WhichOneof("content") == "text" for p in messages[0].parts)
        ):
            instructions.append("".join(p.text for p in messages.pop(0).parts))
        body: dict[str, Any] = {"model": self.model_for(request), "input": _items(messages)}
        if instructions:
            body["instructions"] = "\n\n".join(instructions)
        s = request.sampling
        common.copy_sampling(
            s,
            (
                ("temperature", "temperature"),
                ("top_p", "top_p"),
                ("max_output_tokens", "max_output_tokens"),
            ),
            body,
        )
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        choice = request.tool_choice.WhichOneof("choice")
        if choice == "mode":
            body["tool_choice"] = _TOOL_CHOICE_MODES[request.tool_choice.mode]
        elif choice == "tool_name":
            body["tool_choice"] = {"type": "function", "name": request.tool_choice.tool_name}
        include = []
        if request.HasField("reasoning"):
            reasoning: dict[str, Any] = {}
            if request.reasoning.WhichOneof("amount") == "effort":
                reasoning["effort"] = _EFFORTS[request.reasoning.effort]
            if request.reasoning.summary:
                reasoning["summary"] = _SUMMARIES[request.reasoning.summary]
            body["reasoning"] = reasoning
            # Without the encrypted content, the reasoning could not be replayed statelessly next turn.
            include.append("reasoning.encrypted_content")
        if request.constraint.WhichOneof("kind") == "json_schema":
            schema = request.constraint.json_schema
            fmt: dict[str, Any] = {
                "type": "json_schema",
                "name": schema.name or "output",
                "schema": orjson.loads(schema.schema_json),
            }
            if schema.strict:
                fmt["strict"] = True
            body["text"] = {"format": fmt}
        if request.HasField("logprobs"):
            include.append("message.output_text.logprobs")
            if request.logprobs.top_k:
                body["top_logprobs"] = request.logprobs.top_k
        if include:
            body["include"] = include
        if stream:
            body["stream"] = True
        body.update(common.provider_options(request))
        return HttpRequest(
            "POST", self.path, orjson.dumps(body), (("content-type", "application/json"),), "sse" if stream else None
        )

    # ---- lift --------------------------------------------------------------------------------------

    def error(self, response: HttpResponse):
        return common.openai_error(response)

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        out = response_pb2.Response()
        try:
            lift_typed_object(self, request, typed.RESPONSE_DECODER.decode(response.body), out)
        except msgspec.ValidationError:
            # An output item or shape the typed decoder does not know: the generic path lifts what it knows.
            out.Clear()
            lift_response_object(self, request, common.parse_json(response.body, "response body"), out)
        except msgspec.DecodeError as exc:
            raise errors.MalformedResponseError(f"the provider's response body is not valid JSON: {exc}") from None
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _ResponsesStreamLifter(self, request)


def _text_content(parts, kind: str) -> list[dict[str, Any]] | str:
    if len(parts) == 1 and parts[0].WhichOneof("content") == "text":
        return parts[0].text
    out = []
    for part in parts:
        if part.WhichOneof("content") == "text":
            out.append({"type": kind, "text": part.text})
        elif part.WhichOneof("content") == "blob":
            blob = part.blob
            url = (
                blob.uri
                if blob.WhichOneof("source") == "uri"
                else (f"data:{blob.mime_type};base64,{base64.b64encode(blob.data).decode()}")
            )
            out.append({"type": "input_image", "image_url": url, "detail": "auto"})  # the API requires a detail level
    return out


def _items(messages) -> list[dict[str, Any]]:
    """IR messages -> input items. Assistant parts become output items in order, with their ids."""
    items: list[dict[str, Any]] = []
    for message in messages:
        pending_user: list = []
        for part in message.parts:
            kind = part.WhichOneof("content")
            if kind == "tool_result":
                _flush(items, message.role, pending_user)
                result = part.tool_result
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": result.tool_call_id,
                        "output": "".join(p.text for p in result.content if p.WhichOneof("content") == "text"),
                    }
                )
            elif message.role != content_pb2.ROLE_ASSISTANT:
                pending_user.append(part)
            elif kind == "reasoning":
                item: dict[str, Any] = {
                    "type": "reasoning",
                    "id": part.item_id,
                    "summary": [{"type": "summary_text", "text": s} for s in part.reasoning.summary],
                }
                for artifact in part.artifacts:
                    item["encrypted_content"] = artifact.data.decode()
                items.append(item)
            elif kind == "tool_call":
                call = part.tool_call
                item = {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_json,
                }
                if part.item_id:
                    item["id"] = part.item_id
                items.append(item)
            elif kind == "text":
                if part.item_id:
                    items.append(
                        {
                            "type": "message",
                            "role": "assistant",
                            "id": part.item_id,
                            "status": "completed",
                            "content": [{"type": "output_text", "text": part.text, "annotations": []}],
                        }
                    )
                else:
                    items.append({"role": "assistant", "content": part.text})
        _flush(items, message.role, pending_user)
    return items


def _flush(items: list[dict[str, Any]], role: int, pending: list) -> None:
    """Emit the user/system parts gathered so far as one input message."""
    if pending:
        items.append({"role": _ROLES[role], "content": _text_content(pending, "input_text")})
        pending.clear()


def _tool(tool: request_pb2.Tool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "function",
        "name": tool.name,
        "parameters": common.json_object(tool.parameters_json_schema),
    }
    if tool.description:
        out["description"] = tool.description
    if tool.strict:
        out["strict"] = True
    return out


def _finish(body: dict[str, Any], has_calls: bool, refused: bool) -> tuple[int, str]:
    status = body.get("status") or ""
    if status == "incomplete":
        reason = (body.get("incomplete_details") or {}).get("reason") or ""
        normalised = {
            "max_output_tokens": response_pb2.FINISH_REASON_LENGTH,
            "content_filter": response_pb2.FINISH_REASON_CONTENT_FILTER,
        }.get(reason, response_pb2.FINISH_REASON_OTHER)
        return normalised, f"incomplete:{reason}" if reason else status
    if status == "failed":
        return response_pb2.FINISH_REASON_ERROR, status
    if status == "cancelled":
        return response_pb2.FINISH_REASON_OTHER, status
    if refused:
        return response_pb2.FINISH_REASON_REFUSAL, status
    if has_calls:
        return response_pb2.FINISH_REASON_TOOL_CALLS, status
    return response_pb2.FINISH_REASON_STOP, status


def lift_typed_object(
    transport: OpenAIResponses, request: request_pb2.Request, body: typed.ResponseObject, out: response_pb2.Response
) -> None:
    """`lift_response_object` from typed structs: the unary hot path, with no generic dicts built."""
    out.id = body.id or ""
    out.model = body.model or ""
    choice = out.choices.add(index=0)
    choice.message.role = content_pb2.ROLE_ASSISTANT
    issuer = transport.issuer(request)
    chunks = []
    has_calls = refused = saw_logprobs = False
    for item in body.output or ():
        if isinstance(item, typed.ReasoningItem):
            part = choice.message.parts.add(item_id=item.id or "")
            part.reasoning.summary.extend(s.text for s in item.summary or ())
            if item.encrypted_content:
                part.artifacts.add(
                    kind=ENCRYPTED, data=item.encrypted_content.encode(), issuer=issuer, item_id=part.item_id
                )
            if not part.HasField("reasoning"):
                part.reasoning.SetInParent()
        elif isinstance(item, typed.MessageItem):
            for content in item.content or ():
                if isinstance(content, typed.Refusal):
                    refused = True
                    choice.message.parts.add(text=content.refusal, item_id=item.id or "")
                    continue
                choice.message.parts.add(text=content.text, item_id=item.id or "")
                if content.logprobs is not None:
                    saw_logprobs = True
                    if content.logprobs:
                        chunks.append(content.logprobs)
        else:
            has_calls = True
            choice.message.parts.add(
                item_id=item.id or "",
                tool_call=content_pb2.ToolCall(
                    id=item.call_id or "", name=item.name or "", arguments_json=item.arguments or ""
                ),
            )
    if len(chunks) == 1:
        typed.columns(chunks[0], choice.logprobs)
    elif chunks:
        choice.logprobs.CopyFrom(lp.concat([typed.columns(c) for c in chunks]))
    status = {
        "status": body.status,
        "incomplete_details": {"reason": body.incomplete_details.reason} if body.incomplete_details else None,
    }
    choice.finish_reason, choice.raw_finish_reason = _finish(status, has_calls, refused)
    common.usage_from(body.usage, out.usage, input_key="input_tokens", output_key="output_tokens")
    _response_error(request, body.error, choice, refused, saw_logprobs, out)


def _response_error(request, error, choice, refused: bool, saw_logprobs: bool, out: response_pb2.Response) -> None:
    """The soft error of a complete response: the provider's error, missing logprobs, or broken JSON."""
    if isinstance(error, dict):
        out.error.CopyFrom(
            errors_pb2.ResponseError(
                reason=errors_pb2.ERROR_REASON_PROVIDER_UNAVAILABLE,
                message=str(error.get("message") or "the response failed"),
                provider_code=str(error.get("code") or ""),
            )
        )
    elif (
        request.HasField("logprobs")
        and not saw_logprobs
        and any(p.WhichOneof("content") == "text" for p in choice.message.parts)
    ):
        out.error.CopyFrom(common.missing_logprobs_error(0))
    else:
        text = "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")
        if (
            not refused
            and choice.finish_reason == response_pb2.FINISH_REASON_STOP
            and (violation := common.constraint_error(request, text))
        ):
            out.error.CopyFrom(violation)


def lift_response_object(
    transport: OpenAIResponses, request: request_pb2.Request, body: dict[str, Any], out: response_pb2.Response
) -> None:
    """A complete Responses object (the unary body, or `response.completed`'s) -> the IR response."""
    out.id = body.get("id") or ""
    out.model = body.get("model") or ""
    choice = out.choices.add(index=0)
    choice.message.role = content_pb2.ROLE_ASSISTANT
    issuer = transport.issuer(request)
    chunks = []
    has_calls = refused = False
    saw_logprobs = False
    for item in body.get("output") or ():
        kind = item.get("type")
        if kind == "reasoning":
            part = choice.message.parts.add(item_id=item.get("id") or "")
            part.reasoning.summary.extend(s.get("text", "") for s in item.get("summary") or ())
            if item.get("encrypted_content"):
                part.artifacts.add(
                    kind=ENCRYPTED, data=item["encrypted_content"].encode(), issuer=issuer, item_id=part.item_id
                )
            if not part.HasField("reasoning"):
                part.reasoning.SetInParent()
        elif kind == "message":
            for content in item.get("content") or ():
                if content.get("type") == "refusal":
                    refused = True
                    choice.message.parts.add(text=content.get("refusal") or "", item_id=item.get("id") or "")
                    continue
                choice.message.parts.add(text=content.get("text") or "", item_id=item.get("id") or "")
                if "logprobs" in content:
                    saw_logprobs = True
                    if content["logprobs"]:
                        chunks.append(lp.from_openai_content(content["logprobs"]))
        elif kind == "function_call":
            has_calls = True
            choice.message.parts.add(
                item_id=item.get("id") or "",
                tool_call=content_pb2.ToolCall(
                    id=item.get("call_id") or "",
                    name=item.get("name") or "",
                    arguments_json=item.get("arguments") or "",
                ),
            )
        else:
            out.warnings.add(code="unknown_output_item", message=f"an output item of type {kind!r} was not lifted")
    if chunks:
        choice.logprobs.CopyFrom(lp.concat(chunks))
    choice.finish_reason, choice.raw_finish_reason = _finish(body, has_calls, refused)
    common.usage_from(body.get("usage"), out.usage, input_key="input_tokens", output_key="output_tokens")
    _response_error(request, body.get("error"), choice, refused, saw_logprobs, out)


class _ResponsesStreamLifter(StreamLifter):
    """Named SSE events -> IR events. The final `response.completed` object settles finish, usage and errors."""

    def __init__(self, transport: OpenAIResponses, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.parts: dict[tuple[int, int], int] = {}  # (output_index, content_index) -> part index
        self.final: dict[str, Any] | None = None
        self.model = ""
        self.error: errors_pb2.ResponseError | None = None
        self.reasoning_done: dict[int, dict[str, Any]] = {}  # output_index -> the reasoning item from `done`

    def _part(self, output_index: int, content_index: int = 0) -> tuple[int, bool]:
        key = (output_index, content_index)
        if key not in self.parts:
            self.parts[key] = len(self.parts)
            return self.parts[key], True
        return self.parts[key], False

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        data = common.parse_json(event.data, "stream event")
        kind = data.get("type") or event.event
        out = []
        if kind == "response.created":
            response = data.get("response") or {}
            self.model = response.get("model") or ""
            out.append(
                stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id=response.get("id") or "", model=self.model))
            )
        elif kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") not in ("reasoning", "function_call"):
                return out  # a message: its parts start with their content parts
            index, _ = self._part(data.get("output_index", 0))
            delta = stream_pb2.PartDelta(part_index=index, item_id=item.get("id") or "")
            if item.get("type") == "reasoning":
                delta.reasoning.SetInParent()
            else:
                delta.tool_call.id = item.get("call_id") or ""
                delta.tool_call.name = item.get("name") or ""
            out.append(stream_pb2.StreamEvent(delta=delta))
        elif kind == "response.reasoning_summary_part.added":
            index, _ = self._part(data.get("output_index", 0))
            out.append(
                stream_pb2.StreamEvent(
                    delta=stream_pb2.PartDelta(
                        part_index=index,
                        reasoning=stream_pb2.ReasoningDelta(
                            summary_index=data.get("summary_index", 0), summary_text=""
                        ),
                    )
                )
            )
        elif kind == "response.reasoning_summary_text.delta":
            index, _ = self._part(data.get("output_index", 0))
            out.append(
                stream_pb2.StreamEvent(
                    delta=stream_pb2.PartDelta(
                        part_index=index,
                        reasoning=stream_pb2.ReasoningDelta(
                            summary_index=data.get("summary_index", 0), summary_text=data.get("delta") or ""
                        ),
                    )
                )
            )
        elif kind in ("response.content_part.added", "response.output_text.delta", "response.refusal.delta"):
            index, new = self._part(data.get("output_index", 0), data.get("content_index", 0))
            delta = stream_pb2.PartDelta(part_index=index, text=data.get("delta") or "" if "delta" in data else "")
            if new:
                delta.item_id = data.get("item_id") or ""
            if kind == "response.output_text.delta" and data.get("logprobs"):
                lp.from_openai_content(data["logprobs"], into=delta.logprobs)
            if kind != "response.content_part.added" or new:
                out.append(stream_pb2.StreamEvent(delta=delta))
        elif kind == "response.function_call_arguments.delta":
            index, _ = self._part(data.get("output_index", 0))
            out.append(
                stream_pb2.StreamEvent(
                    delta=stream_pb2.PartDelta(
                        part_index=index, tool_call=stream_pb2.ToolCallDelta(arguments_json=data.get("delta") or "")
                    )
                )
            )
        elif kind == "response.output_item.done":
            item = data.get("item") or {}
            if item.get("type") == "reasoning":
                # `added` can carry a different, non-final value; `done` is final. The artifact is emitted at the
                # end, from `response.completed` when it arrives (the real service re-encrypts the content in each
                # of these events), so that the stream folds to exactly what the unary lift of that object gives.
                self.reasoning_done[data.get("output_index", 0)] = item
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = data.get("response") or {}
        elif kind == "error":
            # Documented flat ({type, code, message}); the real service has also nested it under `error`.
            payload = data["error"] if isinstance(data.get("error"), dict) else data
            self.error = errors_pb2.ResponseError(
                reason=errors_pb2.ERROR_REASON_PROVIDER_UNAVAILABLE,
                message=str(payload.get("message") or "the provider reported an error mid-stream"),
                provider_code=str(payload.get("code") or ""),
            )
        return out

    def _artifacts(self) -> list[stream_pb2.StreamEvent]:
        final_output = (self.final or {}).get("output") or []
        out = []
        for output_index, done in sorted(self.reasoning_done.items()):
            item = done
            if output_index < len(final_output) and final_output[output_index].get("type") == "reasoning":
                item = final_output[output_index]
            if not item.get("encrypted_content"):
                continue
            artifact = content_pb2.ReasoningArtifact(
                kind=ENCRYPTED,
                data=item["encrypted_content"].encode(),
                issuer=self.transport.issuer(self.request),
                item_id=item.get("id") or "",
            )
            index, _ = self._part(output_index)
            out.append(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=index, artifacts=[artifact])))
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        events = self._artifacts()
        end = stream_pb2.StreamEnd()
        if self.final is not None:
            settled = response_pb2.Response()
            lift_response_object(self.transport, self.request, self.final, settled)
            choice = settled.choices[0]
            end.finishes.add(
                choice_index=0, finish_reason=choice.finish_reason, raw_finish_reason=choice.raw_finish_reason
            )
            if settled.HasField("usage"):
                end.usage.CopyFrom(settled.usage)
            if settled.HasField("error"):
                end.error.CopyFrom(settled.error)
            end.warnings.extend(settled.warnings)
        if self.error is not None:
            end.error.CopyFrom(self.error)
        elif self.final is None:
            end.error.CopyFrom(
                common.truncated_error("the stream ended before response.completed; the output is partial")
            )
        return [*events, stream_pb2.StreamEvent(end=end)]
