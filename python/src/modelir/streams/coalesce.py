"""Lossless coalescing of stream events: deltas of one part that are waiting together leave as one event.

A server that forwards an upstream stream one IR event per upstream token pays a gRPC message per token, and
gRPC's machinery is most of that cost. `coalesced(events)` reads `events` in a task of its own into a queue; the
consumer takes everything that is waiting when it comes back for more and merges each run of consecutive deltas
of the same choice and part into one (text, reasoning text, a summary's text and tool-call arguments
concatenated; logprob columns appended, their byte offsets rebased). Nothing waits for company, and the first
token is never held back by what follows it: the stream's first event, the first delta of each choice and an event
that the idle consumer waits for after a gap (not one of a burst) are handed over before the reader reads on (a
source that yields a buffered burst without suspending would otherwise be read to its end first, and its first
token would leave with its last); and a long burst is read in shares, letting other streams' tasks run between.
Folding the coalesced events gives exactly the response that folding the original ones gives
(`modelir.streams.fold.StreamAccumulator`), which is what makes the merge lossless:

- a run shares `choice_index`, `part_index` and its content kind; artifacts are appended in order and the last
  `item_id` and `phase` that are set win, as the fold does;
- a delta that carries only logprobs joins the run before it in the same choice (logprobs fold per choice);
- anything else (stream start and end, blobs, a delta with neither content nor logprobs, a reasoning delta that
  carries both text and summary text) is never merged.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable, Sequence

from modelir.logprobs import build as lp
from modelir.streams.fold import closing_stream
from modelir.v1 import stream_pb2

__all__ = ["coalesced", "coalesced_batches", "merge_waiting"]

# How many events may wait before the reader stops pulling from upstream (and the upstream feels backpressure).
DEFAULT_LIMIT = 1024
_LOGPROBS_ONLY = "logprobs"
# Events this far apart (seconds) are not one burst: the later one came after an idle gap and leaves at once.
_IDLE_GAP = 0.001
# How many events the reader takes from a burst before it lets the other tasks (other streams) run.
_FAIR_SHARE = 32


def _run_key(event: stream_pb2.StreamEvent) -> Hashable | None:
    """What a delta must share with the deltas next to it to be merged with them; None: never merged."""
    if event.WhichOneof("event") != "delta":
        return None
    delta = event.delta
    content = delta.WhichOneof("content")
    if content in ("text", "refusal"):  # nearly every delta
        return (delta.choice_index, delta.part_index, content)
    if content is None:
        # Token ids and citations of a content-less delta belong to its own part index: never merged across.
        if delta.HasField("logprobs") and not (delta.artifacts or delta.item_id or delta.token_ids or delta.citations):
            return _LOGPROBS_ONLY
        return None
    kind: Hashable = content
    if content == "reasoning":
        reasoning = delta.reasoning
        has_summary = reasoning.HasField("summary_text")
        if has_summary and reasoning.text:
            return None
        kind = ("summary", reasoning.summary_index) if has_summary else "reasoning"
    elif content in ("blob", "part"):  # complete parts: nothing to join
        return None
    return (delta.choice_index, delta.part_index, kind)


def _merge(run: Sequence[stream_pb2.StreamEvent]) -> stream_pb2.StreamEvent:
    """One event whose fold equals the fold of `run`, in order (a run of two or more deltas)."""
    first = run[0].delta
    merged = stream_pb2.StreamEvent()
    delta = merged.delta
    delta.choice_index = first.choice_index
    delta.part_index = first.part_index
    content = first.WhichOneof("content")
    deltas = [event.delta for event in run]
    if content == "text":
        delta.text = "".join([d.text for d in deltas])
    elif content == "refusal":
        delta.refusal = "".join([d.refusal for d in deltas])
    elif content == "reasoning":
        if first.reasoning.HasField("summary_text"):
            delta.reasoning.summary_index = first.reasoning.summary_index
            delta.reasoning.summary_text = "".join([d.reasoning.summary_text for d in deltas])
        else:
            delta.reasoning.text = "".join([d.reasoning.text for d in deltas])
    elif content == "tool_call":
        call = delta.tool_call
        call.arguments_json = "".join([d.tool_call.arguments_json for d in deltas])
        for d in deltas:  # the fold keeps the last id and name that are set
            if d.tool_call.id:
                call.id = d.tool_call.id
            if d.tool_call.name:
                call.name = d.tool_call.name
    with_logprobs = []
    for d in deltas:  # one pass: artifacts, citations and token ids in order, the last item id set, the logprobs
        if d.artifacts:
            delta.artifacts.extend(d.artifacts)
        if d.citations:
            delta.citations.extend(d.citations)
        if d.token_ids:
            delta.token_ids.extend(d.token_ids)
        if d.item_id:
            delta.item_id = d.item_id
        if d.phase:  # the fold keeps the last phase that is set
            delta.phase = d.phase
        if d.HasField("logprobs"):
            with_logprobs.append(d.logprobs)
    if len(with_logprobs) == 1:
        delta.logprobs.CopyFrom(with_logprobs[0])
    elif with_logprobs:
        delta.logprobs.CopyFrom(lp.concat(with_logprobs))
    return merged


def merge_waiting(events: Sequence[stream_pb2.StreamEvent]) -> list[stream_pb2.StreamEvent]:
    """`events` with each run of mergeable consecutive deltas made one event (see the module's rules)."""
    out: list[stream_pb2.StreamEvent] = []
    run: list[stream_pb2.StreamEvent] = []
    run_key: Hashable | None = None
    run_choice = -1

    def flush() -> None:
        if run:
            out.append(run[0] if len(run) == 1 else _merge(run))
            run.clear()

    for event in events:
        key = _run_key(event)
        if key is None:
            flush()
            run_key = None
            out.append(event)
            continue
        choice = event.delta.choice_index
        joins = run and choice == run_choice and (key == run_key or (key == _LOGPROBS_ONLY and run_key is not None))
        if not joins:
            flush()
            run_key, run_choice = key, choice
        run.append(event)
    flush()
    return out


class _Reader:
    """Pulls `events` (events, or lists of them) in a task of its own into `pending`, waking the consumer; stops at
    `limit` waiting."""

    def __init__(
        self, events: AsyncIterator[stream_pb2.StreamEvent] | AsyncIterator[list[stream_pb2.StreamEvent]], limit: int
    ) -> None:
        self._events = events
        self._limit = limit
        self.pending: list[stream_pb2.StreamEvent] = []
        self._choices_seen: set[int] = set()  # the choices whose first delta was handed over
        self.finished = False
        self.failure: BaseException | None = None
        self._loop = asyncio.get_running_loop()
        self._arrived: asyncio.Future[None] | None = None
        self._room: asyncio.Future[None] | None = None
        self._closing = False
        # The task copies the caller's context: the source's telemetry and capture see what the caller set.
        self._task = self._loop.create_task(self._read())

    async def _read(self) -> None:
        events = self._events
        try:
            async with closing_stream(events):
                unbroken = 0  # events read since the reader last let other tasks run
                previous = -_IDLE_GAP  # when the event before arrived: the stream's first event comes after a gap
                clock = self._loop.time
                async for item in events:
                    batch = item if isinstance(item, list) else [item]
                    self.pending += batch
                    now = clock()
                    after_gap, previous = now - previous >= _IDLE_GAP, now
                    opens_choice = False
                    for event in batch:  # each: it records the choices as seen
                        opens_choice = self._first_of_its_choice(event) or opens_choice
                    if (self._wake() and after_gap) or opens_choice or len(self.pending) >= self._limit:
                        # Wait until the consumer has taken it: the consumer was idle and the event is not part of
                        # a burst (it leaves at once), it opens a choice (it leaves before the rest is read), or too
                        # much is waiting. Events of a burst that follow wait for company, which is the point.
                        unbroken = 0
                        self._room = self._loop.create_future()
                        await self._room
                    else:
                        unbroken += len(batch)
                        if unbroken >= _FAIR_SHARE:
                            # A burst read without suspending would keep every other stream's first token waiting.
                            unbroken = 0
                            await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            if not self._closing:  # the source itself was cancelled, not by `close`: the consumer hears of it
                self.failure = exc
            raise
        except BaseException as exc:  # handed to the consumer, after the events that came before it
            self.failure = exc
        finally:
            self.finished = True
            self._wake()

    def _wake(self) -> bool:
        """Wake the consumer if it waits for an event; True if it did."""
        arrived = self._arrived
        if arrived is not None and not arrived.done():
            arrived.set_result(None)
            return True
        return False

    def _first_of_its_choice(self, event: stream_pb2.StreamEvent) -> bool:
        if event.WhichOneof("event") != "delta":
            return False
        choice = event.delta.choice_index
        if choice in self._choices_seen:
            return False
        self._choices_seen.add(choice)
        return True

    async def take(self) -> list[stream_pb2.StreamEvent]:
        """Everything waiting (at least one event), or [] at the end; raises the source's failure after its events."""
        while not self.pending and not self.finished:
            self._arrived = self._loop.create_future()
            await self._arrived
        self._arrived = None
        taken, self.pending = self.pending, []
        room = self._room
        if room is not None and not room.done():
            room.set_result(None)
        if not taken and self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        return taken

    async def close(self) -> None:
        """Stop reading and wait until the source is closed (its `finally` blocks run in the reader's task)."""
        task = self._task
        if not task.done():
            self._closing = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def coalesced(
    events: AsyncIterator[stream_pb2.StreamEvent], *, limit: int = DEFAULT_LIMIT
) -> AsyncIterator[stream_pb2.StreamEvent]:
    """`events` with the deltas that wait together merged (see the module), numbered again from 0
    (`StreamEvent.sequence_number` increases by one per event that leaves). Closing this closes `events`."""
    return _coalesced(events, limit)


def coalesced_batches(
    batches: AsyncIterator[list[stream_pb2.StreamEvent]], *, limit: int = DEFAULT_LIMIT
) -> AsyncIterator[stream_pb2.StreamEvent]:
    """`coalesced` for a source that yields its events in batches (`Model.astream_batches`): a batch is read,
    and handed over, as a whole."""
    return _coalesced(batches, limit)


async def _coalesced(
    source: AsyncIterator[stream_pb2.StreamEvent] | AsyncIterator[list[stream_pb2.StreamEvent]],
    limit: int,
) -> AsyncIterator[stream_pb2.StreamEvent]:
    reader = _Reader(source, limit)  # its task starts when the stream is first read
    sent = 0
    try:
        while True:
            taken = await reader.take()
            if not taken:
                return
            for event in taken if len(taken) == 1 else merge_waiting(taken):
                event.sequence_number = sent
                sent += 1
                yield event
    finally:
        await reader.close()
