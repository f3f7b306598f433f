"""The chat stream lift's plain lane (`ChatStreamLifter.plain_lane`, taken by `AccountedStream.feed`): a chunk that
holds one choice's text and nothing else is lifted without the accounting and the general `feed`. Held here: over
every chat-shaped stream of every fixture and shared recording, and over variations of their chunks made to hit
each way out of the lane, a stream lifted with the lane gives the same events, the same end and the same errors as
without it, and every chunk the lane takes is one that `accounting.findings` (the reference) finds nothing in."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from modelir import build_request
from modelir.errors import ModelError
from modelir.streams.fold import StreamAccumulator
from modelir.transports import VLLM, LlamaCpp, accounting
from modelir.transports.accounted_stream import AccountedStream
from modelir.transports.base import SHAPE_ERRORS, RawEvent
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.openai.chat_stream import PLAIN_PATHS
from modelir.v1 import request_pb2, stream_pb2

from tests.native_answers import fixture_answers, recorded_answers
from tests.recordings import WIRE
from tests.test_accounting_stream_once import _mutations

SECTION = "openai_chat.stream"
_REQUEST = build_request("m", messages=[("user", "Hi")])
# Each chat stream section's transport: the lane is its `ChatStreamLifter`'s, under the wrappers the engines add.
_TRANSPORTS = {
    SECTION: OpenAIChat(provider_model="m"),
    "vllm.chat_stream": VLLM(provider_model="m"),
    "llamacpp.chat_stream": LlamaCpp(),
}


def _accounted(section: str = SECTION, request: request_pb2.Request = _REQUEST) -> AccountedStream:
    transport = _TRANSPORTS[section]
    assert transport.native_fields(request, "stream") == section
    stream = transport.stream_lifter_accounted(request)
    assert isinstance(stream, AccountedStream)
    return stream


def _lift(payloads: list[bytes], *, lane: bool, section: str = SECTION) -> tuple[list[bytes], str, int]:
    """(the serialised events, the error that stopped the lift or "", how many chunks the lane took)."""
    stream = _accounted(section)
    schema = stream.section
    plain = stream.plain
    assert plain is not None
    taken = 0
    if lane:

        def counted(event: RawEvent) -> Any:
            nonlocal taken
            out = plain(event)
            if out is not None:
                taken += 1
                assert accounting.findings(schema, event.data) == [], event.data[:300]
            return out

        stream.plain = counted
    else:
        stream.plain = None
    events = []
    try:
        for data in payloads:
            events += stream.feed(RawEvent("", data))
        events += stream.close()
    except (ModelError, *SHAPE_ERRORS) as exc:
        return [e.SerializeToString(deterministic=True) for e in events], type(exc).__name__, taken
    return [e.SerializeToString(deterministic=True) for e in events], "", taken


def _streams() -> list[tuple[str, str, list[bytes]]]:
    """(where it came from, its section, its events) of every chat stream, lifted by its own transport."""
    return [
        (answer.source, answer.section, list(answer.payloads))
        for answer in [*fixture_answers(), *recorded_answers()]
        if answer.stream and answer.section in _TRANSPORTS
    ]


def _same(source: str, section: str, payloads: list[bytes]) -> int:
    with_lane = _lift(payloads, lane=True, section=section)
    without = _lift(payloads, lane=False, section=section)
    assert with_lane[:2] == without[:2], source
    return with_lane[2]


def test_the_lane_lifts_every_chat_stream_as_feed_does():
    streams = _streams()
    taken = sum(_same(*stream) for stream in streams)
    chunks = sum(len(p) for _, _, p in streams)
    assert {section for _, section, _ in streams} == set(_TRANSPORTS)
    floor = 15 if WIRE.is_dir() else 8  # with the shared recordings (absent on some machines), and our fixtures alone
    assert len(streams) > floor and taken > (chunks // 2 if WIRE.is_dir() else 3), (len(streams), taken, chunks)


def test_variations_of_each_chunk_lift_as_feed_does():
    varied = varied_taken = 0
    for source, section, payloads in _streams():
        for at in sorted({1, len(payloads) // 2, len(payloads) - 3} & set(range(1, len(payloads)))):
            head, tail = payloads[max(0, at - 3) : at], payloads[at + 1 :][-3:]
            try:
                value = orjson.loads(payloads[at])
            except orjson.JSONDecodeError:
                continue
            changed = [orjson.dumps(m) for m in _mutations(value)[:40]]
            for data in [*changed, payloads[at][:-1], b"[" + payloads[at] + b"]", b'{"choices": 5}']:
                varied += 1
                varied_taken += bool(
                    _same(source, section, [*payloads[:1], *head, data, *tail])
                    > _lift([*payloads[:1], *head, *tail], lane=True, section=section)[2]
                )
    assert varied > (1500 if WIRE.is_dir() else 500) and 0 < varied_taken < varied, (varied_taken, varied)


def test_the_lane_is_off_where_the_section_does_not_declare_its_members_plainly():
    schema = accounting.schema(SECTION)
    assert schema is not None and accounting.declares_plainly(schema, PLAIN_PATHS)
    assert not accounting.declares_plainly(schema, [*PLAIN_PATHS, "x_new"])  # undeclared
    assert not accounting.declares_plainly(schema, ["provider"])  # a fact
    assert not accounting.declares_plainly(schema, ["choices[].native_finish_reason"])


def test_the_bench_chunk_takes_the_lane():
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "usage": None}
    first = orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    text = orjson.dumps(
        {**chunk, "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": None, "finish_reason": None}]}
    )
    assert _lift([first, text, text], lane=True)[2] == 2  # not the first: it opens the stream


def _batched(
    payloads: list[bytes], sizes: list[int], *, merge: bool, section: str = SECTION
) -> tuple[list[stream_pb2.StreamEvent], str]:
    """A stream fed in batches of `sizes` (cycled), as reads bring them: (the events, the error that stopped it)."""
    stream = _accounted(section)
    events: list[stream_pb2.StreamEvent] = []
    at, turn = 0, 0
    try:
        while at < len(payloads):
            size = sizes[turn % len(sizes)]
            stream.feed_batch([RawEvent("", d) for d in payloads[at : at + size]], events, merge=merge)
            at, turn = at + size, turn + 1
        events += stream.close()
    except (ModelError, *SHAPE_ERRORS) as exc:
        return events, type(exc).__name__
    return events, ""


def _fold(events: list[stream_pb2.StreamEvent]) -> bytes:
    if not any(e.WhichOneof("event") == "delta" for e in events):
        return b""
    try:
        return StreamAccumulator().add_all(events).response().SerializeToString(deterministic=True)
    except ModelError as exc:
        return repr(exc).encode()


@pytest.mark.parametrize("sizes", [[1], [2, 5], [7, 1, 64], [10_000]])
def test_a_merged_batch_folds_as_its_events_do(sizes):
    """`feed_batch(merge=True)`: fewer events where plain chunks run together, the same fold (what coalescing
    promises), the same error after the same delivered output; without `merge`, exactly `feed`'s events."""
    merged_runs = 0
    for source, section, payloads in _streams():
        one_by_one = _lift(payloads, lane=True, section=section)
        unmerged, error = _batched(payloads, sizes, merge=False, section=section)
        assert ([e.SerializeToString(deterministic=True) for e in unmerged], error) == one_by_one[:2], source
        merged, merged_error = _batched(payloads, sizes, merge=True, section=section)
        assert merged_error == error and _fold(merged) == _fold(unmerged), source
        assert len(merged) <= len(unmerged)
        merged_runs += len(merged) < len(unmerged)
    if sizes == [1]:
        assert merged_runs == 0  # one chunk a read: nothing to merge
    elif WIRE.is_dir():  # the shared recordings' long streams (our fixtures' are too short to hold a run)
        assert merged_runs > 3


