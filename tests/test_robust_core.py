"""The core's guards (#14): typed stream folds, closed streams, partial output on hard failures, answer shapes,
deadlines that only shrink, executors shared only by identical auth, and credentials never written."""

from __future__ import annotations

import asyncio
import time

import httpx
import orjson
import pytest
from google.protobuf import duration_pb2
from modelir import Model, build_request, errors
from modelir.config import build_config
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.model import DEFAULT_TIMEOUT
from modelir.streams.fold import StreamAccumulator
from modelir.transports.base import HttpResponse
from modelir.transports.google.genai import GoogleGenAI
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import stream_pb2

SECRET = "sk-live-0123456789abcdef"


def _model(answer, *, transport=None, retry: RetryPolicy | None = None, **options) -> Model:
    executor = Executor(
        "http://upstream.invalid/v1",
        headers={"Authorization": f"Bearer {SECRET}"},
        transport=httpx.MockTransport(answer),
        retry=retry or RetryPolicy(max_attempts=1),
    )
    return Model(transport or OpenAIChat(), name="m", executor=executor, **options)


def _chat():
    return build_request("m", messages=[("user", "hi")], max_output_tokens=8)


def test_a_delta_that_skips_parts_is_a_typed_error():
    accumulator = StreamAccumulator()
    with pytest.raises(errors.MalformedResponseError, match="skips to part 2"):
        accumulator.add(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=2, text="x")))


@pytest.mark.parametrize("body", [{}, {"id": "x"}, [{"object": "list"}]])
async def test_valid_json_of_the_wrong_shape_is_malformed(body):
    model = _model(lambda request: httpx.Response(200, json=body))
    with pytest.raises(errors.MalformedResponseError, match="none of the keys"):
        await model.arun(_chat())


async def test_an_error_body_of_the_wrong_shape_still_gives_the_status_error():
    # A Gemini `details` entry whose `@type` is not a string used to raise AttributeError out of `error()`.
    body = {"error": {"code": 429, "message": "quota", "details": [{"@type": ["google.rpc.RetryInfo"]}]}}
    model = _model(lambda request: httpx.Response(429, json=body), transport=GoogleGenAI())
    with pytest.raises(errors.RateLimitedError):
        await model.arun(build_request("m", messages=[("user", "hi")]))


async def test_tokenize_answers_of_the_wrong_shape_are_malformed():
    from modelir.transports.vllm import VLLM

    model = _model(lambda request: httpx.Response(200, json={"tokens": [[1]]}), transport=VLLM())
    with pytest.raises(errors.MalformedResponseError):
        await model.atokenize("hi")


def _sse(*chunks: dict) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)


def _chunk(delta: dict) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": delta}]}


async def test_a_malformed_event_after_deltas_keeps_the_delivered_text_as_partial():
    body = _sse(_chunk({"role": "assistant", "content": "Hel"}), _chunk({"content": "lo"})) + b"data: {broken\n\n"
    model = _model(lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body))
    with pytest.raises(errors.MalformedResponseError) as caught:
        async for _ in model.astream(_chat()):
            pass
    assert caught.value.partial is not None
    assert caught.value.partial.choices[0].message.parts[0].text == "Hello"


async def test_arun_streamed_closes_the_stream_when_the_fold_fails():
    closed = []

    class _Skipping(Model):
        async def _events(self):
            try:
                yield stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=3, text="x"))
                yield stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(part_index=0, text="never"))
            finally:
                closed.append(True)

        def astream(self, request, *, deadline=None):
            return self._events()

    model = _Skipping(OpenAIChat(), executor=Executor("http://upstream.invalid"))
    with pytest.raises(errors.MalformedResponseError):
        await model.arun_streamed(_chat())
    assert closed == [True]  # closed at once, not left to asyncio's shutdown


def test_a_request_timeout_cannot_outlast_the_operators():
    model = _model(lambda request: httpx.Response(500), default_timeout=5.0)
    request = _chat()
    request.timeout.CopyFrom(duration_pb2.Duration(seconds=3600))
    deadline = model._deadline(request, None)
    assert deadline is not None and deadline - time.monotonic() <= 5.0
    request.timeout.CopyFrom(duration_pb2.Duration(seconds=1))
    assert model._deadline(request, None) - time.monotonic() <= 1.0


def test_every_model_has_a_default_timeout():
    model = _model(lambda request: httpx.Response(500))
    assert model.default_timeout == DEFAULT_TIMEOUT
    assert model._deadline(_chat(), None) - time.monotonic() <= DEFAULT_TIMEOUT


