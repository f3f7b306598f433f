"""An answer of the wrong shape is typed, never an empty success: bytes that are not UTF-8 (inside a JSON key, so
the value would silently vanish) are a `MALFORMED_RESPONSE` soft error with what arrived intact kept, unary and
streamed; an empty list where an answer belongs is `MALFORMED_RESPONSE`."""

from __future__ import annotations

import json

import httpx
import pytest
from modelir import Model, build_request, errors
from modelir.http.executor import Executor
from modelir.registry import build_transport
from modelir.v1 import errors_pb2

BAD = b"\xff"
MALFORMED = errors_pb2.ERROR_REASON_MALFORMED_RESPONSE


def _chat(text: str) -> bytes:
    return json.dumps(
        {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    ).encode()  # fmt: skip


def _responses(text: str) -> bytes:
    return json.dumps(
        {"id": "r", "object": "response", "created_at": 1, "status": "completed", "model": "m", "error": None,
         "output": [{"type": "message", "id": "m1", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": text, "annotations": []}]},
                    {"type": "message", "id": "m2", "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": "kept", "annotations": []}]}],
         "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}
    ).encode()  # fmt: skip


UNARY = {
    "openai_chat": (_chat, b'"content"', {}),
    "vllm": (_chat, b'"content"', {}),
    "llamacpp": (_chat, b'"content"', {}),
    "openai_responses": (_responses, b'"text"', {}),
}


async def _run(transport: str, answer: httpx.Response | bytes, stream: bool = False, **options):
    content = answer if isinstance(answer, httpx.Response) else None

    def handler(_request: httpx.Request) -> httpx.Response:
        if content is not None:
            return content
        headers = {"content-type": "text/event-stream" if stream else "application/json"}
        if stream and transport == "ollama":
            headers = {"content-type": "application/x-ndjson"}
        return httpx.Response(200, headers=headers, content=answer)

    executor = Executor("http://shape.invalid", transport=httpx.MockTransport(handler))
    model = Model(build_transport(transport, {"provider_model": "m", **options}), name="m", executor=executor)
    request = build_request("m", **({"prompt": "hi"} if transport == "sglang" else {"messages": [("user", "hi")]}))
    try:
        return await (model.arun_streamed(request) if stream else model.arun(request))
    finally:
        await executor.aclose()


def _text(response) -> str:
    return "".join(p.text for c in response.choices for p in c.message.parts if p.WhichOneof("content") == "text")


@pytest.mark.parametrize("transport", sorted(UNARY))
async def test_invalid_utf8_inside_a_json_key_is_malformed_not_an_empty_success(transport):
    body, key, options = UNARY[transport]
    intact = await _run(transport, body("Hello!"), **options)
    assert _text(intact).startswith("Hello!") and not intact.errors
    damaged = body("Hello!").replace(key, key[:3] + BAD + key[3:], 1)
    response = await _run(transport, damaged, **options)
    assert [e.reason for e in response.errors] == [MALFORMED], response
    assert "UTF-8" in response.errors[0].message
    assert response.choices  # what arrived intact is kept


def _chunk(text: str) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}  # fmt: skip


def _sse(events: list[bytes]) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in events)


