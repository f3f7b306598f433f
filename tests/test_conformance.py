"""The conformance suite runs clean, catches drift, and its fixtures fit the official SDKs' types."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest
from modelir import conformance

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
    fixture["expected_response"]["choices"][0]["logprobs"]["logprobs"][0] = -0.75
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
        if event["data"] != "[DONE]":
            ChatCompletionChunk.model_validate_json(event["data"])


def test_openai_chat_provider_option_keys_are_real_parameters():
    from modelir.transports.openai_chat import PROVIDER_OPTION_KEYS
    from openai.types.chat import completion_create_params

    assert set(PROVIDER_OPTION_KEYS) <= completion_create_params.CompletionCreateParamsNonStreaming.__optional_keys__
