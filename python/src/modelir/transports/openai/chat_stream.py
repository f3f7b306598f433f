"""The SSE stream lift of OpenAI Chat Completions (and of the engines that speak its dialect).

From OpenAI's streaming reference (https://platform.openai.com/docs/api-reference/chat-streaming): with
`stream_options.include_usage` the usage arrives in an extra chunk with `choices: []`; tool-call fragments after
the first carry only their `index`; the stream ends with `data: [DONE]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from modelir.logprobs import build as lp
from modelir.transports import accounting
from modelir.transports.base import PlainLane, RawEvent
from modelir.transports.openai import _wire as wire
from modelir.transports.openai import responses_items as items
from modelir.transports.openai.chat_facts import annotations_part, reasoning_details_part
from modelir.v1 import request_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.openai.chat import OpenAIChat

_JOINED = ("text", "summary", "data")  # members of a reasoning entry that stream in pieces

# A plain chunk: one choice's text and nothing else, nearly every chunk of a stream, read by one closed decode.
# Its members (`usage`, `logprobs` and `finish_reason` null; the others scalars, which the lift ignores once the
# stream has started) are these structs' fields; a section that declares each of them plainly has nothing to
# account in such a chunk (`accounting.declares_plainly`), so the lane lifts it without the accounting.
_Scalar = str | int | float | bool | None  # nested values are not plain: msgspec refuses them, `feed` reads them


class _PlainDelta(msgspec.Struct, forbid_unknown_fields=True):
    content: str | None = None
    role: _Scalar = None


class _PlainChoice(msgspec.Struct, forbid_unknown_fields=True):
    delta: _PlainDelta
    index: int = 0
    logprobs: None = None
    finish_reason: None = None


class _PlainChunk(msgspec.Struct, forbid_unknown_fields=True):
    choices: tuple[_PlainChoice]  # exactly one
    id: _Scalar = None
    object: _Scalar = None
    created: _Scalar = None
    model: _Scalar = None
    system_fingerprint: _Scalar = None
    obfuscation: _Scalar = None
    service_tier: _Scalar = None
    usage: None = None


_PLAIN = msgspec.json.Decoder(_PlainChunk)
PLAIN_PATHS = (
    *(key for key in _PlainChunk.__struct_fields__ if key != "choices"),
    *(f"choices[].{key}" for key in _PlainChoice.__struct_fields__ if key != "delta"),
    *(f"choices[].delta.{key}" for key in _PlainDelta.__struct_fields__),
)


class ChatStreamLifter(wire.ChunkStream):
    """Chat completion chunks -> IR events. Tool-call fragments are routed by their `index`."""

    transport: OpenAIChat

    def __init__(self, transport: OpenAIChat, request: request_pb2.Request) -> None:
        super().__init__(transport, request)
        self.early_citations: dict[int, list[dict[str, Any]]] = {}  # choice -> annotations before its text
        self.reasoning_details: dict[int, dict[Any, dict[str, Any]]] = {}  # choice -> entry index -> entry

    def _cited(self, index: int, annotations: list[dict[str, Any]]) -> stream_pb2.StreamEvent:
        text = self.parts.texts().get(index, "")
        cited = [items.chat_citation(a, text) for a in annotations]
        part_index = self.parts.index(index, "text")
        return stream_pb2.StreamEvent(
            delta=stream_pb2.PartDelta(choice_index=index, part_index=part_index, citations=cited)
        )

    def _reasoning_detail(self, index: int, entry: dict[str, Any]) -> None:
        """OpenRouter streams each reasoning entry in pieces under its `index`: text members are joined, the
        others (the signature, which comes last) take their latest non-null value."""
        entries = self.reasoning_details.setdefault(index, {})
        merged = entries.setdefault(entry.get("index", len(entries)), {})
        for key, value in entry.items():
            if key in _JOINED and isinstance(value, str) and isinstance(merged.get(key), str):
                merged[key] += value
            elif value is not None or key not in merged:
                merged[key] = value

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        """The late facts of each choice (early citations, reasoning details) as the unary lift places them."""
        out = []
        for index, early in sorted(self.early_citations.items()):
            if index in self.parts.texts():
                out.append(self._cited(index, early))
            else:  # no text to cite: the annotations are kept as they came, as the unary lift keeps them
                part = annotations_part(early, self.transport.issuer(self.request), self.transport.name)
                out.append(self.parts.delta(index, "annotations", part=part))
        issuer = self.transport.issuer(self.request)
        for index, entries in sorted(self.reasoning_details.items()):
            part = reasoning_details_part(list(entries.values()), issuer, self.transport.name)
            out.append(self.parts.delta(index, "reasoning_details", part=part))
        return [*out, *super().close(interrupted=interrupted)]

    def plain_lane(self, section: accounting.Schema) -> PlainLane | None:
        return self._plain if accounting.declares_plainly(section, PLAIN_PATHS) else None

    def plain_text(self, choice: int, text: str) -> stream_pb2.StreamEvent:
        return self.parts.text_delta(choice, text)

    def _plain(self, event: RawEvent) -> tuple[int, str] | None:
        """(choice, text) of a plain chunk (`_PlainChunk`) once the stream has started and the choice been
        seen, whose text `feed` lifts as one delta (none for ""). None for anything else, which takes `feed`."""
        if not self.started:
            return None
        try:
            chunk = _PLAIN.decode(event.data)
        except msgspec.DecodeError:  # not plain (or not JSON): `feed` says what it is
            return None
        choice = chunk.choices[0]
        if choice.index not in self.finishes:
            return None
        if isinstance(chunk.service_tier, str):
            self.service_tier = chunk.service_tier
        return choice.index, choice.delta.content or ""

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        choices, out = self.chunk(event)
        for index, raw in choices:
            out.extend(self._choice_events(index, raw))
        return out

    def _choice_events(self, index: int, raw: dict[str, Any]) -> list[stream_pb2.StreamEvent]:
        parts = self.parts
        out: list[stream_pb2.StreamEvent] = []
        delta = raw.get("delta") or {}
        raw_logprobs = raw.get("logprobs") or {}
        logprobs = raw_logprobs.get("content")
        refusal_logprobs = raw_logprobs.get("refusal")
        chunk_logprobs = self.transport.adjust_logprobs(lp.from_openai_content(logprobs)) if logprobs else None
        if logprobs is not None or refusal_logprobs is not None:
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
        annotations = [a for a in delta.get("annotations") or () if isinstance(a, dict)]
        if annotations and index in parts.texts() and index not in self.early_citations:
            out.append(self._cited(index, annotations))  # citations of the content streamed so far
        elif annotations:  # before any text (OpenRouter's web search): cited at the end, against the whole text
            self.early_citations.setdefault(index, []).extend(annotations)
        for entry in delta.get("reasoning_details") or ():
            if isinstance(entry, dict):
                self._reasoning_detail(index, entry)
        if delta.get("refusal"):
            self.refused.add(index)
            event = parts.delta(index, "refusal", refusal=delta["refusal"])
            if refusal_logprobs:
                event.delta.logprobs.CopyFrom(self.transport.adjust_logprobs(lp.from_openai_content(refusal_logprobs)))
                refusal_logprobs = None
            out.append(event)
        for call in delta.get("tool_calls") or ():
            function = call.get("function") or {}
            fragment = stream_pb2.ToolCallDelta(
                id=call.get("id") or "", name=function.get("name") or "", arguments_json=function.get("arguments") or ""
            )
            out.append(parts.delta(index, ("tool", call.get("index", 0)), tool_call=fragment))
        if chunk_logprobs is not None:
            out.append(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(choice_index=index, logprobs=chunk_logprobs)))
        if refusal_logprobs:
            logprobs_only = self.transport.adjust_logprobs(lp.from_openai_content(refusal_logprobs))
            out.append(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(choice_index=index, logprobs=logprobs_only)))
        return out
