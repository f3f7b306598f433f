"""The one (typed, msgspec) unary lift of OpenAI chat and Responses lifts every recorded body, field for field."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from modelir import errors
from modelir.conformance import runner as conformance
from modelir.transports.base import HttpResponse
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import request_pb2

from tests.recordings import WIRE, cassette

FIXTURES = sorted((conformance.DEFAULT_FIXTURES / "openai_chat").glob("*.json"))


def _bodies():
    for path in FIXTURES:
        fixture = json.loads(path.read_text())
        answer = fixture.get("http_response", {})
        if fixture.get("operation") == "embed":
            continue  # the embedding endpoint's answer (`openai.embed`), not chat's
        if answer.get("status", 200) == 200 and "body" in answer and fixture.get("mode") != "stream":
            request = json_format.ParseDict(fixture["request"], request_pb2.Request())
            if request.sampling.HasField("max_output_tokens") and not request.sampling.max_output_tokens:
                continue  # the zero-output rule drops what came back, on purpose (`transports.zero_output`)
            yield path.stem, request, json.dumps(answer["body"]).encode()
    folder = WIRE / "openai_chat"
    if folder.is_dir():
        for path in sorted(folder.glob("*.yaml")):
            for exchange in cassette(path):
                if exchange.status == 200 and exchange.sse is None:
                    yield path.stem, request_pb2.Request(model="m", logprob_options={}), exchange.body
        for path in sorted(folder.glob("*.json")):
            body = path.read_bytes()
            if b'"choices"' in body:
                yield path.stem, request_pb2.Request(model="m"), body


@pytest.mark.parametrize(("name", "request_", "body"), list(_bodies()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_chat_body_lifts_its_texts_and_calls(name, request_, body):
    chat = OpenAIChat(provider_model="m")
    lifted = chat.lift(request_, HttpResponse(200, {"content-type": "application/json"}, body))
    raw = json.loads(body)
    assert [c.index for c in lifted.choices] == [c.get("index", 0) for c in raw["choices"]], name
    for choice, native in zip(lifted.choices, raw["choices"], strict=True):
        message = native.get("message") or {}
        texts = [p.text for p in choice.message.parts if p.WhichOneof("content") == "text"]
        assert texts == [t for t in (message.get("content"),) if t], name  # an empty content is no text part
        refusals = [p.refusal for p in choice.message.parts if p.WhichOneof("content") == "refusal"]
        assert refusals == [t for t in (message.get("refusal"),) if t is not None], name
        calls = [p.tool_call.arguments_json for p in choice.message.parts if p.WhichOneof("content") == "tool_call"]
        assert calls == [c["function"]["arguments"] for c in message.get("tool_calls") or ()], name
        entries = (native.get("logprobs") or {}).get("content") or []
        assert list(choice.logprobs.tokens) == [e["token"] for e in entries], name


async def test_a_body_of_the_wrong_shape_is_a_typed_error_through_the_model():
    from modelir import Executor, Model

    from tests.fake_openai import FakeOpenAI

    body = {
        "id": "x",
        "model": "m",
        "choices": [{"index": "zero", "message": {"content": "hi"}, "finish_reason": "stop"}],
    }
    async with FakeOpenAI() as fake:
        fake.body_override = body
        model = Model(OpenAIChat(provider_model="m"), executor=Executor(fake.base_url))
        with pytest.raises(errors.MalformedResponseError, match="documented shape"):
            await model.achat([("user", "hi")])
        await model.executor.aclose()


def test_malformed_json_is_a_typed_error():
    with pytest.raises(errors.MalformedResponseError):
        OpenAIChat().lift(request_pb2.Request(model="m"), HttpResponse(200, {}, b'{"choices": ['))


def _responses_bodies():
    for path in sorted((conformance.DEFAULT_FIXTURES / "openai_responses").glob("*.json")):
        fixture = json.loads(path.read_text())
        answer = fixture.get("http_response", {})
        if answer.get("status", 200) == 200 and "body" in answer and fixture.get("operation") != "embed":
            yield (
                path.stem,
                json_format.ParseDict(fixture["request"], request_pb2.Request()),
                json.dumps(answer["body"]).encode(),
            )
    folder = WIRE / "openai_responses"
    if folder.is_dir():
        for path in sorted(folder.glob("*.yaml")):
            for exchange in cassette(path):
                if exchange.status == 200 and exchange.sse is None:
                    yield path.stem, request_pb2.Request(model="m"), exchange.body
        body = (folder / "vercel__reasoning_encrypted_content.json").read_bytes()
        yield "vercel_reasoning", request_pb2.Request(model="m"), body


@pytest.mark.parametrize(
    ("name", "request_", "body"), list(_responses_bodies()), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_responses_body_lifts_each_output_item(name, request_, body):
    from modelir.transports.openai.responses import OpenAIResponses
    from modelir.transports.openai.responses_items import HOSTED_TYPES

    lifted = OpenAIResponses(provider_model="gpt-5").lift(request_, HttpResponse(200, {}, body))
    items = json.loads(body).get("output") or []
    # A message gives a part per content entry, a hosted-tool item a call and its result, any other item one part.
    expected_parts = sum(
        len(i.get("content") or ()) if i["type"] == "message" else 2 if i["type"] in HOSTED_TYPES else 1 for i in items
    )
    assert len(lifted.choices[0].message.parts) == expected_parts, name
    assert not lifted.warnings, name
    output_ids = [i.get("id") or "" for i in items if i["type"] != "message"]
    assert [
        p.item_id
        for p in lifted.choices[0].message.parts
        if p.WhichOneof("content") not in ("text", "refusal", "server_tool_result")
    ] == output_ids


def test_a_responses_item_of_an_unknown_type_is_a_provider_part_and_the_rest_lifted():
    from modelir.transports.openai.responses import OpenAIResponses

    body = {
        "id": "r",
        "status": "completed",
        "output": [
            {"type": "local_shell_call", "id": "lsh_1", "status": "completed", "action": {"type": "exec"}},
            {"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": "hi"}]},
        ],
    }
    lifted = OpenAIResponses(provider_model="o").lift(
        request_pb2.Request(model="m"), HttpResponse(200, {}, json.dumps(body).encode())
    )
    unknown, text = lifted.choices[0].message.parts
    assert unknown.provider_part.type == "openai_responses.local_shell_call" and unknown.item_id == "lsh_1"
    assert json.loads(unknown.provider_part.native_json) == body["output"][0]
    assert unknown.provider_part.issuer.transport == "openai_responses"
    assert text.text == "hi" and not lifted.warnings


def test_a_responses_item_of_a_known_type_but_the_wrong_shape_is_a_typed_error():
    from modelir.transports.openai.responses import OpenAIResponses

    body = {"id": "r", "output": [{"type": "web_search_call"}, {"type": "message", "content": "not a list"}]}
    with pytest.raises(errors.MalformedResponseError, match="documented shape"):
        OpenAIResponses(provider_model="o").lift(
            request_pb2.Request(model="m"), HttpResponse(200, {}, json.dumps(body).encode())
        )
