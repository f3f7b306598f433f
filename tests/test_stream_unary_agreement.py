"""Stream and unary agree: every stream we have (fixtures, shared recordings, our own live-engine recordings),
folded, gives the same parts, phase, citations, finish, logprobs, usage, prompt feedback and soft errors as the unary
lift of the same answer assembled (`tests/stream_assembly.py`). Both sides run the accounting, so kept native facts must
agree too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format
from modelir import accumulate
from modelir.pipeline.prepare import Pipeline
from modelir.registry import build_transport
from modelir.transports import token_prompt
from modelir.transports.base import HttpResponse, HttpTransport, RawEvent
from modelir.v1 import request_pb2, response_pb2

from tests.native_answers import FIXTURES, recorded_answers
from tests.stream_assembly import ASSEMBLERS


def _streams():
    for path in sorted(FIXTURES.glob("*/*.json")):
        fixture = json.loads(path.read_text())
        if fixture.get("mode") != "stream" or fixture.get("stream_end") == "interrupted":
            continue
        if "expected_error" in fixture or "expected_rejection" in fixture:
            continue
        yield pytest.param(path, id=f"{path.parent.name}/{path.stem}")


def _compare(streamed: response_pb2.Response, unary: response_pb2.Response, *, logprobs: bool = True) -> None:
    assert [c.index for c in streamed.choices] == [c.index for c in unary.choices]
    for folded, whole in zip(streamed.choices, unary.choices, strict=True):
        assert list(folded.message.parts) == list(whole.message.parts)
        assert folded.message.phase == whole.message.phase
        assert (folded.finish_reason, folded.raw_finish_reason) == (whole.finish_reason, whole.raw_finish_reason)
        if logprobs:
            assert folded.logprobs == whole.logprobs
    assert streamed.usage == unary.usage
    assert list(streamed.errors) == list(unary.errors)
    assert streamed.prompt_feedback == unary.prompt_feedback  # Gemini's blocked prompt: a soft fact, not a choice


def _both(transport: HttpTransport, request: request_pb2.Request, events: list[tuple[str, bytes]], section: str):
    body = ASSEMBLERS[section]([data for _, data in events])
    if body is None:
        pytest.skip("this stream has no unary twin (it failed or did not end)")
    lifter = transport.stream_lifter_accounted(request)
    folded = [e for name, data in events for e in lifter.feed(RawEvent(name, data))]
    streamed = accumulate([*folded, *lifter.close()])
    unary = transport.lift_accounted(request, HttpResponse(200, {}, json.dumps(body).encode()))
    return streamed, unary


@pytest.mark.parametrize("path", list(_streams()))
def test_every_fixture_stream_folds_to_the_unary_lift_of_its_assembled_answer(path: Path):
    fixture = json.loads(path.read_text())
    transport = build_transport(path.parent.name, fixture.get("transport_options", {}))
    assert isinstance(transport, HttpTransport)
    request = json_format.Parse(json.dumps(fixture["request"]), request_pb2.Request())
    prepared = Pipeline(transport).prepare(request, streaming=True)
    request = prepared.request
    if prepared.native is None:  # it runs as the token-id request its renders built: the prompt the fixture sends
        request = token_prompt.token_request(request, fixture["expected_http_request"]["body"]["prompt"])
    section = transport.native_fields(request, "stream")
    if section not in ASSEMBLERS:
        pytest.skip(f"no assembler for {section} (engines' native streams: sglang, llama.cpp /completion, Gemini)")
    events = [(e.get("event", ""), e["data"].encode()) for e in fixture["stream_events"]]
    _compare(*_both(transport, request, events, section))


_WIRES = {  # stream section of a recording -> the transport that lifts it, and its input
    "openai_chat.stream": ("openai_chat", "conversation"),
    "openai_completions.stream": ("openai_completions", "prompt"),
    "openai_responses.stream": ("openai_responses", "conversation"),
    "anthropic_messages.stream": ("anthropic_messages", "conversation"),
    "ollama.chat_stream": ("ollama", "conversation"),
    "ollama.generate_stream": ("ollama", "prompt"),
    "google_genai.stream": ("google_genai", "conversation"),
    "llamacpp.chat_stream": ("llamacpp", "conversation"),
    "llamacpp.completion_stream": ("llamacpp", "prompt"),
    "sglang.stream": ("sglang", "prompt"),
}


def test_every_recorded_stream_folds_to_the_unary_lift_of_its_assembled_answer():
    streams = [a for a in recorded_answers() if a.stream and a.section in _WIRES]
    if not streams:
        pytest.skip("the shared recordings are not here")
    compared = 0
    for answer in streams:
        name, kind = _WIRES[answer.section]
        transport = build_transport(name, {"provider_model": "m"})
        assert isinstance(transport, HttpTransport)
        request = request_pb2.Request(model="m")
        if kind == "prompt":
            request.prompt = "hi"
        else:
            request.conversation.messages.add(role=3).parts.add(text="hi")
        body = ASSEMBLERS[answer.section](answer.payloads)
        if body is None:
            continue
        events = [("", data) for data in answer.payloads]
        if answer.section.startswith("openai_c") and answer.payloads[-1].strip() != b"[DONE]":
            events.append(("", b"[DONE]"))  # the vercel recorder strips the end marker
        try:
            # Not the logprobs: the request here is a stand-in that asks for none (the unary lifts then read none
            # while the stream lifts keep what comes), and Responses' final object rounds what its deltas said.
            _compare(*_both(transport, request, events, answer.section), logprobs=False)
        except AssertionError as exc:
            raise AssertionError(f"{answer.source}: {exc}") from None
        compared += 1
    assert compared > 40  # 43 today (27 before Gemini and llama.cpp streams were compared)


ENGINE_RECORDINGS = FIXTURES.parent / "recordings"  # ours, written by tests/engines/recorder.py


def test_every_engine_recorded_stream_folds_to_the_unary_lift_of_its_assembled_answer():
    """Our own live-engine recordings (llama-server, llama-cpp-python, Ollama, vLLM): every stream that ended, with
    the request that was really sent."""
    from modelir.records.files import read_header, read_records
    from modelir.v1 import record_pb2

    compared = 0
    for path in sorted(ENGINE_RECORDINGS.glob("*/generate.jsonl")):
        header = read_header(path)
        assert header is not None
        options = json.loads(header.run_metadata["transport_options"])
        transport = build_transport(header.run_metadata["transport"], options)
        assert isinstance(transport, HttpTransport)
        for record in read_records(path):
            raw = record.response.raw
            if not raw.stream_events or record.status == record_pb2.RECORD_STATUS_FAILED:
                continue
            section = transport.native_fields(record.request, "stream")
            events = [(e.event, e.data) for e in raw.stream_events]
            if ASSEMBLERS[section]([data for _, data in events]) is None:
                continue
            try:
                _compare(*_both(transport, record.request, events, section))
            except AssertionError as exc:
                raise AssertionError(f"{path.parent.name} {record.key}: {exc}") from None
            compared += 1
    assert compared > 20  # 27 today: llama-server, Ollama, vLLM and llama-cpp-python streams
