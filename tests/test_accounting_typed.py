"""One decode for a chat lift and its accounting (`transports/accounting_typed.py`): the same `Response` (byte for
byte), the same unread-member warnings and kept parts, the same errors as the two-decode reference path, on every
chat fixture and recording and on variations of them made to hit each way out of the fast path."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import orjson
import pytest
from modelir import build_request
from modelir.conformance.runner import request_that_runs
from modelir.logprobs import native
from modelir.registry import build_transport
from modelir.transports import accounting, accounting_typed
from modelir.transports.base import HttpResponse, HttpTransport
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.openai import OpenAIChat
from modelir.transports.openai import _typed as typed
from modelir.transports.vllm import VLLM
from modelir.v1 import request_pb2

from tests.native_answers import FIXTURES, recorded_answers

CHAT_SECTIONS = ("openai_chat.unary", "vllm.chat", "llamacpp.chat")
_RECORDED_TRANSPORT = {"openai_chat.unary": OpenAIChat, "vllm.chat": VLLM, "llamacpp.chat": LlamaCpp}


def _fixture_exchanges() -> list[tuple[str, HttpTransport, request_pb2.Request, bytes]]:
    out = []
    for folder in ("openai_chat", "vllm", "llamacpp"):
        for path in sorted((FIXTURES / folder).glob("*.json")):
            fixture = json.loads(path.read_text())
            answer = fixture.get("http_response")
            if answer is None or "request" not in fixture or fixture.get("mode") == "stream":
                continue
            if fixture.get("operation") in ("embed", "tokenize") or answer.get("status", 200) >= 400:
                continue
            transport = build_transport(folder, fixture.get("transport_options", {}))
            assert isinstance(transport, HttpTransport)
            request = request_that_runs(fixture)
            if transport.native_fields(request, "unary") not in CHAT_SECTIONS:
                continue  # a raw-prompt route (vLLM and llama.cpp completions)
            body = str(answer["body_text"]).encode() if "body_text" in answer else orjson.dumps(answer.get("body"))
            out.append((f"{folder}/{path.name}", transport, request, body))
    return out


def _recorded_exchanges() -> list[tuple[str, HttpTransport, request_pb2.Request, bytes]]:
    request = build_request("m", messages=[("user", "Hello!")])
    return [
        (answer.source, _RECORDED_TRANSPORT[answer.section](), request, answer.payloads[0])
        for answer in recorded_answers()
        if answer.section in CHAT_SECTIONS and not answer.stream
    ]


def _outcome(lift, transport: HttpTransport, request: request_pb2.Request, body: bytes) -> tuple[str, bytes | str]:
    """What a lift gives: the response's bytes, or the error's type and message."""
    try:
        out = lift(transport, request, HttpResponse(200, (("content-type", "application/json"),), body))
    except Exception as exc:  # the two paths must fail alike, whatever the failure
        return type(exc).__name__, str(exc)
    return "response", out.SerializeToString(deterministic=True)


def _compare(source: str, transport: HttpTransport, request: request_pb2.Request, body: bytes) -> bool:
    """Assert the one-decode path gives what the reference gives; return whether it took the one decode."""
    reference = _outcome(HttpTransport.lift_accounted, transport, request, body)
    once = _outcome(type(transport).lift_accounted, transport, request, body)
    assert once == reference, source
    section = transport.native_fields(request, "unary")
    decoded = accounting_typed.decode_accounted(typed.ChatCompletion, section, body)
    if decoded is not None:  # the fast path's promise: accounting would have found nothing at all
        schema = accounting.schema(section)
        assert schema is not None
        assert accounting.findings(schema, body) == [], source
    return decoded is not None


def _variations(body: bytes) -> list[tuple[str, bytes]]:
    """The answer with a member nobody declared, a fact, a dialect's member, a null where a value goes, a value of
    another type, at each level the closed structs close."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(answer, dict) or not answer.get("choices"):
        return []
    out = []

    def vary(name: str, change) -> None:
        copy = orjson.loads(body)
        change(copy)
        out.append((name, orjson.dumps(copy)))

    choice = lambda a: a["choices"][0]  # noqa: E731
    vary("unread top-level object", lambda a: a.update(x_new={"a": 1}))
    vary("unread top-level null", lambda a: a.update(x_new=None))
    vary("unread choice flag", lambda a: choice(a).update(x_flag=1))
    vary("unread message text", lambda a: (choice(a).get("message") or {}).update(x_text="a string of some length"))
    vary("unread usage detail", lambda a: a.setdefault("usage", {}).setdefault("prompt_tokens_details", {}).update(x=3))
    vary("unread member of x_groq", lambda a: a.update(x_groq={"id": "g", "other": [1]}))
    vary("a fact", lambda a: a.update(provider="OpenRouter-upstream"))
    vary("a null fact", lambda a: a.update(provider=None))
    vary("a choice fact", lambda a: choice(a).update(native_finish_reason="end_turn"))
    vary("a usage fact", lambda a: a.setdefault("usage", {}).update(cost=0.5))
    vary("vLLM's stop_reason", lambda a: choice(a).update(stop_reason=None))
    vary("vLLM's prompt token ids", lambda a: a.update(prompt_token_ids=[1, 2]))
    vary(
        "a tool call's ignored members",
        lambda a: (
            choice(a)
            .setdefault("message", {})
            .update(
                tool_calls=[{"id": "c", "index": 0, "type": "function", "function": {"name": "f", "arguments": "{}"}}]
            )
        ),
    )
    vary(
        "an unread member of a tool call",
        lambda a: (
            choice(a)
            .setdefault("message", {})
            .update(
                tool_calls=[{"id": "c", "function": {"name": "f", "arguments": "{}", "x": "a string of some length"}}]
            )
        ),
    )
    vary("a null message", lambda a: choice(a).update(message=None))
    vary("content of another type", lambda a: choice(a).setdefault("message", {}).update(content=3))
    vary("usage of another type", lambda a: a.update(usage=[1]))
    vary("usage details of another type", lambda a: a.setdefault("usage", {}).update(prompt_tokens_details=7))
    out.append(("not JSON", body[:-1]))
    out.append(("a list", b"[" + body + b"]"))
    return out


