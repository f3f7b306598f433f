"""The stream lift of OpenAI Responses: named SSE events -> IR events, settled by the final response object.

From OpenAI's streaming reference (https://platform.openai.com/docs/api-reference/responses-streaming):
`encrypted_content` is taken from `response.completed` (or `output_item.done` when the stream ends early), never
from `output_item.added` (the service re-encrypts it in each of these events, so all three differ); an `error`
event is documented flat (`{type, code, message}`) and has also been seen nested under `error`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.transports import _common as common
from modelir.transports import provider_errors
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.openai import _typed as typed
from modelir.transports.openai import responses_items as items
from modelir.transports.openai import responses_lift
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import content_pb2, request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.openai.responses import OpenAIResponses

_TEXT_EVENTS = ("response.content_part.added", "response.output_text.delta", "response.refusal.delta")
_TYPED_ITEMS = ("reasoning", "message", "function_call")
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")


class ResponsesStreamLifter(StreamLifter):
    def __init__(self, transport: OpenAIResponses, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.parts = StreamParts()  # one choice; keys are (output_index, content_index)
        self.final: typed.ResponseObject | None = None
        self.error: Any = None
        self.reasoning_done: dict[int, dict[str, Any]] = {}  # output_index -> the reasoning item from `done`
        self.texts: dict[tuple[int, int], list[str]] = {}  # (output_index, content_index) -> text so far
        self.arguments_seen: set[int] = set()  # function calls whose arguments came as deltas

    def _delta(self, data: dict[str, Any], **fields: Any) -> stream_pb2.StreamEvent:
        return self.parts.delta(0, (data.get("output_index", 0), 0), **fields)

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        if event.data.strip() == b"[DONE]":
            return []  # compatible servers (OpenRouter) end the stream as chat completions do; the final event said it
        data = common.parse_json(event.data, "stream event")
        kind = data.get("type") or event.event
        if kind == "response.created":
            response = data.get("response") or {}
            start = stream_pb2.StreamStart(id=response.get("id") or "", model=response.get("model") or "")
            return [stream_pb2.StreamEvent(start=start)]
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "reasoning":
                return [self._delta(data, item_id=item.get("id") or "", reasoning=stream_pb2.ReasoningDelta())]
            if item.get("type") == "function_call":
                call = stream_pb2.ToolCallDelta(id=item.get("call_id") or "", name=item.get("name") or "")
                return [self._delta(data, item_id=item.get("id") or "", tool_call=call)]
            return []  # a message starts with its content parts; other items are whole at `output_item.done`
        if kind in ("response.reasoning_summary_part.added", "response.reasoning_summary_text.delta"):
            summary = stream_pb2.ReasoningDelta(summary_index=data.get("summary_index", 0), summary_text="")
            if kind.endswith(".delta"):
                summary.summary_text = data.get("delta") or ""
            return [self._delta(data, reasoning=summary)]
        if kind == "response.reasoning_text.delta":  # raw reasoning (gpt-oss servers)
            return [self._delta(data, reasoning=stream_pb2.ReasoningDelta(text=data.get("delta") or ""))]
        if kind in _TEXT_EVENTS:
            return self._text(kind, data)
        if kind == "response.output_text.annotation.added":
            return self._annotation(data)
        if kind == "response.function_call_arguments.delta":
            self.arguments_seen.add(data.get("output_index", 0))
            return [self._delta(data, tool_call=stream_pb2.ToolCallDelta(arguments_json=data.get("delta") or ""))]
        if kind == "response.function_call_arguments.done":
            return self._arguments_done(data, data.get("arguments"))
        if kind == "response.output_item.done":
            return self._item_done(data)
        elif kind in _FINAL_EVENTS:
            self.final = responses_lift.decode(event.data, event=True)
        elif kind == "error":
            payload = data["error"] if isinstance(data.get("error"), dict) else data
            self.error = provider_errors.mid_stream(payload)
        return []

    def _text(self, kind: str, data: dict[str, Any]) -> list[stream_pb2.StreamEvent]:
        key = (data.get("output_index", 0), data.get("content_index", 0))
        index, new = self.parts.open(0, key)
        if kind == "response.content_part.added":
            if not new:
                return []
            delta = stream_pb2.PartDelta(part_index=index)
            if (data.get("part") or {}).get("type") == "refusal":
                delta.refusal = ""
            else:
                delta.text = ""
        elif kind == "response.refusal.delta":
            delta = stream_pb2.PartDelta(part_index=index, refusal=data.get("delta") or "")
        else:
            delta = stream_pb2.PartDelta(part_index=index, text=data.get("delta") or "")
            self.texts.setdefault(key, []).append(delta.text)
        if new:
            delta.item_id = data.get("item_id") or ""
        if kind == "response.output_text.delta" and data.get("logprobs"):
            lp.from_openai_content(data["logprobs"], into=delta.logprobs)
        return [stream_pb2.StreamEvent(delta=delta)]

    def _annotation(self, data: dict[str, Any]) -> list[stream_pb2.StreamEvent]:
        """A citation of text already streamed: its character offsets are converted against that text."""
        key = (data.get("output_index", 0), data.get("content_index", 0))
        annotation = data.get("annotation")
        if not isinstance(annotation, dict):
            return []
        native = orjson.dumps(annotation).decode()
        cited = items.citation(annotation, "".join(self.texts.get(key, ())), native)
        index = self.parts.index(0, key)
        return [stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=index, citations=[cited]))]

    def _arguments_done(
        self, data: dict[str, Any], arguments: Any, item: dict[str, Any] | None = None
    ) -> list[stream_pb2.StreamEvent]:
        """Arguments that arrive whole (`function_call_arguments.done`, `output_item.done`): compatible servers
        (LM Studio, gpt-oss) may send no deltas. Taken once, and only when no delta brought them; a call whose
        `output_item.added` never came takes its id and name from the done item."""
        output_index = data.get("output_index", 0)
        if output_index in self.arguments_seen or not isinstance(arguments, str) or not arguments:
            return []
        self.arguments_seen.add(output_index)
        index, new = self.parts.open(0, (output_index, 0))
        delta = stream_pb2.PartDelta(part_index=index, tool_call=stream_pb2.ToolCallDelta(arguments_json=arguments))
        if new and item:
            delta.item_id = item.get("id") or ""
            delta.tool_call.id = item.get("call_id") or ""
            delta.tool_call.name = item.get("name") or ""
        return [stream_pb2.StreamEvent(delta=delta)]

    def _item_done(self, data: dict[str, Any]) -> list[stream_pb2.StreamEvent]:
        item = data.get("item") or {}
        output_index = data.get("output_index", 0)
        kind = item.get("type")
        if kind == "reasoning":
            # The artifact is emitted at the end, from `response.completed` when it arrives, so that the
            # stream folds to exactly what the unary lift of that object gives.
            self.reasoning_done[output_index] = item
            return []
        if kind == "function_call":
            return self._arguments_done(data, item.get("arguments"), item)
        if kind in _TYPED_ITEMS or not isinstance(kind, str):
            return []
        parts = items.item_parts(typed.raw_item(item), self.transport.issuer(self.request))
        return [self.parts.delta(0, (output_index, "part", k), part=part) for k, part in enumerate(parts)]

    def _artifacts(self) -> list[stream_pb2.StreamEvent]:
        final = responses_lift.output_items(self.final) if self.final else []
        out = []
        for output_index, done in sorted(self.reasoning_done.items()):
            settled = final[output_index] if output_index < len(final) else None
            if isinstance(settled, typed.ReasoningItem):
                data, item_id = settled.encrypted_content, settled.id
            else:
                data, item_id = done.get("encrypted_content"), done.get("id")
            if not data:
                continue
            artifact = content_pb2.OpaqueArtifact(
                kind=responses_lift.ENCRYPTED,
                data=data.encode(),
                issuer=self.transport.issuer(self.request),
            )
            out.append(self._delta({"output_index": output_index}, artifacts=[artifact], item_id=item_id or ""))
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        events = self._artifacts()
        end = stream_pb2.StreamEnd()
        settled = response_pb2.Response()
        facts = soft_errors.Facts()
        if self.final is not None:
            facts = responses_lift.lift_object(self.transport, self.request, self.final, settled)
            choice = settled.choices[0]
            end.finishes.add(
                choice_index=0, finish_reason=choice.finish_reason, raw_finish_reason=choice.raw_finish_reason
            )
            if settled.HasField("usage"):
                end.usage.CopyFrom(settled.usage)
            end.service_tier = settled.service_tier
            end.warnings.extend(settled.warnings)
            if choice.message.phase:  # the settled message's phase, on a delta of its own (PartDelta.phase, IR 1.1)
                events.append(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(phase=choice.message.phase)))
        else:
            facts.cut_short = "the stream ended before response.completed; the output is partial"
        if self.error is not None:
            facts.provider_error = self.error
        soft_errors.settle(self.request, settled, facts)
        if bool(settled.errors):
            end.errors.extend(settled.errors)
        return [*events, stream_pb2.StreamEvent(end=end)]