async def test_an_endless_stream_without_a_deadline_ends_at_the_default_timeout():
    async def forever():
        yield _sse(_chunk({"role": "assistant", "content": "Hel"}))
        while True:
            await asyncio.sleep(0.01)
            yield _sse(_chunk({"content": "lo"}))

    class _Endless(httpx.AsyncByteStream):
        async def __aiter__(self):
            async for chunk in forever():
                yield chunk

    def answer(request):
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Endless())

    model = _model(answer, default_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError) as caught:
        async for _ in model.astream(_chat()):
            pass
    assert time.monotonic() - started < 2.0
    assert caught.value.partial is not None and caught.value.partial.choices[0].message.parts[0].text.startswith(
        "Hello"
    )


async def test_a_reflected_credential_is_redacted_from_the_error():
    body = {"error": {"message": f"Incorrect API key provided: {SECRET}", "code": SECRET}}
    model = _model(lambda request: httpx.Response(401, json=body))
    with pytest.raises(errors.ProviderAuthError) as caught:
        await model.arun(_chat())
    assert SECRET not in caught.value.message and SECRET not in str(caught.value)
    assert SECRET not in caught.value.provider_code and "[redacted]" in caught.value.message


async def test_a_retry_is_not_started_with_no_time_left_for_it():
    calls = []

    def answer(request):
        calls.append(request)
        return httpx.Response(429, headers={"retry-after": "0.5"}, json={"error": {"message": "slow down"}})

    model = _model(answer, retry=RetryPolicy(max_attempts=4, min_attempt_seconds=0.25))
    with pytest.raises(errors.RateLimitedError):
        await model.arun(_chat(), deadline=time.monotonic() + 0.7)
    assert len(calls) == 1  # 0.5 s of waiting would leave 0.2 s for the retry: not enough


def test_models_on_one_url_and_key_with_different_auth_schemes_get_their_own_executors():
    config = build_config(
        {
            "models": {
                "gpt": {"transport": "openai_chat", "base_url": "https://gw.example/v1", "credential_env": "KEY"},
                "claude": {
                    "transport": "anthropic_messages",
                    "base_url": "https://gw.example/v1",
                    "credential_env": "KEY",
                },
                "gpt-2": {"transport": "openai_chat", "base_url": "https://gw.example/v1", "credential_env": "KEY"},
            }
        },
        source="test",
        environ={"KEY": SECRET},
    )
    gpt, claude, gpt2 = (config.models[n].executor for n in ("gpt", "claude", "gpt-2"))
    assert gpt is gpt2 and claude is not gpt
    assert claude._base_headers.get("x-api-key") == SECRET and "authorization" not in claude._base_headers


def test_a_retry_after_of_forever_is_not_retried():
    from modelir.transports.base import error_for_status

    exc = error_for_status(HttpResponse(429, {"retry-after": "inf"}, b""), "slow down")
    assert isinstance(exc, errors.RateLimitedError) and not exc.retryable and exc.retry_after is None


async def test_an_ndjson_stream_cut_inside_a_line_ends_soft_truncated():
    from modelir.transports.ollama import Ollama

    body = (
        b'{"model": "m", "message": {"role": "assistant", "content": "Hel"}, "done": false}\n'
        b'{"model": "m", "message": {"role": "assistant", "content": "lo"}, "done": false}\n'
        b'{"model": "m", "message": {"role": "assis'
    )
    model = _model(
        lambda request: httpx.Response(200, headers={"content-type": "application/x-ndjson"}, content=body),
        transport=Ollama(),
    )
    response = await model.arun_streamed(_chat())
    assert response.errors[0].reason == errors.TruncatedStreamError.reason
    assert response.choices[0].message.parts[0].text == "Hello"


def test_a_configured_model_without_a_timeout_gets_the_default():
    config = build_config(
        {"models": {"gpt": {"transport": "openai_chat", "base_url": "https://api.example/v1"}}},
        source="test",
        environ={},
    )
    assert config.models["gpt"].default_timeout == DEFAULT_TIMEOUT


async def test_a_lift_failure_mid_stream_closes_the_upstream_response_at_once():
    closed = []

    class _Body(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield _sse(_chunk({"role": "assistant", "content": "Hel"}))
            yield b"data: {broken\n\n"
            await asyncio.sleep(3600)  # more would come; the consumer must not wait for it
            yield b""

        async def aclose(self):
            closed.append(True)

    model = _model(lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Body()))
    with pytest.raises(errors.MalformedResponseError):
        async for _ in model.astream(_chat()):
            pass
    assert closed == [True]  # by the executor, now: not left for asyncio's shutdown (a spurious DeadlineExceeded)
