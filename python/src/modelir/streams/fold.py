"""Streams and responses, both ways: the one accumulator that folds `StreamEvent`s into a `Response`, and its inverse.

`StreamAccumulator` folds the events of every transport's stream, of the server's `StreamGenerate` and of the
tests, so "streamed equals unary" is one property checked in one place; `events_from_response` unfolds a complete
`Response` into events (for in-process transports) so that folding them gives the response back exactly. The
per-kind halves of both live in `content_kinds`, next to each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from modelir import errors
from modelir.logprobs import build as lp
from modelir.pipeline.content_kinds import KINDS, PartBuffer, fold_whole_part
from modelir.reading import stops
from modelir.v1 import content_pb2, logprobs_pb2, response_pb2, stream_pb2


@dataclass(slots=True)
class _ChoiceBuffer:
    parts: list[PartBuffer] = field(default_factory=list)
    logprobs: list[logprobs_pb2.TokenLogprobs] = field(default_factory=list)
    finish: stream_pb2.ChoiceFinish | None = None
    token_ids: list[int] = field(default_factory=list)
    part_indexes: list[int] = field(default_factory=list)
    phase: content_pb2.MessagePhase.ValueType = content_pb2.MESSAGE_PHASE_UNSPECIFIED  # the last one set wins

    def add_tokens(self, ids: Iterable[int], part_index: int) -> None:
        before = len(self.token_ids)
        self.token_ids.extend(ids)
        self.part_indexes.extend([part_index] * (len(self.token_ids) - before))


class StreamAccumulator:
    """Folds stream events into the `Response` the same exchange gives unstreamed. Fragments are buffered as lists
    and joined once at the end, so long streams stay linear."""

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
            self._response.warnings.extend(event.start.warnings)
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
        if delta.phase:
            choice.phase = delta.phase
        if delta.HasField("logprobs"):
            choice.logprobs.append(delta.logprobs)
        content = delta.WhichOneof("content")
        if content is None and not delta.artifacts and not delta.item_id and not delta.citations:
            choice.add_tokens(delta.token_ids, max(delta.part_index, -1))  # starts no part; -1: tokens of none
            return
        if delta.part_index == len(choice.parts):
            choice.parts.append(PartBuffer(content_pb2.Part()))
        elif delta.part_index > len(choice.parts):
            raise errors.MalformedResponseError(
                f"stream delta skips to part {delta.part_index} of {len(choice.parts)} (choice {delta.choice_index})"
            )
        buffer = choice.parts[delta.part_index]
        if content == "part":
            fold_whole_part(buffer, delta.part)
        elif content is not None:
            fold = KINDS[content].fold
            if fold is None:
                raise errors.MalformedResponseError(f"a stream delta carries a {content} part, which never streams")
            fold(buffer, delta)
        buffer.part.artifacts.extend(delta.artifacts)
        buffer.part.citations.extend(delta.citations)
        if delta.item_id:
            buffer.part.item_id = delta.item_id
        choice.add_tokens(delta.token_ids, delta.part_index)

    def _add_end(self, end: stream_pb2.StreamEnd) -> None:
        self.ended = True
        r = self._response
        if end.id:
            r.id = end.id
        if end.model:
            r.model = end.model
        for finish in end.finishes:
            buffer = self._choice(finish.choice_index)
            buffer.finish = finish
            buffer.add_tokens(finish.unattributed_token_ids, -1)
        if end.HasField("usage"):
            r.usage.CopyFrom(end.usage)
        r.input_scores.extend(end.input_scores)
        r.prompt_token_ids.extend(end.prompt_token_ids)
        if end.HasField("timing"):
            r.timing.CopyFrom(end.timing)
        r.errors.extend(end.errors)
        r.warnings.extend(end.warnings)
        if end.HasField("raw"):
            r.raw.CopyFrom(end.raw)
        if end.HasField("prompt_feedback"):
            r.prompt_feedback.CopyFrom(end.prompt_feedback)
        if end.service_tier:
            r.service_tier = end.service_tier

    def response(self) -> response_pb2.Response:
        """The accumulated response. Callable at any time: before the end it holds the partial output."""
        out = response_pb2.Response()
        out.CopyFrom(self._response)
        for index in sorted(self._choices):
            buffer = self._choices[index]
            choice = out.choices.add(index=index)
            choice.message.role = content_pb2.ROLE_ASSISTANT
            if buffer.phase:
                choice.message.phase = buffer.phase
            for pb in buffer.parts:
                part = choice.message.parts.add()
                part.CopyFrom(pb.part)
                kind = part.WhichOneof("content")
                finish = KINDS[kind].finish if kind is not None else None
                if finish is not None:
                    finish(PartBuffer(part, pb.pieces, pb.summaries))
            if buffer.logprobs:
                choice.logprobs.CopyFrom(lp.concat(buffer.logprobs))
            if buffer.token_ids:
                choice.sampled_tokens.token_ids.extend(buffer.token_ids)
                if any(i >= 0 for i in buffer.part_indexes):  # attributed: otherwise the provider could not say
                    choice.sampled_tokens.part_indexes.extend(buffer.part_indexes)
            if buffer.finish is not None:
                ended = buffer.finish
                choice.finish_reason = ended.finish_reason
                choice.raw_finish_reason = ended.raw_finish_reason
                stops.copy_stop(ended, choice)
                if ended.HasField("output_token_count"):
                    choice.output_token_count = ended.output_token_count
                choice.constrained_label = ended.constrained_label
                choice.native_json = ended.native_json
        return out


def accumulate(events: Iterable[stream_pb2.StreamEvent]) -> response_pb2.Response:
    return StreamAccumulator().add_all(events).response()


# ---- unfold: a complete response -> events ---------------------------------------------------------------------


def _part_deltas(choice_index: int, part_index: int, part: content_pb2.Part, size: int) -> list[stream_pb2.PartDelta]:
    kind = part.WhichOneof("content")
    entry = KINDS.get(kind) if kind is not None else None
    unfold = entry.unfold if entry is not None else None
    if unfold is None:
        raise errors.InternalError(f"a {kind or 'empty'} part cannot be sent as stream deltas")
    deltas = unfold(part, size)
    for delta in deltas:
        delta.choice_index = choice_index
        delta.part_index = part_index
    if deltas[-1].WhichOneof("content") != "part":  # a whole part carries its own artifacts and citations
        deltas[-1].artifacts.extend(part.artifacts)
        deltas[-1].citations.extend(part.citations)
        if part.item_id:
            deltas[0].item_id = part.item_id
    return deltas


def _token_runs(choice: response_pb2.Choice) -> list[tuple[int, list[int]]]:
    """The sampled tokens as runs of (part index, ids), in order; all -1 when the provider did not attribute them."""
    tokens = choice.sampled_tokens
    indexes = list(tokens.part_indexes) or [-1] * len(tokens.token_ids)
    runs: list[tuple[int, list[int]]] = []
    for token, index in zip(tokens.token_ids, indexes, strict=True):
        if runs and runs[-1][0] == index:
            runs[-1][1].append(token)
        else:
            runs.append((index, [token]))
    return runs


def events_from_response(response: response_pb2.Response, *, chunk_size: int = 16) -> Iterator[stream_pb2.StreamEvent]:
    """Text is cut into chunks of characters (never bytes, so no character is split) and logprobs into chunks of
    tokens; the i-th chunks travel in the same delta. Folding the events gives back the response exactly."""
    yield stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id=response.id, model=response.model))
    for choice in response.choices:
        deltas = [
            d for j, part in enumerate(choice.message.parts) for d in _part_deltas(choice.index, j, part, chunk_size)
        ]
        chunks = lp.chunks(choice.logprobs, chunk_size) if choice.HasField("logprobs") else []
        # Logprobs ride on the text deltas they belong with, in order; leftovers follow on their own.
        text_deltas = [d for d in deltas if d.WhichOneof("content") == "text"]
        for delta, chunk in zip(text_deltas, chunks, strict=False):
            delta.logprobs.CopyFrom(chunk)
        # Each run of sampled tokens rides on the last delta of its part, or on a delta of its own (no part).
        last_of_part = {d.part_index: d for d in deltas}
        loose: list[stream_pb2.PartDelta] = []
        for index, ids in _token_runs(choice):
            if index >= 0 and index in last_of_part and not loose:
                last_of_part[index].token_ids.extend(ids)
            else:
                loose.append(stream_pb2.PartDelta(choice_index=choice.index, part_index=index, token_ids=ids))
        if choice.message.phase:  # on the choice's first delta, or on a delta of its own when it has none
            if deltas:
                deltas[0].phase = choice.message.phase
            else:
                loose.insert(0, stream_pb2.PartDelta(choice_index=choice.index, phase=choice.message.phase))
        last_delta = {d.part_index: d for d in deltas}
        for delta in deltas:
            yield stream_pb2.StreamEvent(delta=delta)
            if last_delta[delta.part_index] is delta:  # the part is complete: a caller may act on it now
                done = stream_pb2.PartDone(choice_index=choice.index, part_index=delta.part_index)
                yield stream_pb2.StreamEvent(part_done=done)
        for chunk in chunks[len(text_deltas) :]:
            yield stream_pb2.StreamEvent(
                delta=stream_pb2.PartDelta(choice_index=choice.index, part_index=0, logprobs=chunk)
            )
        for delta in loose:
            yield stream_pb2.StreamEvent(delta=delta)
    end = stream_pb2.StreamEnd(
        usage=response.usage if response.HasField("usage") else None,
        input_scores=response.input_scores,
        timing=response.timing if response.HasField("timing") else None,
        errors=response.errors,
        raw=response.raw if response.HasField("raw") else None,
    )
    end.prompt_token_ids.extend(response.prompt_token_ids)
    end.warnings.extend(response.warnings)
    if response.HasField("prompt_feedback"):
        end.prompt_feedback.CopyFrom(response.prompt_feedback)
    end.service_tier = response.service_tier
    for choice in response.choices:
        finish = end.finishes.add(
            choice_index=choice.index,
            finish_reason=choice.finish_reason,
            raw_finish_reason=choice.raw_finish_reason,
            constrained_label=choice.constrained_label,
            native_json=choice.native_json,
        )
        stops.copy_stop(choice, finish)
        if choice.HasField("output_token_count"):
            finish.output_token_count = choice.output_token_count
    yield stream_pb2.StreamEvent(end=end)


async def keeping_partial(events: AsyncIterator[stream_pb2.StreamEvent]) -> AsyncIterator[stream_pb2.StreamEvent]:
    """`events`, each with its `sequence_number` (from 0), and when they end in a `ModelError` after output was
    delivered, that error with its `partial` set
    to the fold of what was delivered (unless it already carries one): a hard failure mid-stream (a deadline on an
    endless stream, a malformed event) never loses the output the caller has seen. Only references are kept; the
    fold happens on failure."""
    seen: list[stream_pb2.StreamEvent] = []
    try:
        async with closing_stream(events):
            async for event in events:
                event.sequence_number = len(seen)  # numbered here, once, for every stream the SDK yields
                seen.append(event)
                yield event
    except errors.ModelError as exc:
        _keep_partial(exc, seen)
        raise


async def keeping_partial_batches(
    batches: AsyncIterator[list[stream_pb2.StreamEvent]],
) -> AsyncIterator[list[stream_pb2.StreamEvent]]:
    """`keeping_partial` for a stream that arrives in batches of events: numbered the same, the same partial."""
    seen: list[stream_pb2.StreamEvent] = []
    try:
        async with closing_stream(batches):
            async for batch in batches:
                for event in batch:
                    event.sequence_number = len(seen)
                    seen.append(event)
                yield batch
    except errors.ModelError as exc:
        _keep_partial(exc, seen)
        raise


def _keep_partial(exc: errors.ModelError, seen: list[stream_pb2.StreamEvent]) -> None:
    """Set `exc.partial` to the fold of the events delivered before it (unless it has one, or none was a delta)."""
    if exc.partial is None and any(e.WhichOneof("event") == "delta" for e in seen):
        try:
            exc.partial = StreamAccumulator().add_all(seen).response()
        except errors.ModelError:
            pass  # the delivered events do not fold (the failure may be why): the error stands alone


async def fold_stream(events: AsyncIterator[stream_pb2.StreamEvent]) -> response_pb2.Response:
    """Fold a whole stream into its response, closing the stream whatever happens (an error, a fold that raises):
    a generator left open is finalised by asyncio at shutdown, where its `finally` blocks raise out of context."""
    accumulator = StreamAccumulator()
    async with closing_stream(events):
        async for event in events:
            accumulator.add(event)
    return accumulator.response()


class _Closable(Protocol):
    async def aclose(self) -> object: ...


def closing_stream(events: AsyncIterator[Any]) -> contextlib.AbstractAsyncContextManager[object]:
    """`async with closing_stream(events)`: closes `events` on leaving, when it can be closed."""
    return contextlib.aclosing(cast(_Closable, events)) if hasattr(events, "aclose") else contextlib.nullcontext()
