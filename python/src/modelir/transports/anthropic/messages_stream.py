"""The SSE stream lift of Anthropic Messages: content-block events -> IR events.

From Anthropic's streaming reference (https://docs.anthropic.com/en/docs/build-with-claude/streaming): `ping` can
come anywhere; a `signature_delta` ends a thinking block; `input_json_delta` partials are joined, then parsed;
`message_delta.usage.output_tokens` is cumulative; a `redacted_thinking` block arrives whole in
`content_block_start`.

Provider-run tools (see `blocks`): a `server_tool_use` block starts with `input: {}` and fills through
`input_json_delta`, so its part is sent whole (`PartDelta.part`) at `content_block_stop`; every `*_tool_result`
block, and a block of an unknown type, arrives complete in `content_block_start` and is sent whole there. A cited
text block starts with `citations: []`, and each `citations_delta` appends one citation. `container` and
`stop_details` come in `message_delta.delta` and become the message's last parts when the stream ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from modelir.errors import soft as soft_errors
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import provider_errors
from modelir.transports.anthropic import blocks
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import content_pb2, request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.anthropic.messages import AnthropicMessages

SIGNATURE = blocks.SIGNATURE
REDACTED = blocks.REDACTED


_COMPACTION = "compaction"  # server-side compaction: a block whose summary streams as `compaction_delta`s


class MessagesStreamLifter(StreamLifter):
    def __init__(self, transport: AnthropicMessages, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.issuer = transport.issuer(request)
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}  # index -> {"type", "signature" | "json" buffers}
        self.stop: tuple[str | None, str | None] | None = None
        self.done = False
        self.parts = StreamParts()  # keys are the native block indices
        self.facts = soft_errors.Facts()
        self.call_names: dict[str, str] = {}  # server tool call id -> name, to name its result
        self.message_facts: dict[str, Any] = {}  # `container` and `stop_details` from message_delta
        self.unknown_deltas: set[str] = set()  # delta types this lift does not know, said in a warning

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        data = common.parse_json(event.data, "stream event")
        kind = data.get("type") or event.event
        out: list[stream_pb2.StreamEvent] = []
        if kind == "message_start":
            message = data.get("message") or {}
            self.usage.update(message.get("usage") or {})
            out.append(
                stream_pb2.StreamEvent(
                    start=stream_pb2.StreamStart(id=message.get("id") or "", model=message.get("model") or "")
                )
            )
        elif kind == "content_block_start":
            index, block = data.get("index", 0), data.get("content_block") or {}
            self.blocks[index] = {"type": block.get("type"), "signature": [], "json": [], "block": block}
            delta = stream_pb2.PartDelta()
            if block.get("type") in blocks.CALL_TYPES:
                return out  # sent whole when its input is complete
            if block.get("type") == "text":
                delta.text = block.get("text") or ""
                delta.citations.extend(blocks.lift_citation(c, self.issuer) for c in block.get("citations") or ())
            elif block.get("type") == "thinking":
                delta.reasoning.text = block.get("thinking") or ""
                if block.get("signature"):
                    self.blocks[index]["signature"].append(block["signature"])
            elif block.get("type") == "redacted_thinking":
                delta.reasoning.SetInParent()
                delta.artifacts.add(kind=REDACTED, data=(block.get("data") or "").encode(), issuer=self.issuer)
            elif block.get("type") == "tool_use":
                delta.tool_call.id = block.get("id") or ""
                delta.tool_call.name = block.get("name") or ""
            elif block.get("type") == _COMPACTION:
                return out  # its summary follows in compaction_delta events: sent whole when the block stops
            else:  # a server tool result or an unknown block: complete here
                delta.part.CopyFrom(blocks.lift_block(block, self.issuer, self.call_names))
            delta.part_index = self.parts.index(0, index)
            out.append(stream_pb2.StreamEvent(delta=delta))
        elif kind == "content_block_delta":
            index, native = data.get("index", 0), data.get("delta") or {}
            state = self.blocks.setdefault(index, {"type": None, "signature": [], "json": []})
            kinds = native.get("type")
            if kinds == "text_delta":
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(part_index=self.parts.index(0, index), text=native.get("text") or "")
                    )
                )
            elif kinds == "thinking_delta":
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(
                            part_index=self.parts.index(0, index),
                            reasoning=stream_pb2.ReasoningDelta(text=native.get("thinking") or ""),
                        )
                    )
                )
            elif kinds == "signature_delta":
                state["signature"].append(native.get("signature") or "")
            elif kinds == "input_json_delta":
                state["json"].append(native.get("partial_json") or "")
            elif kinds == "compaction_delta":  # members of the compaction block, in pieces
                for key in ("content", "encrypted_content"):
                    if isinstance(native.get(key), str):
                        state.setdefault("members", {}).setdefault(key, []).append(native[key])
            elif kinds == "citations_delta":
                citation = blocks.lift_citation(native.get("citation") or {}, self.issuer)
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(part_index=self.parts.index(0, index), citations=[citation])
                    )
                )
            else:
                self.unknown_deltas.add(str(kinds))
        elif kind == "content_block_stop":
            index = data.get("index", 0)
            state = self.blocks.get(index) or {}
            if state.get("type") == "thinking":
                artifact = content_pb2.OpaqueArtifact(
                    kind=SIGNATURE, data="".join(state["signature"]).encode(), issuer=self.issuer
                )
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(part_index=self.parts.index(0, index), artifacts=[artifact])
                    )
                )
            elif state.get("type") in blocks.CALL_TYPES:
                out.append(self._server_call(index, state))
            elif state.get("type") == _COMPACTION:
                out.append(self._compaction(index, state))
            elif state.get("type") == "tool_use":
                arguments = self._arguments(index, state)
                out.append(
                    stream_pb2.StreamEvent(
                        delta=stream_pb2.PartDelta(
                            part_index=self.parts.index(0, index),
                            tool_call=stream_pb2.ToolCallDelta(arguments_json=arguments),
                        )
                    )
                )
        elif kind == "message_delta":
            native = data.get("delta") or {}
            self.stop = (native.get("stop_reason"), native.get("stop_sequence"))
            self.message_facts.update({k: native[k] for k in ("container", "stop_details") if native.get(k)})
            # output_tokens here is a running total, not an increment: the latest value wins.
            self.usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = data.get("error") or {}
            self.facts.provider_error = provider_errors.mid_stream(error)
        return out

    def _arguments(self, index: int, state: dict[str, Any]) -> str:
        """Partials joined, then parsed, then written compactly: the same JSON text the unary lift gives."""
        text = "".join(state["json"]) or "{}"
        try:
            return orjson.dumps(orjson.loads(text)).decode()
        except orjson.JSONDecodeError:
            self.facts.malformed = f"the streamed tool input for block {index} is not valid JSON"
            return text

    def _server_call(self, index: int, state: dict[str, Any]) -> stream_pb2.StreamEvent:
        state["type"] = "sent"
        part = blocks.server_tool_call(state["block"], self._arguments(index, state), self.call_names, self.issuer)
        return stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=self.parts.index(0, index), part=part))

    def _compaction(self, index: int, state: dict[str, Any]) -> stream_pb2.StreamEvent:
        """The compaction block whole, as the unary answer has it: its start with the deltas' members joined."""
        state["type"] = "sent"
        block = dict(state["block"])
        block.update({key: "".join(pieces) for key, pieces in state.get("members", {}).items()})
        part = blocks.lift_block(block, self.issuer, self.call_names)
        return stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=self.parts.index(0, index), part=part))

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = [  # a server tool call (or a compaction) cut off before its block stopped keeps what it had
            self._compaction(index, state) if state.get("type") == _COMPACTION else self._server_call(index, state)
            for index, state in sorted(self.blocks.items())
            if state.get("type") in (*blocks.CALL_TYPES, _COMPACTION)
        ]
        facts = blocks.message_facts(
            self.message_facts.get("container"), self.message_facts.get("stop_details"), self.issuer
        )
        for n, part in enumerate(facts):
            delta = stream_pb2.PartDelta(part_index=self.parts.index(0, ("fact", n)))
            if part.WhichOneof("content") == "refusal":
                delta.refusal = part.refusal
            else:
                delta.part.CopyFrom(part)
            out.append(stream_pb2.StreamEvent(delta=delta))
        end = stream_pb2.StreamEnd()
        choice = response_pb2.Choice()
        if self.stop is not None:
            blocks.finish(choice, *self.stop)
        stops.copy_stop(
            choice,
            end.finishes.add(
                choice_index=0,
                finish_reason=choice.finish_reason,
                raw_finish_reason=choice.raw_finish_reason,
            ),
        )
        end.service_tier = blocks.usage(self.usage, end.usage)
        if not end.usage.ListFields():
            end.ClearField("usage")
        if interrupted or not self.done:
            self.facts.cut_short = "the stream ended before message_stop; the output is partial"
        soft_errors.settle_stream(self.request, end, self.facts, self.parts.texts())
        end.warnings.extend(self.transport.reasoning_warnings(self.request))
        if self.unknown_deltas:
            end.warnings.add(
                code="unknown_stream_delta",
                message=f"deltas of unknown types were not lifted: {', '.join(sorted(self.unknown_deltas))}",
            )
        return [*out, stream_pb2.StreamEvent(end=end)]
