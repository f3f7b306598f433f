"""The SSE stream lift of the Gemini API (`:streamGenerateContent?alt=sse`).

From the Gemini API reference (https://ai.google.dev/api/generate-content): each event is a whole response chunk
with only the new parts; there is no `[DONE]` (a stream is complete when its candidates say why they finished);
the usage is cumulative on every chunk; Gemini 3 streams a call's arguments as `partialArgs` addressed by JSON path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from modelir import soft_errors
from modelir.transports import _common as common
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.google import parts
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import content_pb2, request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.google.genai import GoogleGenAI

THOUGHT_SIGNATURE = parts.THOUGHT_SIGNATURE


def _apply_partial(args: dict[str, Any], fragment: dict[str, Any], warnings: list[str]) -> None:
    """Apply one `partialArgs` fragment (`$.a.b` paths; string values arrive in pieces and are appended)."""
    path = fragment.get("jsonPath") or ""
    keys = path.removeprefix("$.").split(".") if path.startswith("$.") else []
    if not keys or any(not k or "[" in k for k in keys):
        warnings.append(f"a streamed argument at JSON path {path!r} is not supported and was left out")
        return
    target = args
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    last = keys[-1]
    if "stringValue" in fragment:
        target[last] = target.get(last, "") + fragment["stringValue"]
    elif "numberValue" in fragment:
        target[last] = fragment["numberValue"]
    elif "boolValue" in fragment:
        target[last] = fragment["boolValue"]
    elif "nullValue" in fragment:
        target[last] = None


class GenAIStreamLifter(StreamLifter):
    """Each SSE event is a whole response chunk with only the new parts. Consecutive text fragments of one kind
    are joined into one part; a part that carries a signature alone (an empty-text part) stays its own part."""

    def __init__(self, transport: GoogleGenAI, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.issuer = transport.issuer(request)
        self.parts = StreamParts()  # labelled with the kind of each part, to join runs of one kind
        self.signed: dict[int, set[int]] = {}  # candidate index -> parts that already carry a signature
        self.finishes: dict[int, str] = {}
        self.has_logprobs: set[int] = set()
        self.usage: dict[str, Any] | None = None
        self.block_reason = ""
        self.pending_calls: dict[int, dict[str, Any]] = {}  # candidate index -> a call whose arguments stream
        self.warnings: list[str] = []

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        chunk = common.parse_json(event.data, "stream chunk")
        out: list[stream_pb2.StreamEvent] = []
        if not self.started:
            self.started = True
            model = chunk.get("modelVersion") or ""
            out.append(
                stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id=chunk.get("responseId") or "", model=model))
            )
        for position, candidate in enumerate(chunk.get("candidates") or ()):
            index = candidate.get("index", position)
            kinds = self.parts.labels(index)
            signed = self.signed.setdefault(index, set())
            for raw in (candidate.get("content") or {}).get("parts") or ():
                out.extend(self._part_events(index, kinds, signed, raw))
            if candidate.get("logprobsResult"):
                self.has_logprobs.add(index)
                delta = stream_pb2.PartDelta(choice_index=index)
                parts.logprobs(candidate["logprobsResult"], delta.logprobs)
                out.append(stream_pb2.StreamEvent(delta=delta))
            if candidate.get("finishReason"):
                self.finishes[index] = candidate["finishReason"]
        if chunk.get("usageMetadata"):
            self.usage = chunk["usageMetadata"]  # cumulative on every chunk: the last one wins
        if (chunk.get("promptFeedback") or {}).get("blockReason"):
            self.block_reason = chunk["promptFeedback"]["blockReason"]
        return out

    def _streamed_call(self, index: int, kinds: list[str], raw: dict[str, Any]) -> list[stream_pb2.StreamEvent] | None:
        """Gemini 3 streams a call's arguments: `{name, willContinue}`, then `partialArgs` fragments addressed by
        JSON path, then an empty `functionCall` that closes it. Returns None for an ordinary (whole) call."""
        call = raw["functionCall"]
        pending = self.pending_calls.get(index)
        if not ("partialArgs" in call or call.get("willContinue") or (not call and pending is not None)):
            return None
        delta = stream_pb2.PartDelta(choice_index=index)
        if pending is None:
            delta.part_index = self.parts.index(index, len(kinds), "call")
            delta.tool_call.id = call.get("id") or ""
            delta.tool_call.name = call.get("name") or ""
            pending = self.pending_calls[index] = {"part": delta.part_index, "args": {}}
        else:
            delta.part_index = pending["part"]
        for fragment in call.get("partialArgs") or ():
            _apply_partial(pending["args"], fragment, self.warnings)
        if not call:  # the closing empty functionCall: the arguments are complete
            delta.tool_call.arguments_json = orjson.dumps(pending["args"]).decode()
            del self.pending_calls[index]
        if raw.get("thoughtSignature"):
            delta.artifacts.add(kind=THOUGHT_SIGNATURE, data=raw["thoughtSignature"].encode(), issuer=self.issuer)
        return [stream_pb2.StreamEvent(delta=delta)]

    def _part_events(self, index: int, kinds: list[str], signed: set[int], raw: dict[str, Any]):
        if "functionCall" in raw and (streamed := self._streamed_call(index, kinds, raw)) is not None:
            return streamed
        kind = (
            "call"
            if "functionCall" in raw
            else "thought"
            if raw.get("thought")
            else "text"
            if "text" in raw
            else "other"
        )
        text = raw.get("text") or ""
        signature = raw.get("thoughtSignature")
        joinable = kind in ("text", "thought") and kinds and kinds[-1] == kind and (len(kinds) - 1) not in signed
        if joinable and (text or not signature):
            part_index = len(kinds) - 1
        else:
            part_index = self.parts.index(index, len(kinds), kind)
        delta = stream_pb2.PartDelta(choice_index=index, part_index=part_index)
        if kind == "text" or (kind == "other" and signature):
            delta.text = text
            self.parts.add_text(index, text)
        elif kind == "thought":
            delta.reasoning.text = text
        elif kind == "call":
            part = parts.lift_part(raw, self.issuer)
            assert part is not None  # a functionCall always lifts
            delta.tool_call.id = part.tool_call.id
            delta.tool_call.name = part.tool_call.name
            delta.tool_call.arguments_json = part.tool_call.arguments_json
        else:
            part = parts.lift_part(raw, self.issuer)
            if part is None or part.WhichOneof("content") != "blob":
                return []
            delta.blob.CopyFrom(part.blob)
        if signature:
            delta.artifacts.add(kind=THOUGHT_SIGNATURE, data=signature.encode(), issuer=self.issuer)
            signed.add(part_index)
        return [stream_pb2.StreamEvent(delta=delta)]

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        choices = self.parts.choices()
        for index in choices:
            choice = response_pb2.Choice()
            for kind in self.parts.labels(index):
                if kind == "call":
                    choice.message.parts.add(tool_call=content_pb2.ToolCall())
            parts.finish(choice, self.finishes.get(index))
            end.finishes.add(
                choice_index=index, finish_reason=choice.finish_reason, raw_finish_reason=choice.raw_finish_reason
            )
        if self.block_reason and not choices:
            end.finishes.add(
                choice_index=0,
                finish_reason=response_pb2.FINISH_REASON_CONTENT_FILTER,
                raw_finish_reason=f"promptFeedback.blockReason:{self.block_reason}",
            )
        parts.usage(self.usage, end.usage)
        if not end.usage.ListFields():
            end.ClearField("usage")
        for warning in dict.fromkeys(self.warnings):
            end.warnings.add(code="partial_args_unsupported_path", message=warning)
        facts = soft_errors.Facts()
        if interrupted or (choices and not self.finishes) or self.pending_calls:
            # There is no [DONE]: a stream is complete when its candidates have said why they finished.
            facts.cut_short = "the stream ended before a finishReason; the output is partial"
        facts.missing_logprobs = [i for i in choices if i not in self.has_logprobs and self.parts.labels(i)]
        soft_errors.settle_stream(self.request, end, facts, self.parts.texts())
        return [stream_pb2.StreamEvent(end=end)]
