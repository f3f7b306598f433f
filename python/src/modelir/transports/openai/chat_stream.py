"""The SSE stream lift of OpenAI Chat Completions (and of the engines that speak its dialect).

From OpenAI's streaming reference (https://platform.openai.com/docs/api-reference/chat-streaming): with
`stream_options.include_usage` the usage arrives in an extra chunk with `choices: []`; tool-call fragments after
the first carry only their `index`; the stream ends with `data: [DONE]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelir import logprobs as lp
from modelir import soft_errors
from modelir.transports import _common as common
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.openai import _wire as wire
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.openai.chat import OpenAIChat


class ChatStreamLifter(StreamLifter):
    """Chat completion chunks -> IR events. Tool-call fragments are routed by their `index`."""

    def __init__(self, transport: OpenAIChat, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.done = False
        self.usage = response_pb2.Usage()
        self.finishes: dict[int, dict[str, Any]] = {}
        self.parts = StreamParts()
        self.refused: set[int] = set()
        self.has_logprobs: set[int] = set()
        self.facts = soft_errors.Facts()

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        if event.data.strip() == b"[DONE]":
            self.done = True
            return []
        chunk = common.parse_json(event.data, "stream chunk")
        out: list[stream_pb2.StreamEvent] = []
        if isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            self.facts.provider_error = soft_errors.provider_error(
                str(error.get("message") or "the provider reported an error mid-stream"),
                error.get("code") or error.get("type"),
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
            out.extend(self._choice_events(raw))
        if chunk.get("usage"):
            wire.usage_from(chunk["usage"], self.usage, input_key="prompt_tokens", output_key="completion_tokens")
        return out

    def _choice_events(self, raw: dict[str, Any]) -> list[stream_pb2.StreamEvent]:
        index = raw.get("index", 0)
        self.finishes.setdefault(index, {})
        parts = self.parts
        out: list[stream_pb2.StreamEvent] = []
        delta = raw.get("delta") or {}
        logprobs = (raw.get("logprobs") or {}).get("content")
        chunk_logprobs = self.transport.adjust_logprobs(lp.from_openai_content(logprobs)) if logprobs else None
        if logprobs is not None:
            self.has_logprobs.add(index)
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            out.append(parts.delta(index, "reasoning", reasoning=stream_pb2.ReasoningDelta(text=reasoning)))
        if delta.get("content"):
            event = parts.delta(index, "text", text=delta["content"])
            if chunk_logprobs is not None:
                event.delta.logprobs.CopyFrom(chunk_logprobs)
                chunk_logprobs = None
            out.append(event)
        if delta.get("refusal"):
            self.refused.add(index)
            out.append(parts.delta(index, "refusal", text=delta["refusal"]))
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            fragment = stream_pb2.ToolCallDelta(
                id=call.get("id") or "", name=function.get("name") or "", arguments_json=function.get("arguments") or ""
            )
            out.append(parts.delta(index, ("tool", call.get("index", 0)), tool_call=fragment))
        if chunk_logprobs is not None:
            out.append(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(choice_index=index, logprobs=chunk_logprobs)))
        if raw.get("finish_reason") is not None:
            self.finishes[index] = raw
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        if self.usage.ListFields():
            end.usage.CopyFrom(self.usage)
        for index in sorted(self.finishes):
            raw = self.finishes[index]
            finish, raw_reason, stop_sequence = self.transport.finish(raw.get("finish_reason"), raw.get("stop_reason"))
            if index in self.refused:
                finish = response_pb2.FINISH_REASON_REFUSAL
            end.finishes.add(
                choice_index=index, finish_reason=finish, raw_finish_reason=raw_reason, stop_sequence=stop_sequence
            )
        if interrupted or not self.done:
            self.facts.cut_short = "the stream ended before [DONE]; the output is partial"
        self.facts.missing_logprobs = [i for i in self.finishes if i not in self.has_logprobs]
        soft_errors.settle_stream(self.request, end, self.facts, self.parts.texts())
        return [stream_pb2.StreamEvent(end=end)]
