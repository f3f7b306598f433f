"""Ollama's vision learned from the engine: `/api/show` `capabilities` asked once per model, only for a request with
an image whose transport leaves `vision` unset; an image to a model without vision refused before the generation
call; a model whose vision cannot be learned (no `capabilities`: Ollama before 0.6.4; `/api/show` failing) sent
with an `image_input_unverified` warning that says why; the `vision` option overrides all of it. The `/api/show`
answer is the shape Ollama 0.17.4 gave live for the tiny model (`engines/test_ollama_live.py`)."""

from __future__ import annotations

import orjson
import pytest
from aiohttp import web
from modelir import Model, accumulate, build_request, errors
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.transports.base import HttpResponse
from modelir.transports.ollama import Ollama
from modelir.transports.ollama_show import Shown, lift
from modelir.transports.openai import OpenAIChat
from modelir.v1 import capabilities_pb2, content_pb2, service_pb2

SHOWN = {"modelfile": "", "parameters": "", "template": "{{ .Prompt }}", "details": {}, "model_info": {}}
ANSWER = {
    "model": "tiny",
    "message": {"role": "assistant", "content": "hi"},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 3,
    "eval_count": 1,
}


def _with_image(text: str = "What is this?"):
    request = build_request("tiny", messages=[("user", text)], max_output_tokens=2, temperature=0.0)
    request.sampling.repetition_penalty = 1.0
    request.conversation.messages[0].parts.add().blob.CopyFrom(content_pb2.Blob(mime_type="image/png", data=b"\x89P"))
    return request


