"""One closed decode per stream event (`accounting_typed.nothing_to_account`, taken by `AccountedStream.feed`):
whenever it says an event has nothing to account, `accounting.findings` (the reference) finds nothing in it, so
the stream's events and warnings are the reference's. Held over every stream event of every fixture and shared
recording (every wire: `AccountedStream` serves them all) and over variations of each event made to hit each way
out of the one decode."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from modelir.transports import accounting, accounting_typed

from tests.native_answers import fixture_answers, recorded_answers
from tests.recordings import WIRE


def _mutations(value: Any) -> list[Any]:
    """Copies of `value` with one change each, at every object and array it holds: an undeclared member (an
    object, a null), a declared fact's likely names, a null and a value of another type in place of each member."""
    out: list[Any] = []

    def walk(node: Any, rebuild) -> None:
        if isinstance(node, dict):
            for extra in ({"x_new": {"a": 1}}, {"x_new": None}, {"provider": "p"}, {"cost": 0.5}, {"x_groq": {"o": 1}}):
                out.append(rebuild({**node, **extra}))
            for key, member in node.items():
                out.append(rebuild({**node, key: None}))
                out.append(rebuild({**node, key: [1] if not isinstance(member, list) else "s"}))
                walk(member, lambda m, key=key, node=node: rebuild({**node, key: m}))
        elif isinstance(node, list):
            for i, item in enumerate(node[:2]):
                walk(item, lambda m, i=i, node=node: rebuild([*node[:i], m, *node[i + 1 :]]))

    walk(value, lambda m: m)
    return out


def _events() -> list[tuple[str, str, bytes]]:
    return [
        (answer.source, answer.section, data)
        for answer in [*fixture_answers(), *recorded_answers()]
        if answer.stream
        for data in answer.payloads
    ]


def _check(source: str, section: str, data: bytes) -> bool:
    schema = accounting.schema(section)
    if schema is None:
        return False
    once = accounting_typed.nothing_to_account(section, data)
    if once:
        assert accounting.findings(schema, data) == [], (source, data[:300])
    return once


def test_nothing_to_account_only_when_findings_finds_nothing():
    events = _events()
    once = sum(_check(*event) for event in events)
    closable = [e for e in events if accounting_typed.stream_closed(e[1]) is not None]
    # Not vacuous: most events of the wires with a closed decoder take it (tagged events have none); our fixtures
    # alone hold 141 such events, the shared recordings (../shared, absent on some machines) many more
    floor = 300 if WIRE.is_dir() else 100
    assert len(closable) > floor and once > len(closable) * 3 // 4, (once, len(closable))
    assert {"openai_chat.stream", "vllm.chat_stream", "llamacpp.chat_stream"} <= {e[1] for e in closable}
    varied = varied_once = 0
    for source, section, data in events:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        for changed in _mutations(value)[:60]:
            varied += 1
            varied_once += _check(source, section, orjson.dumps(changed))
        varied += 2
        _check(source, section, data[:-1])  # not JSON
        _check(source, section, b"[" + data + b"]")
    assert varied > 5000 and 0 < varied_once < varied, (varied_once, varied)


def test_the_bench_chunk_takes_the_one_decode_and_unread_members_do_not():
    chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "x"}}]}
    assert accounting_typed.nothing_to_account("openai_chat.stream", orjson.dumps(chunk))
    chunk["choices"][0]["delta"]["x_new"] = 1
    assert not accounting_typed.nothing_to_account("openai_chat.stream", orjson.dumps(chunk))
    assert not accounting_typed.nothing_to_account("no_such_wire.stream", b"{}")


@pytest.mark.parametrize("section", ["openai_chat.stream", "vllm.chat_stream", "llamacpp.chat_stream"])
def test_the_chat_stream_sections_have_a_closed_decoder(section):
    if accounting.schema(section) is not None:
        assert accounting_typed.stream_closed(section) is not None
