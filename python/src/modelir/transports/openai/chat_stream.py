"""The SSE stream lift of OpenAI Chat Completions (and of the engines that speak its dialect).

From OpenAI's streaming reference (https://platform.openai.com/docs/api-reference/chat-streaming): with
`stream_options.include_usage` the usage arrives in an extra chunk with `choices: []`; tool-call fragments after
the first carry only their `index`; the stream ends with `data: [DONE]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelir import logprobs as lp
from modelir.transports.base import RawEvent
from modelir.transports.openai import _wire as wire
from modelir.v1 import request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.openai.chat import OpenAIChat


class ChatStreamLifter(wire.ChunkStream):
    """Chat completion chunks -> IR events. Tool-call fragments are routed by their `index`."""

    def __init__(self, transport: OpenAIChat, request: request_pb2.Request) -> None:
        super().__init__(request)
        self.transport = transport
        self.refused: set[int] = set()

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        chunk, out = self.chunk(event)
        for raw in chunk.get("choices") or () if chunk is not None else ():
            out.extend(self._choice_events(raw))
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
        for index in sorted(self.finishes):
            raw = self.finishes[index]
            finish, raw_reason, stop_sequence = self.transport.finish(raw.get("finish_reason"), raw.get("stop_reason"))
            if index in self.refused:
                finish = response_pb2.FINISH_REASON_REFUSAL
            end.finishes.add(
                choice_index=index, finish_reason=finish, raw_finish_reason=raw_reason, stop_sequence=stop_sequence
            )
        return self.end(end, interrupted=interrupted)
