"""The conformance suite runs clean, catches drift, and its fixtures fit the official SDKs' types."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from modelir.conformance import runner as conformance

FIXTURES = conformance.DEFAULT_FIXTURES


def test_every_fixture_passes_with_full_coverage():
    report = conformance.run(FIXTURES)
    failures = {
        name: [c for c in result["cases"] if not c["passed"]] + result["coverage"]
        for name, result in report["transports"].items()
        if not result["passed"]
    }
    assert report["passed"], failures
    assert "openai_chat" in report["transports"]


def test_the_runner_catches_a_wrong_expectation(tmp_path):
    source = FIXTURES / "openai_chat" / "logprobs_top_k.json"
    fixture = json.loads(source.read_text())
    fixture["expected_response"]["choices"][0]["logprobs"]["tokenLogprobs"][0] = -0.75
    fixture["expected_http_request"]["body"]["top_logprobs"] = 3
    (tmp_path / "openai_chat").mkdir()
    (tmp_path / "openai_chat" / "drifted.json").write_text(json.dumps(fixture))
    report = conformance.run(tmp_path, "openai_chat")
    (case,) = report["transports"]["openai_chat"]["cases"]
    assert not case["passed"]
    assert any("lowered body differs" in p for p in case["problems"])
    assert any("lifted response differs" in p for p in case["problems"])
    assert report["transports"]["openai_chat"]["coverage"]  # one fixture proves little


def _fixtures(transport: str):
    return sorted((FIXTURES / transport).glob("*.json"))


@pytest.mark.parametrize("path", _fixtures("openai_chat"), ids=lambda p: p.stem)
def test_openai_chat_fixtures_fit_the_openai_sdk(path: Path):
    from openai.types.chat import ChatCompletion, ChatCompletionChunk, completion_create_params

    fixture = json.loads(path.read_text())
    if fixture.get("operation") == "embed":
        _fits_openai_embeddings(fixture)
        return
    if "expected_http_request" in fixture:
        body = fixture["expected_http_request"]["body"]
        params = (
            completion_create_params.CompletionCreateParamsStreaming
            if body.get("stream")
            else completion_create_params.CompletionCreateParamsNonStreaming
        )
        pydantic.TypeAdapter(params).validate_python(body, strict=False)
        # The SDK's TypedDicts ignore unknown keys; a misspelled parameter must still fail here.
        assert set(body) <= params.__required_keys__ | params.__optional_keys__, set(body) - params.__optional_keys__
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        ChatCompletion.model_validate(answer["body"])
    for event in fixture.get("stream_events", []):
        if event["data"] == "[DONE]":
            continue
        chunk = json.loads(event["data"])
        if "choices" not in chunk and "error" in chunk:
            continue  # an error alone in a chunk (Groq): the SDK models no error chunk; its shape is documented
        for choice in chunk.get("choices") or ():
            if choice.get("finish_reason") == "error":  # OpenRouter's documented mid-stream failure
                choice["finish_reason"] = "stop"
        ChatCompletionChunk.model_validate(chunk)


def test_openai_chat_provider_option_keys_are_real_parameters():
    from modelir.transports.openai.chat import PROVIDER_OPTION_KEYS
    from openai.types.chat import completion_create_params

    assert set(PROVIDER_OPTION_KEYS) <= completion_create_params.CompletionCreateParamsNonStreaming.__optional_keys__


# vLLM's extensions beyond OpenAI's request types (shared/wire/NOTES.md section 7); everything else must fit them.
VLLM_EXTENSIONS = {
    "top_k",
    "min_p",
    "repetition_penalty",
    "stop_token_ids",
    "structured_outputs",
    "return_tokens_as_token_ids",
    "return_token_ids",
    "prompt_logprobs",
    "include_reasoning",
    "min_tokens",
    "continue_final_message",
    "add_generation_prompt",
}


@pytest.mark.parametrize(
    "path", _fixtures("openai_completions") + _fixtures("vllm"), ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_completions_and_vllm_fixtures_fit_the_openai_sdk(path: Path):
    from openai.types import Completion, completion_create_params
    from openai.types.chat import ChatCompletion, ChatCompletionChunk
    from openai.types.chat import completion_create_params as chat_params

    fixture = json.loads(path.read_text())
    if fixture.get("operation") == "embed":
        _fits_openai_embeddings(fixture, extensions=VLLM_EMBED_EXTENSIONS)
        return
    requests = fixture.get("expected_http_requests") or [fixture.get("expected_http_request")]
    for native in filter(None, requests):
        if native["path"].endswith("/tokenize"):
            continue
        body = {k: v for k, v in native["body"].items() if k not in VLLM_EXTENSIONS}
        chat = native["path"].endswith("/chat/completions")
        module = chat_params if chat else completion_create_params
        params = (
            module.CompletionCreateParamsStreaming if body.get("stream") else module.CompletionCreateParamsNonStreaming
        )
        pydantic.TypeAdapter(params).validate_python(body)
        assert set(body) <= params.__required_keys__ | params.__optional_keys__
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        is_chat = answer["body"].get("object") == "chat.completion"
        (ChatCompletion if is_chat else Completion).model_validate(_sdk_nulls(answer["body"]))
    for event in fixture.get("stream_events", []):
        if event["data"] != "[DONE]":
            data = json.loads(event["data"])
            if data.get("object") == "chat.completion.chunk":
                ChatCompletionChunk.model_validate(data)
            else:
                Completion.model_validate(_sdk_nulls(data))


# vLLM's embedding extensions beyond OpenAI's `EmbeddingCreateParams` (vllm/embed.py says where each is documented).
VLLM_EMBED_EXTENSIONS = {
    "embed_dtype",
    "endianness",
    "use_activation",
    "truncate_prompt_tokens",
    "truncation_side",
    "add_special_tokens",
}


def _fits_openai_embeddings(fixture: dict, extensions: frozenset[str] | set[str] = frozenset()) -> None:
    """An embed fixture's request against the SDK's `EmbeddingCreateParams`, its answer against
    `CreateEmbeddingResponse` (a base64 vector decoded first, as the SDK does before it builds the type)."""
    from modelir.transports.embedding import base64_floats
    from openai.types import CreateEmbeddingResponse, embedding_create_params

    if "expected_http_request" in fixture:
        body = {k: v for k, v in fixture["expected_http_request"]["body"].items() if k not in extensions}
        params = embedding_create_params.EmbeddingCreateParams
        pydantic.TypeAdapter(params).validate_python(body)
        assert set(body) <= params.__required_keys__ | params.__optional_keys__, set(body) - params.__optional_keys__
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        decoded = json.loads(json.dumps(answer["body"]))
        for item in decoded["data"]:
            if isinstance(item["embedding"], str):
                item["embedding"] = list(base64_floats(item["embedding"]))
        CreateEmbeddingResponse.model_validate(decoded)


def _fits_gemini_embeddings(fixture: dict) -> None:
    from google.genai import types

    if "expected_http_request" in fixture:
        for entry in fixture["expected_http_request"]["body"]["requests"]:
            entry = dict(entry)
            types.Content.model_validate(entry.pop("content"))
            assert set(entry) <= {"model", "taskType", "title", "outputDimensionality"}, entry
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        types.EmbedContentResponse.model_validate(answer["body"])


def _sdk_nulls(body: dict) -> dict:
    """Fill the nulls the real wire sends but the SDK's `Completion` type does not model.

    Completion stream chunks carry `finish_reason: null` until the last one (the recorded gpt-3.5-turbo-instruct
    stream in shared/wire), and echo puts `null` at the first prompt position of `token_logprobs` and
    `top_logprobs` (NOTES.md section 2). Everything else is validated as it is.
    """
    body = json.loads(json.dumps(body))
    for choice in body.get("choices") or []:
        if choice.get("finish_reason") is None:
            choice["finish_reason"] = "stop"
        logprobs = choice.get("logprobs") or {}
        if logprobs.get("token_logprobs"):
            logprobs["token_logprobs"] = [0.0 if v is None else v for v in logprobs["token_logprobs"]]
        if logprobs.get("top_logprobs"):
            logprobs["top_logprobs"] = [{} if v is None else v for v in logprobs["top_logprobs"]]
    return body


@pytest.mark.parametrize("path", _fixtures("openai_responses"), ids=lambda p: p.stem)
def test_openai_responses_fixtures_fit_the_openai_sdk(path: Path):
    from openai.types.responses import Response, ResponseStreamEvent, response_create_params

    fixture = json.loads(path.read_text())
    if fixture.get("operation") == "embed":
        _fits_openai_embeddings(fixture)
        return
    if "expected_http_request" in fixture:
        body = fixture["expected_http_request"]["body"]
        params = (
            response_create_params.ResponseCreateParamsStreaming
            if body.get("stream")
            else response_create_params.ResponseCreateParamsNonStreaming
        )
        pydantic.TypeAdapter(params).validate_python(body)
        assert set(body) <= params.__required_keys__ | params.__optional_keys__
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        Response.model_validate(answer["body"])
    for event in fixture.get("stream_events", []):
        if event["data"] == "[DONE]":
            continue  # a compatible server's end marker (OpenRouter), after the final event
        data = json.loads(event["data"])
        error = (data.get("response") or {}).get("error")
        if error and error.get("code") == "insufficient_quota":
            # The real wire (shared/wire/openai_responses/vercel__stream_error_insufficient_quota) sends this code,
            # which the SDK's closed list of response error codes lacks; everything else is checked.
            data = {**data, "response": {**data["response"], "error": {**error, "code": "rate_limit_exceeded"}}}
        pydantic.TypeAdapter(ResponseStreamEvent).validate_python(data)


@pytest.mark.parametrize("path", _fixtures("anthropic_messages"), ids=lambda p: p.stem)
def test_anthropic_fixtures_fit_the_anthropic_sdk(path: Path):
    from anthropic.types import Message, RawMessageStreamEvent, message_create_params

    fixture = json.loads(path.read_text())
    if "expected_http_request" in fixture:
        body = fixture["expected_http_request"]["body"]
        params = (
            message_create_params.MessageCreateParamsStreaming
            if body.get("stream")
            else message_create_params.MessageCreateParamsNonStreaming
        )
        pydantic.TypeAdapter(params).validate_python(body)
        assert set(body) <= params.__required_keys__ | params.__optional_keys__
    if '"compaction' in path.read_text():  # server-side compaction is a beta: its blocks are the beta SDK's types
        from anthropic.types.beta import BetaMessage as Message
        from anthropic.types.beta import BetaRawMessageStreamEvent as RawMessageStreamEvent
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        Message.model_validate(answer["body"])
    for event in fixture.get("stream_events", []):
        data = json.loads(event["data"])
        if data["type"] not in ("ping", "error"):  # the SDK's union leaves these out; their shapes are documented
            pydantic.TypeAdapter(RawMessageStreamEvent).validate_python(data)


@pytest.mark.parametrize("path", _fixtures("google_genai"), ids=lambda p: p.stem)
def test_gemini_fixtures_fit_the_google_genai_sdk(path: Path):
    from google.genai import types

    fixture = json.loads(path.read_text())
    if fixture.get("operation") == "embed":
        _fits_gemini_embeddings(fixture)
        return
    if "expected_http_request" in fixture:
        body = dict(fixture["expected_http_request"]["body"])
        for content in body.pop("contents"):
            types.Content.model_validate(content)  # the SDK forbids unknown keys: a misspelling fails here
        if "systemInstruction" in body:
            types.Content.model_validate(body.pop("systemInstruction"))
        if "generationConfig" in body:
            types.GenerationConfig.model_validate(body.pop("generationConfig"))
        for tool in body.pop("tools", []):
            types.Tool.model_validate(tool)
        if "toolConfig" in body:
            types.ToolConfig.model_validate(body.pop("toolConfig"))
        assert set(body) <= {"safetySettings", "cachedContent", "labels"}
    answer = fixture.get("http_response", {})
    if answer.get("status", 200) == 200 and "body" in answer:
        types.GenerateContentResponse.model_validate(answer["body"])
    for event in fixture.get("stream_events", []):
        types.GenerateContentResponse.model_validate_json(event["data"])
