"""The streamed call of a `Model`: the request pipeline, the limiter and one deadline as for `arun`, then the
transport's events, lifted as they arrive. `Model.astream` and `Model.astream_batches` delegate here.

Events travel in batches: the executor hands over the raw events that one read of the answer completed
(`Executor.stream_batches`), the lifter lifts them together (`StreamLifter.feed_batch`) and every step after it
passes the batch on, so a generator step is paid per read, not per token. With `merge` (the server's coalescing
stream) the lifter may lift a run of plain text chunks as one delta, which is what the coalescing would make of
their deltas; without it (`Model.astream`) every chunk keeps its own events."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING

from modelir import errors
from modelir.calls import engine_facts
from modelir.calls import token_prompt as token_calls
from modelir.calls.timing import stamp_timing
from modelir.errors.soft import damaged_events, received
from modelir.http.retry import timeout_for
from modelir.limiter.budget import estimate_tokens, settle_tokens
from modelir.pipeline import prepare as pipeline
from modelir.records import raw_exchange
from modelir.streams.fold import events_from_response
from modelir.transports.base import SHAPE_ERRORS, HttpTransport, LocalTransport, shape_error
from modelir.v1 import request_pb2, response_pb2, stream_pb2

if TYPE_CHECKING:
    from modelir.model import Model

Batch = list[stream_pb2.StreamEvent]


async def stream_batches(
    model: Model, request: request_pb2.Request, deadline: float | None, *, merge: bool = False
) -> AsyncGenerator[Batch, None]:
    """The events of one streamed request through `model`, in batches (never empty)."""
    prepared = model._prepare(request, streaming=True)
    if pipeline.split_continuations(prepared.request, model.transport) is not None:
        # Scores arrive whole at the end anyway: run the split calls unary and unfold their merged answer.
        yield list(events_from_response(await model._arun(request, deadline)))
        return
    request = prepared.request
    started = time.time()
    start_mono = time.monotonic()
    deadline = model._deadline(request, deadline)
    await engine_facts.check(model, prepared, deadline)  # what the engine must say first (once per model)
    first_output: float | None = None
    try:
        async with timeout_for(deadline, model._loop()):
            async with model.limiter.acquire(estimate := estimate_tokens(request), deadline=deadline):
                queued = time.monotonic() - start_mono
                attempts = [1]
                token_in = token_calls.needs_resolving(model, prepared)
                if token_in:
                    prepared = await token_calls.resolve(model, prepared, deadline, stream=True)
                batches = _transport_batches(model, prepared, deadline, attempts, merge)
                async with contextlib.aclosing(batches):  # closed now, not by asyncio at shutdown
                    pending_warnings = list(prepared.warnings)  # known now: on the start, else the end
                    async for batch in batches:
                        for event in batch:
                            kind = event.WhichOneof("event")
                            if kind == "delta":
                                if first_output is None:
                                    first_output = time.monotonic() - start_mono
                            elif kind == "start":
                                event.start.warnings.extend(pending_warnings)
                                pending_warnings = []
                            elif kind == "end":
                                if token_in and not event.end.prompt_token_ids:  # as unary: the ids it was sent as
                                    event.end.prompt_token_ids.extend(prepared.request.token_ids.ids)
                                settle_tokens(model.limiter, estimate, event.end.usage)
                                event.end.warnings.extend(pending_warnings)
                                stamp_timing(event.end.timing, started, queued, attempts[0], first_output)
                        yield batch
    except TimeoutError:
        raise errors.DeadlineExceededError("the request's deadline expired") from None


async def _transport_batches(
    model: Model, prepared: pipeline.Prepared, deadline: float | None, attempts: list[int], merge: bool
) -> AsyncGenerator[Batch, None]:
    transport, request = model.transport, prepared.request
    if isinstance(transport, LocalTransport):
        async for event in transport.stream(request):
            yield [event]
        return
    assert isinstance(transport, HttpTransport) and model.executor is not None and prepared.native is not None
    assert model._error_from is not None
    executor = model.executor
    lifter = transport.stream_lifter_accounted(request)
    interrupted = False
    raw_events: list[response_pb2.RawStreamEvent] | None = [] if request.include_raw else None
    damaged = 0  # events that arrived with bytes that are not UTF-8 (replaced)
    answered: list[Mapping[str, str]] = []  # the stream's answer headers, for the kept raw exchange
    limiter_observe = model.limiter.observe

    def observe(status: int, headers: Mapping[str, str]) -> None:
        answered[:] = [headers]
        limiter_observe(status, headers)

    def settled(events: Batch) -> Batch:
        for event in events:
            if event.WhichOneof("event") == "end":  # a mid-stream error event can quote the key
                received(event.end, damaged_events(damaged), executor.secrets)
        return events

    raws = executor.stream_batches(
        prepared.native,
        error_from=model._error_from,
        deadline=deadline,
        observe=observe if raw_events is not None else limiter_observe,
        attempts=attempts,
        deadline_enforced=True,  # this module's `stream_batches` runs the whole stream under one timeout
    )
    feed_batch = lifter.feed_batch
    # Until a delta has left, each raw event is lifted and handed over alone: the first token never waits for the
    # lift of what arrived with it (a fast upstream's first read can hold the whole answer). Then a read at once.
    delivered = False
    try:
        async with contextlib.aclosing(raws):  # a lift failure closes the upstream connection at once
            async for raw_batch in raws:
                for raw in raw_batch:
                    damaged += raw.damaged
                    if raw_events is not None:
                        raw_events.append(response_pb2.RawStreamEvent(event=raw.event, data=raw.data))
                at = 0
                while at < len(raw_batch):
                    piece = raw_batch[at:] if delivered else raw_batch[at : at + 1]
                    at += len(piece)
                    lifted: Batch = []
                    caught: Exception | None = None
                    try:
                        feed_batch(piece, lifted, merge=merge)
                    except (errors.ModelError, *SHAPE_ERRORS) as exc:
                        caught = exc
                    if lifted:  # the events before a failing one are delivered first: the caller keeps them
                        delivered = delivered or any(e.WhichOneof("event") == "delta" for e in lifted)
                        yield settled(lifted)
                    if isinstance(caught, errors.ModelError):
                        raise caught
                    if caught is not None:
                        raise model._redacted(shape_error(transport, caught)) from caught
    except errors.TruncatedStreamError:
        interrupted = True
    try:
        closing = settled(lifter.close(interrupted=interrupted))
    except SHAPE_ERRORS as exc:
        raise model._redacted(shape_error(transport, exc)) from exc
    if raw_events is not None:
        for event in closing:
            if event.WhichOneof("event") == "end":
                event.end.raw.CopyFrom(
                    raw_exchange.exchange(
                        request,
                        prepared.native,
                        secrets=executor.secrets,
                        transport=transport.name,
                        status=200,
                        answer_headers=answered[0] if answered else None,
                        events=raw_events,
                    )
                )
    if closing:
        yield closing
