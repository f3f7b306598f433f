"""A lift runs with the cyclic GC paused (the served figure in-process), and a collector the caller turned off
stays off."""

from __future__ import annotations

import gc

import httpx
import orjson
from modelir import Model, build_request
from modelir.http.executor import Executor
from modelir.model import paused_gc
from modelir.transports.openai.chat import OpenAIChat

ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
}


class _Watching(OpenAIChat):
    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.seen: list[bool] = []

    def lift(self, request, response):
        self.seen.append(gc.isenabled())
        return super().lift(request, response)


async def test_the_lift_runs_with_the_collector_paused_and_it_comes_back():
    executor = Executor(
        "http://up.invalid/v1", transport=httpx.MockTransport(lambda r: httpx.Response(200, json=ANSWER))
    )
    watching = _Watching(provider_model="m")
    model = Model(watching, name="m", executor=executor)
    response = await model.arun(build_request("m", messages=[("user", "hi")]))
    assert response.choices[0].message.parts[0].text == "hi"
    assert watching.seen == [False] and gc.isenabled()


def test_a_disabled_collector_stays_disabled_and_an_error_restores_it():
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    try:
        with paused_gc():
            orjson.loads(b"{")
    except orjson.JSONDecodeError:
        pass
    assert gc.isenabled()
