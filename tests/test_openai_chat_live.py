"""openai_chat end to end: config -> Model -> executor -> a local OpenAI-compatible server, and through gRPC."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from modelir import DeadlineExceededError, accumulate, build_request, errors
from modelir.config import build_config
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.v1 import errors_pb2

from tests.fake_openai import ANSWER, FakeOpenAI


@pytest.fixture
async def upstream():
    async with FakeOpenAI() as fake:
        config = build_config(
            {
                "models": {
                    "mini": {
                        "transport": "openai_chat",
                        "base_url": fake.base_url,
                        "provider_model": "gpt-4o-mini",
                        "credential_env": "FAKE_OPENAI_KEY",
                        "limits": {"max_concurrency": 4},
                    }
                }
            },
            source="test.yaml",
            environ={"FAKE_OPENAI_KEY": "sk-test-123"},
        )
        yield fake, config.models["mini"]
        await config.aclose()


async def test_unary_through_the_executor_with_the_credential(upstream):
    fake, model = upstream
    response = await model.achat([("user", "hi")], max_output_tokens=10)
    assert response.choices[0].message.parts[0].text == "".join(ANSWER)
    headers, body = fake.requests[0]
    assert headers["Authorization"] == "Bearer sk-test-123"
    assert body == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 10,
    }
    assert response.timing.attempt_count == 1


async def test_streamed_equals_unary_over_http(upstream):
    _, model = upstream
    request = build_request("mini", messages=[("user", "hi")])
    unary = await model.arun(request)
    streamed = accumulate([e async for e in model.astream(request)])
    for r in (unary, streamed):
        r.ClearField("timing")
    assert streamed == unary


async def test_429_is_retried_after_the_hint(upstream):
    fake, model = upstream
    fake.fail_first = [429, 503]
    response = await model.achat([("user", "hi")])
    assert response.choices[0].message.parts[0].text == "".join(ANSWER)
    assert response.timing.attempt_count == 3 and len(fake.requests) == 3


async def test_cut_stream_keeps_partial_output_with_soft_error(upstream):
    fake, model = upstream
    fake.cut_stream = True
    response = accumulate([e async for e in model.astream(build_request("mini", messages=[("user", "hi")]))])
    assert response.choices[0].message.parts[0].text == ANSWER[0]
    assert response.errors[0].reason == errors_pb2.ERROR_REASON_TRUNCATED_STREAM
    assert len(fake.requests) == 1  # never retried once output was delivered


async def test_through_grpc_deadline_and_cancel_reach_the_upstream(upstream):
    fake, model = upstream
    server, port = await build_server({"mini": model}, "127.0.0.1:0")
    await server.start()
    remote = RemoteModel(f"127.0.0.1:{port}", "mini")
    try:
        assert (await remote.achat([("user", "hi")])).choices[0].message.parts[0].text == "".join(ANSWER)
        fake.delay = 30
        with pytest.raises(DeadlineExceededError):
            await remote.arun(build_request("", messages=[("user", "hi")], timeout=0.3))
        await asyncio.wait_for(fake.cancelled.wait(), 5)  # the deadline became the upstream timeout

        fake.cancelled.clear()
        fake.started.clear()
        task = asyncio.create_task(remote.achat([("user", "hi")]))
        await asyncio.wait_for(fake.started.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(fake.cancelled.wait(), 5)  # the client's cancel closed the upstream request
    finally:
        await remote.aclose()
        await server.stop(None)


async def test_include_raw_keeps_the_provider_answer_byte_for_byte(upstream):
    _, model = upstream
    request = build_request("mini", messages=[("user", "hi")])
    request.include_raw = True
    unary = await model.arun(request)
    assert unary.raw.transport == "openai_chat" and unary.raw.http_status == 200
    assert orjson.loads(unary.raw.body)["choices"][0]["message"]["content"] == "".join(ANSWER)
    # A stored raw answer lifts again to the same response.
    from modelir.transports.base import HttpResponse

    relifted = model.transport.lift(request, HttpResponse(unary.raw.http_status, {}, unary.raw.body))
    assert relifted.choices == unary.choices
    streamed = accumulate([e async for e in model.astream(request)])
    events = streamed.raw.stream_events
    assert len(events) == len(ANSWER) + 4 and events[-1].data == b"[DONE]"


async def test_the_kept_exchange_has_the_answer_headers_and_on_request_the_body_sent(upstream):
    _, model = upstream
    request = build_request("mini", messages=[("user", "hi")], max_output_tokens=3)
    request.include_raw = True
    unary = await model.arun(request)
    names = [h.name for h in unary.raw.response_headers]
    assert "content-type" in names and "x-request-id" in names and names == [n.lower() for n in names]
    assert not {"set-cookie", "authorization"} & set(names)
    assert unary.raw.request_body == b""  # only when asked
    request.include_lowered_request = True
    for kept in ((await model.arun(request)).raw, accumulate([e async for e in model.astream(request)]).raw):
        sent = orjson.loads(kept.request_body)
        assert sent["messages"] == [{"role": "user", "content": "hi"}] and sent["max_completion_tokens"] == 3
        assert b"sk-test-123" not in kept.SerializeToString()  # the credential travels in a header, never kept
        assert any(h.name == "content-type" for h in kept.response_headers)
        assert not any(h.name == "set-cookie" for h in kept.response_headers)
    assert kept.content_type.startswith("text/event-stream")


async def test_a_reflected_credential_is_redacted_from_the_kept_body_and_from_shape_errors(upstream):
    from tests.fake_openai import completion_body

    fake, model = upstream
    body = completion_body("gpt-4o-mini")
    body["id"] = "echo sk-test-123"
    fake.body_override = body
    request = build_request("mini", messages=[("user", "hi")], include_raw=True)
    kept = (await model.arun(request)).raw
    assert b"sk-test-123" not in kept.body and b"[redacted]" in kept.body
    fake.body_override = {"echo sk-test-123": 1}  # the wrong shape: the error names the keys the answer has
    with pytest.raises(errors.MalformedResponseError) as caught:
        await model.arun(request)
    assert "sk-test-123" not in str(caught.value) and "[redacted]" in str(caught.value)
