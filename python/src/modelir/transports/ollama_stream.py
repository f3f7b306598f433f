"""Ollama's streamed answer: NDJSON lines (one JSON object a line, `done: true` on the last) as IR stream events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.transports import _common as common
from modelir.transports import ollama_warnings, zero_output
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.ollama import call_part, chosen_label, settle
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import logprobs_pb2, request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.ollama import Ollama


class NdjsonStreamLifter(StreamLifter):
    """NDJSON lines -> IR events; the end names the chosen label under a choice constraint."""

    def __init__(self, transport: Ollama, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.final: dict[str, Any] | None = None
        self.error: Any = None
        self.parts = StreamParts()  # one choice: "thinking", "text", then ("call", n)
        self.thinking = False
        self.texts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.saw_logprobs = False
        self.tokens: list[str] = []  # the logprob tokens, for `lp.replaced_bytes_warning`
        self.nothing = zero_output.asks_for_nothing(request)  # what the engine generates is withheld

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        data = common.parse_json(event.data, "stream line")
        out: list[stream_pb2.StreamEvent] = []
        if isinstance(data.get("error"), str):
            self.error = soft_errors.provider_error(data["error"])
            return out
        if not self.started:
            self.started = True
            out.append(stream_pb2.StreamEvent(start=stream_pb2.StreamStart(model=data.get("model") or "")))
        message = data.get("message") or {}
        thinking = message.get("thinking") if "message" in data else data.get("thinking")
        text = message.get("content") if "message" in data else data.get("response")
        if thinking and not self.nothing:
            self.thinking = True
            out.append(self.parts.delta(0, "thinking", reasoning=stream_pb2.ReasoningDelta(text=thinking)))
        delta = None
        if text and not self.nothing:
            self.texts.append(text)
            delta = stream_pb2.PartDelta(part_index=self.parts.index(0, "text"), text=text)
        if data.get("logprobs"):
            self.saw_logprobs = True
            delta = delta or stream_pb2.PartDelta()
            lp.from_openai_content(data["logprobs"], into=delta.logprobs)
            delta.logprobs.basis = logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
            self.tokens.extend(delta.logprobs.tokens)
        if delta is not None and not self.nothing:
            out.append(stream_pb2.StreamEvent(delta=delta))
        if not self.nothing:
            self.calls.extend(message.get("tool_calls") or data.get("tool_calls") or [])
        if data.get("done"):
            self.final = data
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out: list[stream_pb2.StreamEvent] = []
        text_index = self.parts.index(0, "text")
        full = "".join(self.texts)
        # The text part exists in the unary answer even when empty.
        out.append(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=text_index, text="")))
        for offset, call in enumerate(self.calls):
            part = call_part(call)
            out.append(
                stream_pb2.StreamEvent(
                    delta=stream_pb2.PartDelta(
                        part_index=self.parts.index(0, ("call", offset)),
                        tool_call=stream_pb2.ToolCallDelta(
                            id=part.tool_call.id, name=part.tool_call.name, arguments_json=part.tool_call.arguments_json
                        ),
                    )
                )
            )
        end = stream_pb2.StreamEnd()
        facts = soft_errors.Facts()
        settled = response_pb2.Response()
        if self.final is not None:
            choice = settled.choices.add()
            if self.thinking:
                choice.message.parts.add().reasoning.SetInParent()
            choice.message.parts.add(text=full)
            choice.message.parts.extend(call_part(c) for c in self.calls)
            if not self.saw_logprobs:
                facts.lack_logprobs(0)
            settle(self.final, choice, settled)
            choice.constrained_label = chosen_label(self.request, full)
            end.finishes.add(
                choice_index=0,
                finish_reason=choice.finish_reason,
                raw_finish_reason=choice.raw_finish_reason,
                constrained_label=choice.constrained_label,
            )
            end.usage.CopyFrom(settled.usage)
            if settled.HasField("timing"):
                end.timing.CopyFrom(settled.timing)
        else:
            end.finishes.add(choice_index=0)
            facts.cut_short = "the stream ended before its done line; the output is partial"
        facts.provider_error = self.error
        if self.nothing and self.final is not None:
            zero_output.end_of_nothing(end, "Ollama")
        soft_errors.settle(self.request, settled, facts)
        if bool(settled.errors):
            end.errors.extend(settled.errors)
        end.warnings.extend(ollama_warnings.truncation(self.request, end.usage))
        end.warnings.extend(ollama_warnings.default_penalty(self.request))
        if not self.nothing and (replaced := lp.replaced_bytes_warning(self.tokens, "Ollama")):
            end.warnings.append(replaced)
        out.append(stream_pb2.StreamEvent(end=end))
        return out
