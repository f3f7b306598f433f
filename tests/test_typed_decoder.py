"""The typed (msgspec) unary lift of OpenAI chat gives exactly what the generic (dict) lift gives."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from modelir import conformance, errors
from modelir.transports.base import HttpResponse
from modelir.transports.openai_chat import OpenAIChat
from modelir.v1 import request_pb2

from tests.recordings import WIRE, cassette

FIXTURES = sorted((conformance.DEFAULT_FIXTURES / "openai_chat").glob("*.json"))


def _bodies():
    for path in FIXTURES:
        fixture = json.loads(path.read_text())
        answer = fixture.get("http_response", {})
        if answer.get("status", 200) == 200 and "body" in answer and fixture.get("mode") != "stream":
            request = json_format.ParseDict(fixture["request"], request_pb2.Request())
            yield path.stem, request, json.dumps(answer["body"]).encode()
    folder = WIRE / "openai_chat"
    if folder.is_dir():
        for path in sorted(folder.glob("*.yaml")):
            for exchange in cassette(path):
                if exchange.status == 200 and exchange.sse is None:
                    yield path.stem, request_pb2.Request(model="m", logprobs={}), exchange.body
        for path in sorted(folder.glob("*.json")):
            body = path.read_bytes()
            if b'"choices"' in body:
                yield path.stem, request_pb2.Request(model="m"), body


@pytest.mark.parametrize(("name", "request_", "body"), list(_bodies()), ids=lambda v: v if isinstance(v, str) else "")
def test_typed_and_generic_lifts_agree(name, request_, body):
    chat = OpenAIChat(provider_model="m")
    response = HttpResponse(200, {"content-type": "application/json"}, body)
    typed = chat.lift(request_, response)
    generic = chat.lift_parsed(request_, json.loads(body), response)
    assert typed == generic, name


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
        if answer.get("status", 200) == 200 and "body" in answer:
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
def test_responses_typed_and_generic_lifts_agree(name, request_, body):
    from modelir.transports.openai_responses import OpenAIResponses, lift_response_object
    from modelir.v1 import response_pb2

    transport = OpenAIResponses(provider_model="gpt-5")
    typed = transport.lift(request_, HttpResponse(200, {}, body))
    generic = response_pb2.Response()
    lift_response_object(transport, request_, json.loads(body), generic)
    assert typed == generic, name


@pytest.mark.parametrize(
    "path", sorted((conformance.DEFAULT_FIXTURES / "vllm").glob("chat_*.json")), ids=lambda p: p.stem
)
def test_vllm_chat_typed_and_generic_lifts_agree(path):
    from modelir.transports.vllm import VLLM

    fixture = json.loads(path.read_text())
    request = json_format.ParseDict(fixture["request"], request_pb2.Request())
    body = json.dumps(fixture["http_response"]["body"]).encode()
    chat = VLLM(provider_model="q")._chat
    typed = chat.lift(request, HttpResponse(200, {}, body))
    generic_body = json.loads(body)
    generic = chat._prompt_extras(
        request,
        chat.lift_parsed(request, generic_body, HttpResponse(200, {}, body)),
        generic_body.get("prompt_logprobs"),
        generic_body.get("prompt_token_ids"),
    )
    assert typed == generic
