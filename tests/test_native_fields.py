"""Every native field accounted for (`transports/accounting.py`): on every fixture and recording, and the mechanism
itself (unread members warned about and kept, facts kept, streams and errors accounted)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from modelir import accumulate
from modelir.transports import accounting
from modelir.transports.base import HttpResponse, RawEvent, guarded_error
from modelir.transports.openai import OpenAIChat
from modelir.v1 import request_pb2

from tests.native_answers import Answer, fixture_answers, recorded_answers

README = Path(accounting.__file__).parent / "README.md"


def _unaccounted(answer: Answer) -> list[str]:
    section = accounting.schema(answer.section)
    assert section is not None, f"{answer.source}: no native_fields section {answer.section!r} accounts it"
    return [
        f"{f.path} = {f.raw[:80].decode('utf-8', 'replace')}"
        for payload in answer.payloads
        if payload.strip() != b"[DONE]"
        for f in accounting.findings(section, payload)
        if not f.fact
    ]


@pytest.mark.parametrize("answer", fixture_answers(), ids=lambda a: a.source)
def test_every_fixture_answer_is_accounted_for(answer):
    assert _unaccounted(answer) == []


def test_the_one_pass_decoder_finds_what_the_walker_finds():
    answers = fixture_answers() + recorded_answers()
    extra = b'{"id": "c", "choices": [{"index": 1, "message": {"content": "x", "x_new": {"a": 1}}, "x_flag": 1}]}'
    compared = 0
    for answer in [*answers, Answer("synthetic", "openai_chat.unary", (extra,))]:
        section = accounting.schema(answer.section)
        assert section is not None
        for payload in answer.payloads:
            one_pass = sorted(accounting.findings(section, payload), key=lambda f: f.path)  # kept in path order
            assert one_pass == sorted(accounting.walked(section, payload), key=lambda f: f.path), answer.source
            compared += 1
    # Not vacuous: our own fixtures alone give some 400 payloads (the shared recordings, when present, more).
    assert compared > (500 if recorded_answers() else 300)


def test_every_recorded_answer_is_accounted_for():
    answers = recorded_answers()
    if not answers:
        pytest.skip("the shared recordings are not here")
    problems = {a.source: found for a in answers if (found := _unaccounted(a))}
    assert problems == {}


def test_every_section_compiles_and_its_ignored_fields_are_documented():
    readme = README.read_text()
    undocumented = []
    for name, own in accounting.all_sections().items():
        assert accounting.schema(name) is not None  # compiles, includes resolved
        for path, disposition in own.items():
            if str(disposition).startswith("ignored: ") and f"`{path}`" not in readme:
                undocumented.append(f"{name}: {path}")
    assert undocumented == []


def test_a_bad_disposition_is_refused():
    with pytest.raises(ValueError, match="read, kept, fact"):
        accounting.compile_section({"w.s": {"a": "ignored"}}, "w.s")  # ignored without a reason


# ---- the mechanism ---------------------------------------------------------------------------------------------

CHAT = OpenAIChat(provider_model="m")


def _request() -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=3).parts.add(text="hi")
    return request


def _chat_body(**extra) -> dict:
    message = {"role": "assistant", "content": "Hello.", **extra.pop("message", {})}
    return {
        "id": "c",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", **extra.pop("choice", {})}],
        **extra,
    }


def test_an_unread_member_is_named_in_a_warning_and_kept_as_a_provider_part():
    body = _chat_body(message={"x_audit": {"trace": [1, 2]}}, x_flag=True)
    lifted = CHAT.lift_accounted(_request(), HttpResponse(200, {}, orjson.dumps(body)))
    (warning,) = lifted.warnings
    assert warning.code == "unread_native_fields"
    assert "choices[0].message.x_audit" in warning.message and "x_flag" in warning.message
    kept = [p.provider_part for p in lifted.choices[0].message.parts if p.WhichOneof("content") == "provider_part"]
    assert [(k.type, k.native_json) for k in kept] == [("openai_chat.message.x_audit", '{"trace":[1,2]}')]
    assert kept[0].issuer.transport == "openai_chat"  # a flag (True) is named, not kept: it holds no content


def test_a_declared_fact_is_kept_without_a_warning():
    body = _chat_body(choice={"content_filter_results": {"hate": {"filtered": False}}})
    lifted = CHAT.lift_accounted(_request(), HttpResponse(200, {}, orjson.dumps(body)))
    assert not lifted.warnings
    (part,) = [p for p in lifted.choices[0].message.parts if p.WhichOneof("content") == "provider_part"]
    assert part.provider_part.type == "openai_chat.content_filter_results"


def test_a_stream_keeps_unread_members_after_the_last_part_and_warns_at_the_end():
    chunks = [
        {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "Hi", "x_note": "a note of some length"}}],
        },
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "x_tally": [3]},
    ]
    lifter = CHAT.stream_lifter_accounted(_request())
    events = [e for c in chunks for e in lifter.feed(RawEvent("", orjson.dumps(c)))]
    events += lifter.feed(RawEvent("", b"[DONE]"))
    folded = accumulate([*events, *lifter.close()])
    parts = folded.choices[0].message.parts
    assert parts[0].text == "Hi"
    assert [p.provider_part.type for p in parts[1:]] == ["openai_chat.delta.x_note", "openai_chat.x_tally"]
    (warning,) = folded.warnings
    assert "choices[0].delta.x_note" in warning.message and "x_tally" in warning.message


def test_a_tagged_object_of_an_unknown_type_is_named_with_its_type():
    section = accounting.compile_section({"w.s": {"items[](type=a).v": "read", "items[](type=a).type": "read"}}, "w.s")
    (finding,) = accounting.findings(section, b'{"items": [{"type": "a", "v": 1}, {"type": "b", "w": 2}]}')
    assert finding.path == "items[1](type=b)"


def test_an_error_body_keeps_what_its_lift_did_not_read_in_the_message():
    body = {"error": {"message": "bad call", "type": "invalid_request_error", "code": "x", "debug": {"a": 1}}}
    error = guarded_error(CHAT, HttpResponse(400, {}, orjson.dumps(body)))
    assert "bad call" in error.message and 'error.debug: {"a":1}' in error.message


def test_logprob_entries_are_skipped_whole():
    section = accounting.schema("openai_chat.unary")
    assert section is not None
    entries = [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": [], "x_unseen": 1}] * 3
    body = _chat_body(choice={"logprobs": {"content": entries}})
    assert accounting.findings(section, orjson.dumps(body)) == []  # declared whole: never walked