def test_a_run_of_plain_chunks_is_one_delta_and_other_chunks_break_it():
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    first = orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})

    def text(value: str, **extra: Any) -> bytes:
        return orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": value}, **extra}]})

    reasoning = orjson.dumps({**chunk, "choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]})
    events, error = _batched([first, text("a"), text("b"), reasoning, text("c"), text("d")], [6], merge=True)
    deltas = [e.delta for e in events if e.WhichOneof("event") == "delta"]
    assert error == "" and [(d.WhichOneof("content"), d.text or d.reasoning.text) for d in deltas] == [
        ("text", "ab"),
        ("reasoning", "hm"),
        ("text", "cd"),
    ]
    events, error = _batched([first, text("a"), text("b"), b"{not json"], [4], merge=True)
    assert error == "MalformedResponseError" and [e.delta.text for e in events if e.HasField("delta")] == ["ab"]


@pytest.mark.parametrize(
    "chunk",
    [
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}],"choices":[{"index":0,"delta":{"content":"b"}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}',
        b'{"id":"c","created":[[[[1]]]],"choices":[{"index":0,"delta":{"content":"a"}}]}',
        b'{"id":"c","created":' + b"[" * 2000 + b"]" * 2000 + b',"choices":[{"index":0,"delta":{"content":"a"}}]}',
        b'{"id":"c","created":123456789012345678901234567890,"choices":[{"index":0,"delta":{"content":"a"}}]}',
        b'{"id":"c","choices":[{"index":0.0,"delta":{"content":"a"}}]}',
        b'{"id":"c","choices":[{"index":true,"delta":{"content":"a"}}]}',
        b'{"id":"c","choices":[{"index":-0,"delta":{"content":"a"}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"\\ud800"}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"a\\u0000b"}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]} x',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}},{"index":0,"delta":{"content":"b"}}]}',
        b'{"id":"c","choices":[{"index":1,"delta":{"content":"a"}}]}',
        b'{"id":"c","service_tier":"flex","choices":[{"index":0,"delta":{"content":"a","role":null}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":{"content":1e999}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":{}}]}',
        b'{"id":"c","choices":[{"index":0,"delta":null}]}',
    ],
)
def test_odd_chunks_lift_as_feed_lifts_them(chunk):
    """JSON whose reading could differ between the lane's closed decode and `feed`'s: repeated keys, nesting past
    the parsers' limits, numbers and strings at their edges. Each lifts the same both ways."""
    first = b'{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    then = b'{"id":"c","choices":[{"index":0,"delta":{"content":"z"}}]}'
    for section in _TRANSPORTS:
        stream = [first, then, chunk, then]
        assert _lift(stream, lane=True, section=section)[:2] == _lift(stream, lane=False, section=section)[:2]
        for sizes in ([4], [2, 1, 1]):
            merged, error = _batched(stream, sizes, merge=True, section=section)
            unmerged, unmerged_error = _batched(stream, sizes, merge=False, section=section)
            assert error == unmerged_error and _fold(merged) == _fold(unmerged)