@pytest.mark.parametrize("transport", ["openai_chat", "vllm", "llamacpp"])
async def test_a_streamed_chunk_with_invalid_utf8_does_not_vanish_silently(transport):
    pieces = [json.dumps(_chunk(t)).encode() for t in ("Hel", "lo", "!")]
    pieces[1] = pieces[1].replace(b'"content"', b'"con' + BAD + b'tent"')
    end = json.dumps({**_chunk(""), "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).encode()
    response = await _run(transport, _sse([*pieces, end, b"[DONE]"]), stream=True)
    assert [e.reason for e in response.errors] == [MALFORMED], response
    assert _text(response) == "Hel!"  # the damaged chunk's text is gone, and the error says so


async def test_invalid_utf8_in_a_streamed_text_value_is_replaced_and_reported():
    pieces = [json.dumps(_chunk(t)).encode() for t in ("Hel", "lo", "!")]
    pieces[1] = pieces[1].replace(b'"lo"', b'"l' + BAD + b'o"')
    end = json.dumps({**_chunk(""), "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}).encode()
    response = await _run("openai_chat", _sse([*pieces, end, b"[DONE]"]), stream=True)
    assert _text(response) == "Hell\ufffdo!"
    assert [e.reason for e in response.errors] == [MALFORMED]


async def test_an_ndjson_line_with_invalid_utf8_is_reported():
    lines = [
        {"model": "m", "created_at": "t", "message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"model": "m", "created_at": "t", "message": {"role": "assistant", "content": "lo"}, "done": False},
        {"model": "m", "created_at": "t", "message": {"role": "assistant", "content": ""}, "done": True,
         "done_reason": "stop"},
    ]  # fmt: skip
    raw = [json.dumps(line).encode() for line in lines]
    raw[1] = raw[1].replace(b'"content"', b'"con' + BAD + b'tent"')
    response = await _run("ollama", b"\n".join(raw) + b"\n", stream=True)
    assert [e.reason for e in response.errors] == [MALFORMED], response
    assert _text(response) == "Hel"


async def test_an_empty_list_for_one_prompt_is_malformed():
    with pytest.raises(errors.MalformedResponseError):
        await _run("sglang", b"[]")


@pytest.mark.parametrize(
    ("transport", "body"),
    [
        ("google_genai", {"candidates": False, "modelVersion": "g", "usageMetadata": {"promptTokenCount": 1}}),
        ("google_genai", {"candidates": 0, "promptFeedback": {}}),
        ("anthropic_messages", {"id": "m", "type": "message", "role": "assistant", "content": "", "model": "c"}),
        ("openai_chat", {"id": "c", "object": "chat.completion", "model": "m", "choices": False}),
        ("vllm", {"id": "c", "object": "chat.completion", "model": "m", "choices": 0}),
    ],
)
async def test_an_answers_array_that_is_a_scalar_is_malformed_not_an_empty_success(transport, body):
    """`false`, `0` or `""` where the wire has an array of choices (candidates, content blocks) is a wrong shape:
    read as "no choices" it would be an empty success (found by the fuzz suite, `candidates: false`)."""
    with pytest.raises(errors.MalformedResponseError):
        await _run(transport, json.dumps(body).encode())


@pytest.mark.parametrize("candidate", [{}, {"": None}, {"content": None, "safetyRatings": []}])
async def test_a_gemini_candidate_with_neither_content_nor_a_finish_reason_is_malformed(candidate):
    """A whole answer's candidate says what it generated or why it stopped; one with neither lifted as an empty
    success (found by `make fuzz`: a candidate's members renamed to `""`)."""
    body = {"candidates": [candidate], "modelVersion": "g", "usageMetadata": {"promptTokenCount": 1}}
    with pytest.raises(errors.MalformedResponseError, match="candidate 0"):
        await _run("google_genai", json.dumps(body).encode())


async def test_a_gemini_candidate_blocked_without_content_is_still_an_answer():
    body = {"candidates": [{"finishReason": "SAFETY", "index": 0}], "modelVersion": "g"}
    response = await _run("google_genai", json.dumps(body).encode())
    assert response.choices[0].finish_reason


@pytest.mark.parametrize("chunks", [[b"{}"], [b'{"": null}', b'{"usageMetadata": {"promptTokenCount": 1}}']])
async def test_a_gemini_stream_with_no_candidate_and_no_prompt_feedback_is_not_an_empty_success(chunks):
    """Gemini streams have no end marker; one that never names a candidate nor says why (promptFeedback) ended
    before its answer (found by `make fuzz`: the only chunk's members renamed to `""`)."""
    response = await _run("google_genai", _sse(chunks), stream=True)
    assert [e.reason for e in response.errors] == [errors_pb2.ERROR_REASON_TRUNCATED_STREAM], response
    assert "no candidate" in response.errors[0].message