@pytest.fixture
async def engine():
    """A fake Ollama: `/api/show` answers `state["show"]` (status, body), `/api/chat` a one-token answer."""
    state: dict = {"show": (200, {**SHOWN, "capabilities": ["completion"]}), "hits": []}

    async def show(request: web.Request) -> web.Response:
        state["hits"].append("show")
        status, body = state["show"]
        return web.json_response(body, status=status)

    async def chat(request: web.Request) -> web.StreamResponse:
        state["hits"].append("chat")
        if not (await request.json()).get("stream"):
            return web.json_response(ANSWER)
        out = web.StreamResponse(headers={"content-type": "application/x-ndjson"})
        await out.prepare(request)
        await out.write(orjson.dumps(ANSWER) + b"\n")
        await out.write_eof()
        return out

    app = web.Application()
    app.router.add_post("/api/show", show)
    app.router.add_post("/api/chat", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    executor = Executor(f"http://127.0.0.1:{port}", retry=RetryPolicy(max_attempts=1))
    state["model"] = lambda **options: Model(Ollama(provider_model="tiny", **options), name="tiny", executor=executor)
    yield state
    await executor.aclose()
    await runner.cleanup()


async def test_an_image_to_a_model_without_vision_is_refused_before_the_call_and_asked_once(engine):
    model = engine["model"]()
    for _ in range(2):
        with pytest.raises(errors.UnsupportedCapabilityError) as refused:
            await model.arun(_with_image())
        assert refused.value.missing == [capabilities_pb2.CAPABILITY_IMAGE_INPUT]
        assert "its /api/show capabilities are completion" in refused.value.message
    with pytest.raises(errors.UnsupportedCapabilityError, match="IMAGE_INPUT"):
        accumulate([e async for e in model.astream(_with_image())])
    assert engine["hits"] == ["show"]
    await model.arun(build_request("tiny", messages=[("user", "Hi")], max_output_tokens=2))
    assert engine["hits"] == ["show", "chat"]  # a request without an image asks nothing


async def test_a_model_with_vision_gets_its_images_without_a_warning(engine):
    engine["show"] = (200, {**SHOWN, "capabilities": ["completion", "vision"]})
    model = engine["model"]()
    response = await model.arun(_with_image())
    streamed = accumulate([e async for e in model.astream(_with_image())])
    for answer in (response, streamed):
        assert answer.choices[0].message.parts[0].text == "hi"
        assert "image_input_unverified" not in [w.code for w in answer.warnings]
    assert engine["hits"] == ["show", "chat", "chat"]


async def test_an_ollama_without_capabilities_sends_the_image_with_the_reason(engine):
    engine["show"] = (200, SHOWN)  # Ollama before 0.6.4
    model = engine["model"]()
    for answer in (await model.arun(_with_image()), accumulate([e async for e in model.astream(_with_image())])):
        (warning,) = [w for w in answer.warnings if w.code == "image_input_unverified"]
        assert "no capabilities (Ollama before 0.6.4)" in warning.message
    assert engine["hits"] == ["show", "chat", "chat"]  # the answer without capabilities is kept


async def test_a_failing_api_show_sends_the_image_with_the_failure_and_asks_again(engine):
    engine["show"] = (500, {"error": "boom"})
    model = engine["model"]()
    for _ in range(2):
        (warning,) = [w for w in (await model.arun(_with_image())).warnings if w.code == "image_input_unverified"]
        assert "POST /api/show failed: " in warning.message and "boom" in warning.message
    assert engine["hits"] == ["show", "chat", "show", "chat"]


async def test_the_vision_option_overrides_the_engine(engine):
    assert (await engine["model"](vision=True).arun(_with_image())).choices[0].message.parts[0].text == "hi"
    with pytest.raises(errors.UnsupportedCapabilityError, match="missing capabilities: IMAGE_INPUT"):
        await engine["model"](vision=False).arun(_with_image())
    assert engine["hits"] == ["chat"]  # neither asks /api/show


def test_lift_reads_capabilities_or_says_there_are_none():
    body = orjson.dumps({**SHOWN, "capabilities": ["completion", "vision"]})
    assert lift(HttpResponse(200, {}, body)) == Shown(frozenset({"completion", "vision"}))
    assert lift(HttpResponse(200, {}, orjson.dumps(SHOWN))) == Shown(None)
    for bad in ({**SHOWN, "capabilities": "vision"}, {**SHOWN, "capabilities": [1]}, ["completion"]):
        with pytest.raises(errors.MalformedResponseError):
            lift(HttpResponse(200, {}, orjson.dumps(bad)))


async def test_validate_answers_what_the_call_would(engine):
    """`Validate` asks what the call would ask: an image to a model without vision is not accepted, with the
    transport's reason; with vision it is; a model whose vision cannot be learned is accepted, as the call runs."""
    verdict = await engine["model"]().avalidate(_with_image())
    assert not verdict.accepted
    assert list(verdict.unsupported.missing) == [capabilities_pb2.CAPABILITY_IMAGE_INPUT]
    assert "has no vision (its /api/show capabilities are completion)" in verdict.unsupported.reasons[0]
    assert (await engine["model"]().avalidate(build_request("tiny", messages=[("user", "Hi")]))).accepted
    assert engine["hits"] == ["show"]  # a request without an image asks nothing
    engine["show"] = (200, {**SHOWN, "capabilities": ["completion", "vision"]})
    assert (await engine["model"]().avalidate(_with_image())).accepted
    engine["show"] = (500, {"error": "boom"})
    assert (await engine["model"]().avalidate(_with_image())).accepted
    assert "chat" not in engine["hits"]  # validating never generates


async def test_the_manifest_says_what_the_engine_says_of_the_model(engine):
    """`acapabilities` (what ListModels serves) asks what an image would ask, once, and shares the answer with the
    calls: a model without vision does not claim IMAGE_INPUT; one with vision, one whose vision cannot be learned
    (the call would send the image, with a warning) and one whose `vision` option says keep the configured claims."""
    image = capabilities_pb2.CAPABILITY_IMAGE_INPUT
    text_only = engine["model"]()
    assert image in text_only.capabilities.capabilities  # as configured, before asking
    for _ in range(2):
        assert image not in (await text_only.acapabilities()).capabilities
    with pytest.raises(errors.UnsupportedCapabilityError):
        await text_only.arun(_with_image())
    assert engine["hits"] == ["show"]  # one /api/show for the manifests and the call
    assert image in text_only.capabilities.capabilities  # the configured manifest is not changed
    assert image in (await engine["model"](vision=True).acapabilities()).capabilities
    assert engine["hits"] == ["show"]  # the option says: nothing asked
    engine["show"] = (200, {**SHOWN, "capabilities": ["completion", "vision"]})
    assert image in (await engine["model"]().acapabilities()).capabilities
    engine["show"] = (200, SHOWN)  # an Ollama before 0.6.4
    assert image in (await engine["model"]().acapabilities()).capabilities
    engine["show"] = (500, {"error": "boom"})
    assert image in (await engine["model"]().acapabilities()).capabilities


async def test_list_models_serves_the_learned_manifest(engine):
    from modelir.server.servicer import ModelServicer

    servicer = ModelServicer({"tiny": engine["model"]()})
    listed = await servicer.ListModels(service_pb2.ListModelsRequest(), None)
    assert capabilities_pb2.CAPABILITY_IMAGE_INPUT not in listed.models[0].manifest.capabilities


def test_which_transports_learn_model_facts_is_decided_once_per_class():
    from modelir.calls import engine_facts
    from modelir.registry import registry

    engine_facts.learns_model_facts.cache_clear()
    for entry in registry().values():
        transport = entry.cls()
        # the same answer as the protocol's own isinstance, which costs a look-up of each member on every call
        assert engine_facts.learns_model_facts(entry.cls) == isinstance(transport, engine_facts.LearnsModelFacts)
    assert engine_facts.learns_model_facts(Ollama) and not engine_facts.learns_model_facts(OpenAIChat)
    before = engine_facts.learns_model_facts.cache_info().hits
    engine_facts.learns_model_facts(Ollama)
    assert engine_facts.learns_model_facts.cache_info().hits == before + 1
