"""The SSE stream lift of the Gemini API (`:streamGenerateContent?alt=sse`).

From the Gemini API reference (https://ai.google.dev/api/generate-content): each event is a whole response chunk
with only the new parts; there is no `[DONE]` (a stream is complete when its candidates say why they finished);
the usage is cumulative on every chunk; Gemini 3 streams a call's arguments as `partialArgs` addressed by JSON path;
code execution parts arrive whole; grounding metadata is filled only on the last chunk, its offsets into all chunks'
text joined.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

import orjson

from modelir.errors import soft as soft_errors
from modelir.transports import _common as common
from modelir.transports.base import RawEvent, StreamLifter
from modelir.transports.google import parts
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import content_pb2, request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.transports.google.genai import GoogleGenAI

THOUGHT_SIGNATURE = parts.THOUGHT_SIGNATURE


# One step of a `partialArgs` JSON path: `.name`, `['name']` or `[index]` (Vertex addresses array items).
_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\['([^']*)'\]|\[(\d+)\]")


def _path_steps(path: str) -> list[str | int] | None:
    """The steps of a JSON path such as `$.items[0].name`, or None when it is not one this lift can follow."""
    if not path.startswith("$"):
        return None
    steps: list[str | int] = []
    at = 1
    while at < len(path):
        match = _PATH_STEP.match(path, at)
        if match is None:
            return None
        name, quoted, index = match.groups()
        steps.append(int(index) if index is not None else name if name is not None else quoted)
        at = match.end()
    return steps or None


def _apply_partial(args: dict[str, Any], fragment: dict[str, Any], warnings: list[str]) -> None:
    """Apply one `partialArgs` fragment at its JSON path (object keys and array indices, nested; string values
    arrive in pieces and are appended)."""
    path = str(fragment.get("jsonPath") or "")
    steps = _path_steps(path)
    if steps is None or isinstance(steps[0], int):
        warnings.append(f"a streamed argument at JSON path {path!r} is not supported and was left out")
        return
    target: Any = args
    for step, following in itertools.pairwise(steps):
        empty: Any = [] if isinstance(following, int) else {}
        target = _slot(target, step, empty)
        if target is None:
            warnings.append(f"a streamed argument at JSON path {path!r} conflicts with an earlier one")
            return
    last = steps[-1]
    if "stringValue" in fragment:
        previous = _get(target, last)
        value: Any = (previous if isinstance(previous, str) else "") + str(fragment["stringValue"])
    elif "numberValue" in fragment:
        value = fragment["numberValue"]
    elif "boolValue" in fragment:
        value = fragment["boolValue"]
    elif "nullValue" in fragment:
        value = None
    else:
        return
    if _slot(target, last, value, replace=True) is None and value is not None:
        warnings.append(f"a streamed argument at JSON path {path!r} conflicts with an earlier one")


def _get(container: Any, step: str | int) -> Any:
    if isinstance(step, int):
        return container[step] if isinstance(container, list) and step < len(container) else None
    return container.get(step) if isinstance(container, dict) else None


def _slot(container: Any, step: str | int, value: Any, *, replace: bool = False) -> Any:
    """The value at `step` of `container`, set to `value` when absent (or always, with `replace`); None when the
    container is of the wrong kind for the step."""
    if isinstance(step, int):
        if not isinstance(container, list):
            return None
        container.extend([None] * (step + 1 - len(container)))
        if replace or container[step] is None:
            container[step] = value
        return container[step]
    if not isinstance(container, dict):
        return None
    if replace or step not in container:
        container[step] = value
    return container[step]


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
        self.prompt_feedback: dict[str, Any] | None = None
        self.pending_calls: dict[int, dict[str, Any]] = {}  # candidate index -> a call whose arguments stream
        self.pairings: dict[int, parts.CallPairing] = {}  # candidate index -> its code execution calls, in order
        self.part_texts: dict[int, dict[int, list[str]]] = {}  # candidate -> text part index -> its fragments
        self.metadata: dict[int, dict[str, Any]] = {}  # candidate -> the last non-empty candidate metadata
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
        for position, candidate in enumerate(common.array(chunk, "candidates")):
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
            for key in parts.CANDIDATE_METADATA:
                if isinstance(candidate.get(key), dict) and candidate[key]:
                    # Every chunk before the last carries `groundingMetadata: {}`; the last fills it, with offsets
                    # into all chunks' text joined.
                    self.metadata.setdefault(index, {})[key] = candidate[key]
            if candidate.get("finishReason"):
                self.finishes[index] = candidate["finishReason"]
                if index in self.pending_calls:
                    # The chunk that finishes the candidate also ends a streamed call whose closing empty
                    # `functionCall` never came.
                    out.append(self._close_call(index))
        if chunk.get("usageMetadata"):
            self.usage = chunk["usageMetadata"]  # cumulative on every chunk: the last one wins
        if isinstance(chunk.get("promptFeedback"), dict) and chunk["promptFeedback"]:
            self.prompt_feedback = chunk["promptFeedback"]
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

    def _close_call(self, index: int) -> stream_pb2.StreamEvent:
        pending = self.pending_calls.pop(index)
        delta = stream_pb2.PartDelta(choice_index=index, part_index=pending["part"])
        delta.tool_call.arguments_json = orjson.dumps(pending["args"]).decode()
        return stream_pb2.StreamEvent(delta=delta)

    def _part_events(
        self, index: int, kinds: list[str], signed: set[int], raw: dict[str, Any]
    ) -> list[stream_pb2.StreamEvent]:
        if "functionCall" in raw and (streamed := self._streamed_call(index, kinds, raw)) is not None:
            return streamed
        whole = None
        if "functionCall" in raw:
            kind = "call"
        elif raw.get("thought") and "text" in raw:
            kind = "thought"
        elif "text" in raw:
            kind = "text"
        else:
            whole = parts.lift_part(raw, self.issuer, self.pairings.setdefault(index, parts.CallPairing()))
            kind = "text" if whole.WhichOneof("content") == "text" else "whole"  # a signature on no content
        text = raw.get("text") or ""
        signature = raw.get("thoughtSignature")
        joinable = kind in ("text", "thought") and kinds and kinds[-1] == kind and (len(kinds) - 1) not in signed
        if joinable and (text or not signature):
            part_index = len(kinds) - 1
        else:
            part_index = self.parts.index(index, len(kinds), kind)
        delta = stream_pb2.PartDelta(choice_index=index, part_index=part_index)
        if kind == "text":
            delta.text = text
            self.parts.add_text(index, text)
            self.part_texts.setdefault(index, {}).setdefault(part_index, []).append(text)
        elif kind == "thought":
            delta.reasoning.text = text
        elif kind == "call":
            part = parts.lift_part(raw, self.issuer)
            delta.tool_call.id = part.tool_call.id
            delta.tool_call.name = part.tool_call.name
            delta.tool_call.arguments_json = part.tool_call.arguments_json
        elif whole is not None and whole.WhichOneof("content") == "blob":
            delta.blob.CopyFrom(whole.blob)
        elif whole is not None:
            # Code execution and provider parts arrive whole; the part carries its own signature.
            delta.part.CopyFrom(whole)
            return [stream_pb2.StreamEvent(delta=delta)]
        if signature:
            delta.artifacts.add(kind=THOUGHT_SIGNATURE, data=signature.encode(), issuer=self.issuer)
            signed.add(part_index)
        return [stream_pb2.StreamEvent(delta=delta)]

    def _metadata_events(self) -> list[stream_pb2.StreamEvent]:
        """Citations on the text parts and the candidate metadata as provider parts after the others, as the
        unary lift places them."""
        out = []
        for index, metadata in sorted(self.metadata.items()):
            labels = self.parts.labels(index)
            fragments = self.part_texts.get(index, {})
            texts = ["".join(fragments.get(i, ())) if label == "text" else None for i, label in enumerate(labels)]
            for part_index, cited in parts.citations(metadata.get("groundingMetadata"), texts).items():
                delta = stream_pb2.PartDelta(choice_index=index, part_index=part_index, citations=cited)
                out.append(stream_pb2.StreamEvent(delta=delta))
            for whole in parts.candidate_metadata(metadata, self.issuer):
                delta = stream_pb2.PartDelta(
                    choice_index=index, part_index=self.parts.index(index, len(labels), "whole")
                )
                delta.part.CopyFrom(whole)
                out.append(stream_pb2.StreamEvent(delta=delta))
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        events = self._metadata_events()
        if self.finishes:
            # A candidate that finished ends any streamed call left open (see `feed`).
            events += [self._close_call(index) for index in sorted(self.pending_calls) if index in self.finishes]
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
        if self.prompt_feedback is not None:
            parts.prompt_feedback(self.prompt_feedback, end.prompt_feedback)
        parts.usage(self.usage, end.usage)
        if not end.usage.ListFields():
            end.ClearField("usage")
        for warning in dict.fromkeys(self.warnings):
            end.warnings.add(code="partial_args_unsupported_path", message=warning)
        facts = soft_errors.Facts()
        if interrupted or (choices and not self.finishes) or self.pending_calls:
            # There is no [DONE]: a stream is complete when its candidates have said why they finished.
            facts.cut_short = "the stream ended before a finishReason; the output is partial"
        elif not choices and not self.finishes and self.prompt_feedback is None:
            # Nor is a stream with no candidate at all and no promptFeedback saying why: an empty success otherwise.
            facts.cut_short = "the stream ended with no candidate and no promptFeedback saying why"
        facts.missing_logprobs = [i for i in choices if i not in self.has_logprobs and self.parts.labels(i)]
        soft_errors.settle_stream(self.request, end, facts, self.parts.texts())
        return [*events, stream_pb2.StreamEvent(end=end)]
