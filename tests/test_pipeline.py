"""The request pipeline: one path for run, stream, validate and the conformance runner; the deadline reaches the
executor, so a retry that would pass it is not attempted."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web
from modelir import Model, build_request, errors
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.pipeline.prepare import Pipeline
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.reference import ReferenceModel

from tests.fake_openai import completion_body


class _Busy:
    """An OpenAI-style upstream that answers 503 with `Retry-After: retry_after` until `failures` are used up."""

    def __init__(self, retry_after: str, failures: int) -> None:
        self.retry_after, self.failures, self.calls = retry_after, failures, 0

    async def _handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        if self.calls <= self.failures:
            return web.json_response(
                {"error": {"message": "busy"}}, status=503, headers={"Retry-After": self.retry_after}
            )
        return web.json_response(completion_body("m"))

    async def __aenter__(self) -> Model:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        executor = Executor(f"http://127.0.0.1:{port}/v1", retry=RetryPolicy(max_attempts=4))
        self.model = Model(OpenAIChat(provider_model="m"), name="m", executor=executor)
        return self.model

    async def __aexit__(self, *exc) -> None:
        assert self.model.executor is not None
        await self.model.executor.aclose()
        await self.runner.cleanup()


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "stream"])
async def test_a_retry_that_would_pass_the_deadline_is_not_attempted(streamed):
    """Retry-After is 5 s, the request's timeout 1.5 s: the provider's error comes back at once, after one attempt,
    instead of a wait that ends in DeadlineExceeded."""
    busy = _Busy(retry_after="5", failures=1)
    async with busy as model:
        request = build_request("m", messages=[("user", "hi")], timeout=1.5)
        started = time.monotonic()
        with pytest.raises(errors.ProviderUnavailableError):
            if streamed:
                [event async for event in model.astream(request)]
            else:
                await model.arun(request)
        assert time.monotonic() - started < 1.4
    assert busy.calls == 1


async def test_a_retry_that_fits_the_deadline_is_attempted():
    busy = _Busy(retry_after="0.05", failures=1)
    async with busy as model:
        response = await model.arun(build_request("m", messages=[("user", "hi")], timeout=5))
    assert busy.calls == 2
    assert response.timing.attempt_count == 2
    assert response.choices[0].message.parts[0].text == "Hello world!"


async def test_the_deadline_still_bounds_a_slow_answer():
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response(completion_body("m"))

    busy = _Busy(retry_after="0", failures=0)
    busy._handle = slow  # type: ignore[method-assign]
    async with busy as model:
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceededError):
            await model.arun(build_request("m", messages=[("user", "hi")], timeout=0.3))
        assert time.monotonic() - started < 1.5


def test_prepare_lowers_for_http_and_not_for_in_process():
    request = build_request("m", messages=[("user", "hi")], max_output_tokens=5)
    chat = OpenAIChat(provider_model="m")
    prepared = Pipeline(chat).prepare(request)
    assert prepared.native is not None and prepared.native.path == "/chat/completions"
    assert prepared.native == chat.lower(request, stream=False)
    reference = ReferenceModel()
    assert Pipeline(reference).prepare(request).native is None


async def test_validate_and_run_agree_on_a_rejection():
    model = Model(ReferenceModel(), name="reference")
    request = build_request("reference", prompt="x")
    request.constraint.regex = "a+"
    verdict = await model.avalidate(request)
    assert not verdict.accepted
    with pytest.raises(errors.UnsupportedCapabilityError) as raised:
        await model.arun(request)
    assert list(raised.value.unsupported.missing) == list(verdict.unsupported.missing)
    reference = ReferenceModel()
    with pytest.raises(errors.UnsupportedCapabilityError):
        Pipeline(reference, model="reference").check(request)
