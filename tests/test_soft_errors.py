"""The one soft-error policy: its precedence, and every transport following it the same way."""

from __future__ import annotations

import orjson
import pytest
from modelir import accumulate
from modelir.errors import soft as soft_errors
from modelir.transports.base import HttpResponse, RawEvent
from modelir.transports.google.genai import GoogleGenAI
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.openai.responses import OpenAIResponses
from modelir.v1 import errors_pb2, request_pb2, response_pb2

R = errors_pb2


def _json_request(**extra) -> request_pb2.Request:
    request = request_pb2.Request(model="m", **extra)
    request.conversation.messages.add(role=1).parts.add(text="hi")
    request.constraint.json_schema.schema_json = '{"type": "object"}'
    return request


def test_the_precedence_is_provider_malformed_cut_short_input_scores_logprobs_constraint():
    request = _json_request(
        logprob_options=request_pb2.LogprobOptions(), input_scoring=request_pb2.InputScoringOptions()
    )
    facts = soft_errors.Facts(
        provider_error=soft_errors.provider_error("boom"),
        malformed="a tool input is not JSON",
        cut_short="the stream ended early",
        missing_input_scores="none came back",
        missing_logprobs=[1, 0],
    )
    found = soft_errors.soft_errors(request, facts, [(1, response_pb2.FINISH_REASON_STOP, "{"), (0, 0, "not json")])
    assert [e.reason for e in found] == [
        R.ERROR_REASON_PROVIDER_UNAVAILABLE,
        R.ERROR_REASON_MALFORMED_RESPONSE,
        R.ERROR_REASON_TRUNCATED_STREAM,
        R.ERROR_REASON_MISSING_LOGPROBS,
        R.ERROR_REASON_MISSING_LOGPROBS,
        R.ERROR_REASON_MISSING_LOGPROBS,
        R.ERROR_REASON_CONSTRAINT_VIOLATED,
        R.ERROR_REASON_CONSTRAINT_VIOLATED,
    ]
    assert "choice 0" in found[4].message and "choice 1" in found[5].message
    assert found[2].retryable


def test_facts_that_were_not_asked_for_are_no_errors():
    request = request_pb2.Request(model="m")
    facts = soft_errors.Facts(missing_logprobs=[0], missing_input_scores="none")
    assert soft_errors.soft_errors(request, facts, [(0, 0, "free text")]) == []


def test_a_refusal_is_not_a_constraint_violation_and_labels_are_checked_exactly():
    request = request_pb2.Request(model="m")
    request.constraint.choice.labels.extend(["yes", "no"])
    outcomes = [(0, response_pb2.FINISH_REASON_REFUSAL, "I cannot"), (1, 0, "yes"), (2, 0, "yes ")]
    found = soft_errors.soft_errors(request, soft_errors.Facts(), outcomes)
    assert [e.reason for e in found] == [R.ERROR_REASON_CONSTRAINT_VIOLATED]


def _chat_body(choices) -> bytes:
    return orjson.dumps({"id": "c", "model": "m", "choices": choices})


def test_chat_unary_and_stream_agree_missing_logprobs_outranks_a_constraint_violation():
    request = _json_request(logprob_options=request_pb2.LogprobOptions())
    entry = {"token": "{", "logprob": -0.1, "bytes": [123], "top_logprobs": []}
    choices = [
        {"index": 0, "message": {"content": "{"}, "logprobs": {"content": [entry]}, "finish_reason": "length"},
        {"index": 1, "message": {"content": "{}"}, "logprobs": None, "finish_reason": "stop"},
    ]
    unary = OpenAIChat(provider_model="m").lift(request, HttpResponse(200, {}, _chat_body(choices)))
    chunks = [
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "{"}, "logprobs": {"content": [entry]}}]},
        {"id": "c", "choices": [{"index": 1, "delta": {"content": "{}"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
        {"id": "c", "choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]},
    ]
    lifter = OpenAIChat(provider_model="m").stream_lifter(request)
    events = [e for c in chunks for e in lifter.feed(RawEvent("", orjson.dumps(c)))]
    events += lifter.feed(RawEvent("", b"[DONE]")) + lifter.close()
    streamed = accumulate(events)
    assert unary.errors[0].reason == streamed.errors[0].reason == R.ERROR_REASON_MISSING_LOGPROBS
    assert "choice 1" in unary.errors[0].message and "choice 1" in streamed.errors[0].message


def test_gemini_checks_its_json_schema_constraint_like_every_transport():
    body = {"candidates": [{"content": {"parts": [{"text": '{"a": '}]}, "finishReason": "MAX_TOKENS"}]}
    lifted = GoogleGenAI(provider_model="g").lift(_json_request(), HttpResponse(200, {}, orjson.dumps(body)))
    assert lifted.errors[0].reason == R.ERROR_REASON_CONSTRAINT_VIOLATED
    assert lifted.choices[0].message.parts[0].text == '{"a": '  # the partial output is kept


def test_responses_checks_the_constraint_whatever_the_finish_reason():
    body = {
        "id": "r",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "message", "id": "m1", "content": [{"type": "output_text", "text": '{"a"'}]}],
    }
    lifted = OpenAIResponses(provider_model="o").lift(_json_request(), HttpResponse(200, {}, orjson.dumps(body)))
    assert lifted.choices[0].finish_reason == response_pb2.FINISH_REASON_LENGTH
    assert lifted.errors[0].reason == R.ERROR_REASON_CONSTRAINT_VIOLATED


def _constrained(**constraint) -> request_pb2.Request:
    request = request_pb2.Request(model="m")
    request.conversation.messages.add(role=1).parts.add(text="hi")
    for key, value in constraint.items():
        if key == "regex":
            request.constraint.regex = value
        else:
            request.constraint.json_schema.schema_json = value
    return request


def _answer(text: str) -> response_pb2.Response:
    response = response_pb2.Response()
    response.choices.add(index=0).message.parts.add(text=text)
    return response


@pytest.mark.parametrize(
    ("constraint", "text", "broken"),
    [
        ({"schema": '{"type":"object","required":["city"]}'}, '{"town": "Oslo"}', "'city' is a required property"),
        ({"schema": '{"type":"object","properties":{"n":{"type":"integer"}}}'}, '{"n": "3"}', "at n:"),
        ({"schema": '{"type":"object","required":["city"]}'}, '{"city": "Oslo"}', None),
        ({"regex": "[0-9]{3}"}, "1234", "does not match the requested regex"),
        ({"regex": "[0-9]{3}"}, "123", None),
        ({"regex": "(?<unknown dialect"}, "anything", None),  # a regex Python cannot read is left to the engine
    ],
)
def test_constraint_outcomes_are_checked_for_real(constraint, text, broken):
    request = _constrained(**constraint)
    response = _answer(text)
    soft_errors.settle(request, response, soft_errors.Facts())
    if broken is None:
        assert not response.errors
    else:
        (error,) = response.errors
        assert error.reason == R.ERROR_REASON_CONSTRAINT_VIOLATED and broken in error.message
        assert error.choice_index == 0