def test_one_decode_gives_the_reference_on_every_chat_fixture_and_its_variations():
    exchanges = _fixture_exchanges()
    once = sum(_compare(*exchange) for exchange in exchanges)
    # Not vacuous: most fixtures take the one decode (the rest have facts or unread members on purpose).
    assert len(exchanges) > 25 and once > len(exchanges) // 2, (once, len(exchanges))
    varied = 0
    for source, transport, request, body in exchanges:
        for name, changed in _variations(body):
            varied += 1
            _compare(f"{source} ({name})", transport, request, changed)
    assert varied > 500


def test_one_decode_gives_the_reference_on_every_chat_recording():
    exchanges = _recorded_exchanges()
    if not exchanges:
        pytest.skip("the shared recordings are not here")
    once = sum(_compare(*exchange) for exchange in exchanges)
    assert once > 0
    for source, transport, request, body in exchanges:
        for name, changed in _variations(body):
            _compare(f"{source} ({name})", transport, request, changed)


def test_the_closed_structs_refuse_what_accounting_names():
    body = orjson.dumps({"id": "c", "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]})
    assert accounting_typed.decode_accounted(typed.ChatCompletion, "openai_chat.unary", body) is not None
    unread = orjson.dumps({"id": "c", "choices": [{"index": 0, "message": {"content": "x", "x_new": 1}}]})
    assert accounting_typed.decode_accounted(typed.ChatCompletion, "openai_chat.unary", unread) is None
    # vLLM declares `stop_reason`; the OpenAI wire does not, so there it is an unread member
    vllm = orjson.dumps({"id": "c", "choices": [{"index": 0, "stop_reason": None}]})
    assert accounting_typed.decode_accounted(typed.ChatCompletion, "openai_chat.unary", vllm) is None
    decoded = accounting_typed.decode_accounted(typed.ChatCompletion, "vllm.chat", vllm)
    assert decoded is not None and decoded.choices[0].stop_reason is None


def test_absent_members_read_as_the_lift_defaults():
    body = orjson.dumps({"id": "c", "choices": [{"index": 0, "message": {"content": "x"}}]})
    decoded = accounting_typed.decode_accounted(typed.ChatCompletion, "openai_chat.unary", body)
    assert isinstance(decoded, typed.ChatCompletion)
    assert decoded.prompt_token_ids is None and decoded.choices[0].stop_reason is None
    assert decoded.choices[0].token_ids is None


class Block(msgspec.Struct):
    text: str | None = None


class Answer(msgspec.Struct):
    content: list[Block] | None = None


def test_a_section_the_closed_structs_cannot_say_keeps_the_reference_path():
    assert accounting_typed.closed(typed.ChatCompletion, "no_such_wire.unary") is None

    # a tagged union the lift reads is walked by accounting: no closed structs say it
    tagged = accounting.compile_section({"w.unary": {"content[](type=text).text": "read"}}, "w.unary")
    with pytest.raises(accounting_typed.Unsupported):
        accounting_typed.closed_struct(Answer, tagged.root)
    # one it does not read is refused by the one decode itself; a member the lift reads but the section does not
    # declare at that level must be absent
    closed, plan = accounting_typed.closed_struct(Block, tagged.root)
    assert plan.absent == [("text", None)]
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"content": []}', type=closed)


def test_every_chat_section_has_closed_structs():
    for section in CHAT_SECTIONS:
        assert accounting_typed.closed(typed.ChatCompletion, section) is not None, section


def test_a_dialect_that_extends_lift_itself_is_lifted_through_it():
    class Extended(OpenAIChat):
        def lift(self, request, response):
            out = super().lift(request, response)
            out.id = "extended"
            return out

    body = orjson.dumps({"id": "c", "choices": [{"index": 0, "message": {"content": "x"}}]})
    out = Extended().lift_accounted(build_request("m", messages=[("user", "Hi")]), HttpResponse(200, (), body))
    assert out.id == "extended"


def test_the_module_is_in_the_package_map():
    assert "accounting_typed" in (Path(accounting.__file__).parent / "README.md").read_text()


@pytest.mark.parametrize("transport", [OpenAIChat(), VLLM(), LlamaCpp()], ids=lambda t: t.name)
def test_a_clean_chat_answer_is_decoded_once(transport, monkeypatch):
    body = orjson.dumps({"id": "c", "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}]})
    request = build_request("m", messages=[("user", "Hi")])
    reference = HttpTransport.lift_accounted(transport, request, HttpResponse(200, (), body))

    def second_decode(*args, **kwargs):
        raise AssertionError("the answer was decoded again for accounting")

    monkeypatch.setattr(accounting, "account_response", second_decode)
    assert transport.lift_accounted(request, HttpResponse(200, (), body)) == reference
    with pytest.raises(AssertionError, match="decoded again"):  # an unread member still goes the reference way
        transport.lift_accounted(request, HttpResponse(200, (), body.replace(b'"id"', b'"x_new":1,"id"')))


def _logprob_answer(tokens: int, top: int, **extra) -> bytes:
    """A chat answer large enough for the native logprob builder (`native.MIN_BODY_BYTES`)."""
    words = ["the", " cat", " sat", " é", "\n", " 42"]

    def entry(i: int) -> dict:
        token = words[i % len(words)]
        return {"token": token, "logprob": -0.25 * (i % 7), "bytes": list(token.encode())}

    content = [{**entry(i), "top_logprobs": [entry(i + j) for j in range(top)]} for i in range(tokens)]
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "".join(e["token"] for e in content)},
        "logprobs": {"content": content},
        "finish_reason": "length",
    }
    answer = {"id": "c", "object": "chat.completion", "model": "m", "choices": [choice], **extra}
    answer["usage"] = {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens}
    return orjson.dumps(answer)


@pytest.mark.parametrize("transport", [OpenAIChat(), VLLM(), LlamaCpp()], ids=lambda t: t.name)
def test_a_large_logprob_answer_gives_the_reference_on_the_native_path(transport):
    request = build_request("m", messages=[("user", "Hi")], logprobs=True, top_logprobs=5)
    body = _logprob_answer(300, 5)
    assert len(body) > native.MIN_BODY_BYTES
    assert _compare("large", transport, request, body)
    for name, changed in _variations(body):
        _compare(f"large ({name})", transport, request, changed)
    # a refusal's logprobs: the native builder declines them, and both paths lift them with the typed structs
    refusal = orjson.loads(body)
    refusal["choices"][0]["logprobs"]["refusal"] = refusal["choices"][0]["logprobs"]["content"][:2]
    _compare("large, refusal tokens", transport, request, orjson.dumps(refusal))


def test_a_large_clean_answer_is_decoded_once_on_the_native_path(monkeypatch):
    if not native.enabled():
        pytest.skip("the native extension is not built here")
    request = build_request("m", messages=[("user", "Hi")], logprobs=True, top_logprobs=5)
    body = _logprob_answer(300, 5)
    transport = OpenAIChat()
    reference = HttpTransport.lift_accounted(transport, request, HttpResponse(200, (), body))
    monkeypatch.setattr(accounting, "account_response", lambda *a, **k: pytest.fail("decoded again"))
    assert transport.lift_accounted(request, HttpResponse(200, (), body)) == reference
