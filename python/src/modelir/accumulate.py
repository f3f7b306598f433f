"""The one stream accumulator: folds `StreamEvent`s into the `Response` the same exchange gives unstreamed.

Every transport's stream, the server's `StreamGenerate` and the tests go through this class, so "streamed equals
unary" is one property checked in one place. Text fragments are buffered as lists and joined once at the end,
so long streams stay linear.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from modelir import logprobs as lp
from modelir.v1 import content_pb2, logprobs_pb2, response_pb2, stream_pb2


@dataclass(slots=True)
class _PartBuffer:
    part: content_pb2.Part
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    summaries: list[list[str]] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _ChoiceBuffer:
    parts: list[_PartBuffer] = field(default_factory=list)
    logprobs: list[logprobs_pb2.TokenLogprobs] = field(default_factory=list)
    finish: stream_pb2.ChoiceFinish | None = None


class StreamAccumulator:
    def __init__(self) -> None:
        self._response = response_pb2.Response()
        self._choices: dict[int, _ChoiceBuffer] = {}
        self.ended = False

    def add(self, event: stream_pb2.StreamEvent) -> None:
        kind = event.WhichOneof("event")
        if kind == "delta":
            self._add_delta(event.delta)
        elif kind == "start":
            self._response.id = event.start.id
            self._response.model = event.start.model
        elif kind == "end":
            self._add_end(event.end)

    def add_all(self, events: Iterable[stream_pb2.StreamEvent]) -> StreamAccumulator:
        for event in events:
            self.add(event)
        return self

    def _choice(self, index: int) -> _ChoiceBuffer:
        buffer = self._choices.get(index)
        if buffer is None:
            buffer = self._choices[index] = _ChoiceBuffer()
        return buffer

    def _add_delta(self, delta: stream_pb2.PartDelta) -> None:
        choice = self._choice(delta.choice_index)
        if delta.HasField("logprobs"):
            choice.logprobs.append(delta.logprobs)
        content = delta.WhichOneof("content")
        if content is None and not delta.artifacts and not delta.item_id:
            return
        if delta.part_index == len(choice.parts):
            choice.parts.append(_PartBuffer(content_pb2.Part()))
        elif delta.part_index > len(choice.parts):
            raise ValueError(f"stream delta skips to part {delta.part_index} of {len(choice.parts)}")
        buffer = choice.parts[delta.part_index]
        part = buffer.part
        if content == "text":
            buffer.text.append(delta.text)
            if not part.HasField("text"):
                part.text = ""
        elif content == "reasoning":
            r = delta.reasoning
            if not part.HasField("reasoning"):
                part.reasoning.SetInParent()
            if r.text:
                buffer.reasoning.append(r.text)
            if r.HasField("summary_text"):
                while len(buffer.summaries) <= r.summary_index:
                    buffer.summaries.append([])
                buffer.summaries[r.summary_index].append(r.summary_text)
        elif content == "tool_call":
            call = delta.tool_call
            if call.id:
                part.tool_call.id = call.id
            if call.name:
                part.tool_call.name = call.name
            if not part.HasField("tool_call"):
                part.tool_call.SetInParent()
            buffer.arguments.append(call.arguments_json)
        elif content == "blob":
            part.blob.CopyFrom(delta.blob)
        part.artifacts.extend(delta.artifacts)
        if delta.item_id:
            part.item_id = delta.item_id

    def _add_end(self, end: stream_pb2.StreamEnd) -> None:
        self.ended = True
        r = self._response
        if end.id:
            r.id = end.id
        if end.model:
            r.model = end.model
        for finish in end.finishes:
            self._choice(finish.choice_index).finish = finish
        if end.HasField("usage"):
            r.usage.CopyFrom(end.usage)
        if end.HasField("input_scores"):
            r.input_scores.CopyFrom(end.input_scores)
        r.prompt_token_ids.extend(end.prompt_token_ids)
        if end.HasField("timing"):
            r.timing.CopyFrom(end.timing)
        if end.HasField("error"):
            r.error.CopyFrom(end.error)
        r.warnings.extend(end.warnings)
        if end.HasField("raw"):
            r.raw.CopyFrom(end.raw)

    def response(self) -> response_pb2.Response:
        """The accumulated response. Callable at any time: before the end it holds the partial output."""
        out = response_pb2.Response()
        out.CopyFrom(self._response)
        for index in sorted(self._choices):
            buffer = self._choices[index]
            choice = out.choices.add(index=index)
            choice.message.role = content_pb2.ROLE_ASSISTANT
            for pb in buffer.parts:
                part = choice.message.parts.add()
                part.CopyFrom(pb.part)
                kind = part.WhichOneof("content")
                if kind == "text":
                    part.text = "".join(pb.text)
                elif kind == "reasoning":
                    part.reasoning.text = "".join(pb.reasoning)
                    part.reasoning.summary.extend("".join(s) for s in pb.summaries)
                elif kind == "tool_call":
                    part.tool_call.arguments_json = "".join(pb.arguments)
            if buffer.logprobs:
                choice.logprobs.CopyFrom(lp.concat(buffer.logprobs))
            if buffer.finish is not None:
                choice.finish_reason = buffer.finish.finish_reason
                choice.raw_finish_reason = buffer.finish.raw_finish_reason
                choice.stop_sequence = buffer.finish.stop_sequence
        return out


def accumulate(events: Iterable[stream_pb2.StreamEvent]) -> response_pb2.Response:
    return StreamAccumulator().add_all(events).response()
