"""The chat stream lift's plain lane (`ChatStreamLifter.plain_lane`, taken by `AccountedStream.feed`): a chunk that
holds one choice's text and nothing else is lifted without the accounting and the general `feed`. Held here: over
every chat-shaped stream of every fixture and shared recording, and over variations of their chunks made to hit
each way out of the lane, a stream lifted with the lane gives the same events, the same end and the same errors as
without it, and every chunk the lane takes is one that `accounting.findings` (the reference) finds nothing in."""

from __future__ import annotations

from typing import Any

import orjson
from modelir import build_request
from modelir.errors import ModelError
from modelir.transports import accounting
from modelir.transports.accounted_stream import AccountedStream
from modelir.transports.base import SHAPE_ERRORS, RawEvent
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.openai.chat_stream import PLAIN_PATHS, ChatStreamLifter

from tests.native_answers import fixture_answers, recorded_answers
from tests.recordings import WIRE
from tests.test_accounting_stream_once import _mutations

SECTION = "openai_chat.stream"
_CHAT_SECTIONS = {SECTION, "vllm.chat_stream", "llamacpp.chat_stream"}  # all chat completion chunks
_TRANSPORT = OpenAIChat(provider_model="m")
_REQUEST = build_request("m", messages=[("user", "Hi")])


def _lift(payloads: list[bytes], *, lane: bool) -> tuple[list[bytes], str, int]:
    """(the serialised events, the error that stopped the lift or "", how many chunks the lane took)."""
    schema = accounting.schema(SECTION)
    assert schema is not None
    stream = AccountedStream(
        ChatStreamLifter(_TRANSPORT, _REQUEST), schema, _TRANSPORT.name, _TRANSPORT.issuer(_REQUEST)
    )
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


def _streams() -> list[tuple[str, list[bytes]]]:
    return [
        (answer.source, list(answer.payloads))
        for answer in [*fixture_answers(), *recorded_answers()]
        if answer.stream and answer.section in _CHAT_SECTIONS
    ]


def _same(source: str, payloads: list[bytes]) -> int:
    with_lane = _lift(payloads, lane=True)
    without = _lift(payloads, lane=False)
    assert with_lane[:2] == without[:2], source
    return with_lane[2]


def test_the_lane_lifts_every_chat_stream_as_feed_does():
    streams = _streams()
    taken = sum(_same(source, payloads) for source, payloads in streams)
    chunks = sum(len(p) for _, p in streams)
    floor = 15 if WIRE.is_dir() else 8  # with the shared recordings (absent on some machines), and our fixtures alone
    assert len(streams) > floor and taken > (chunks // 2 if WIRE.is_dir() else 3), (len(streams), taken, chunks)


def test_variations_of_each_chunk_lift_as_feed_does():
    varied = varied_taken = 0
    for source, payloads in _streams():
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
                    _same(source, [*payloads[:1], *head, data, *tail])
                    > _lift([*payloads[:1], *head, *tail], lane=True)[2]
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
