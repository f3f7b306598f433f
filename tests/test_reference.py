"""The reference model honours everything its manifest claims, for real, and streams what it answers."""

from __future__ import annotations

import math
import time

import jsonschema
import numpy as np
import orjson
import pytest
from modelir import ForeignArtifactError, Model, ReferenceModel, accumulate, build_request, message
from modelir.logprobs import build as lp
from modelir.transports.reference import logprob_table
from modelir.v1 import content_pb2, errors_pb2, request_pb2, response_pb2

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["a", "b", 3]},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
WEATHER = request_pb2.Tool(
    function=request_pb2.FunctionTool(
        name="get_weather",
        description="Weather for a city.",
        parameters_json_schema=orjson.dumps(
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        ).decode(),
    )
)


def _text(response: response_pb2.Response, choice: int = 0) -> str:
    return "".join(p.text for p in response.choices[choice].message.parts if p.WhichOneof("content") == "text")


def _reasoning_request(include_thoughts: bool) -> request_pb2.Request:
    request = build_request("reference", messages=[("user", "think, then call get_weather")], seed=3)
    request.tools.append(WEATHER)
    request.reasoning_controls.effort = request_pb2.REASONING_EFFORT_LOW
    request.reasoning_controls.include_thoughts = include_thoughts
    request.reasoning_controls.summary = request_pb2.REASONING_SUMMARY_AUTO
    return request


# Every capability the reference claims, as one request each: used for determinism and stream equality.
CAPABILITY_REQUESTS = {
    "completion": build_request("reference", prompt="Once upon", max_output_tokens=40, seed=1),
    "chat_system": build_request("reference", messages=[("system", "Be brief."), ("user", "Hi")], seed=2),
    "token_input": build_request("reference", token_ids=[256, 72, 105], max_output_tokens=30),
    "logprobs_top_k": build_request("reference", prompt="abc", max_output_tokens=50, top_logprobs=5),
    "sampling_params": build_request(
        "reference", prompt="x", temperature=0.7, top_p=0.9, top_k=40, max_output_tokens=64, seed=9
    ),
    "multiple_choices": build_request("reference", prompt="x", n=3, max_output_tokens=20, logprobs=True),
    "stop": build_request("reference", prompt="x", stop=["e"], max_output_tokens=200, seed=4, logprobs=True),
    "choice": build_request("reference", messages=[("user", "ok?")], choices=["yes", "no", "peut-être"]),
    "json_schema": build_request("reference", messages=[("user", "j")], json_schema=orjson.dumps(SCHEMA).decode()),
    "prefill": build_request("reference", messages=[("user", "count")], prefill="1, 2,", max_output_tokens=12),
    "reasoning_tools": _reasoning_request(include_thoughts=True),
    "reasoning_hidden": _reasoning_request(include_thoughts=False),
}
_scoring = build_request("reference", prompt="The cat sat on ", max_output_tokens=0)
_scoring.input_scoring.continuations.add(text="the mat ☃")
_scoring.input_scoring.top_logprob_count = 3
CAPABILITY_REQUESTS["input_scoring"] = _scoring
_stop_ids = build_request("reference", prompt="x", max_output_tokens=300, seed=5)
_stop_ids.sampling.stop_token_ids.extend([ord("q")])
CAPABILITY_REQUESTS["stop_token_ids"] = _stop_ids
_budget = build_request("reference", messages=[("user", "x")], max_output_tokens=80)
_budget.reasoning_controls.budget_tokens = 20
_budget.reasoning_controls.include_thoughts = True
CAPABILITY_REQUESTS["reasoning_budget"] = _budget
_json_object = build_request("reference", messages=[("user", "j")], max_output_tokens=120)
_json_object.constraint.json_object.SetInParent()
CAPABILITY_REQUESTS["json_object"] = _json_object
_biased = build_request("reference", prompt="x", max_output_tokens=40, seed=6)
_biased.sampling.logit_bias[ord("z")] = 8.0
CAPABILITY_REQUESTS["logit_bias"] = _biased
_min_tokens = build_request("reference", prompt="x.", max_output_tokens=60, seed=8, stop_token_ids=[ord("e")])
_min_tokens.sampling.min_output_tokens = 30
CAPABILITY_REQUESTS["min_output_tokens"] = _min_tokens
_token_turn = build_request("reference", messages=[("user", "hi"), ("assistant", "ho"), ("user", "again")])
_token_turn.conversation.messages[1].token_ids.extend([104, 111, 257])
CAPABILITY_REQUESTS["multi_turn_token_input"] = _token_turn
_labels = build_request("reference", messages=[("user", "Is it?")], max_output_tokens=0)
for _label in ("yes", "no", "perhaps"):
    _labels.input_scoring.continuations.add(text=_label)
CAPABILITY_REQUESTS["continuations"] = _labels


def _without_timing(response: response_pb2.Response) -> response_pb2.Response:
    copy = response_pb2.Response()
    copy.CopyFrom(response)
    copy.ClearField("timing")
    return copy


@pytest.mark.parametrize("name", sorted(CAPABILITY_REQUESTS))
async def test_stream_accumulates_to_the_unary_response(reference, name):
    request = CAPABILITY_REQUESTS[name]
    unary = await reference.arun(request)
    events = [e async for e in reference.astream(request)]
    assert events[0].WhichOneof("event") == "start" and events[-1].WhichOneof("event") == "end"
    assert sum(e.WhichOneof("event") == "delta" for e in events) >= 1
    assert _without_timing(accumulate(events)) == _without_timing(unary)


@pytest.mark.parametrize("name", sorted(CAPABILITY_REQUESTS))
async def test_outputs_are_reproducible(name):
    request = CAPABILITY_REQUESTS[name]
    first = await Model(ReferenceModel()).arun(request)
    second = await Model(ReferenceModel()).arun(request)
    assert _without_timing(first) == _without_timing(second)


async def test_seed_changes_the_sample(reference):
    a = await reference.agenerate("x", seed=1, max_output_tokens=30)
    b = await reference.agenerate("x", seed=2, max_output_tokens=30)
    assert _text(a) != _text(b)


async def test_greedy_is_the_argmax_path(reference):
    response = await reference.agenerate("ab", temperature=0, max_output_tokens=10, logprobs=True, top_logprobs=1)
    logprobs = response.choices[0].logprobs
    assert list(logprobs.token_ids) == list(logprobs.top_token_ids)


async def test_logprobs_are_columnar_and_consistent(reference):
    response = await reference.agenerate("Hello", max_output_tokens=100, top_logprobs=20, seed=7)
    choice = response.choices[0]
    logprobs = choice.logprobs
    n = len(logprobs.token_ids)
    assert n == len(logprobs.token_logprobs) == len(logprobs.tokens) == len(logprobs.token_byte_offsets) > 0
    assert lp.text_of(logprobs) == _text(response)
    assert list(logprobs.top_counts) == [20] * n
    top = np.array(logprobs.top_logprobs, dtype=np.float64).reshape(n, 20)
    assert np.all(np.exp(top).sum(axis=1) <= 1 + 1e-6)
    assert np.all(np.diff(top, axis=1) <= 1e-7)  # most likely first
    table = logprob_table()
    ids = [ord("o"), *logprobs.token_ids[:-1]]
    assert np.allclose(logprobs.token_logprobs, table[ids, list(logprobs.token_ids)], atol=1e-6)


async def test_choice_constraint_output_is_a_label(reference):
    labels = ["yes", "no", "peut-être"]
    for seed in range(20):
        response = await reference.achat([("user", "?")], choices=labels, seed=seed)
        assert _text(response) in labels
        assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_STOP


async def test_json_schema_output_validates(reference):
    for seed in range(25):
        response = await reference.achat([("user", "j")], json_schema=orjson.dumps(SCHEMA).decode(), seed=seed)
        jsonschema.validate(orjson.loads(_text(response)), SCHEMA)


async def test_required_tool_call_is_well_formed(reference):
    request = build_request("reference", messages=[("user", "weather please")])
    request.tools.append(WEATHER)
    request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_REQUIRED
    response = await reference.arun(request)
    (part,) = response.choices[0].message.parts
    assert part.tool_call.name == "get_weather" and part.tool_call.id.startswith("call_")
    jsonschema.validate(
        orjson.loads(part.tool_call.arguments_json), orjson.loads(WEATHER.function.parameters_json_schema)
    )
    assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_TOOL_CALLS


async def test_tool_choice_none_answers_in_text(reference):
    request = build_request("reference", messages=[("user", "get_weather")], max_output_tokens=10)
    request.tools.append(WEATHER)
    request.tool_choice.mode = request_pb2.TOOL_CHOICE_MODE_NONE
    response = await reference.arun(request)
    assert response.choices[0].message.parts[0].WhichOneof("content") == "text"


async def _second_turn(model: Model, first: response_pb2.Response, request: request_pb2.Request):
    follow = request_pb2.Request()
    follow.CopyFrom(request)
    follow.conversation.messages.append(first.choices[0].message)
    call = first.choices[0].message.parts[-1].tool_call
    result = follow.conversation.messages.add(role=content_pb2.ROLE_TOOL)
    result.parts.add().tool_result.CopyFrom(
        content_pb2.ToolResult(tool_call_id=call.id, name=call.name, content=[content_pb2.Part(text="sunny")])
    )
    follow.ClearField("tool_choice")
    return await model.arun(follow)


@pytest.mark.parametrize("include_thoughts", [True, False])
async def test_reasoning_replays_to_its_issuer(reference, include_thoughts):
    request = _reasoning_request(include_thoughts)
    first = await reference.arun(request)
    reasoning, call = first.choices[0].message.parts
    assert reasoning.WhichOneof("content") == "reasoning" and call.WhichOneof("content") == "tool_call"
    assert bool(reasoning.reasoning.text) is include_thoughts
    (artifact,) = reasoning.artifacts
    assert artifact.issuer.transport == "reference" and artifact.issuer.model == "modelir-reference-1"
    assert first.usage.reasoning_token_count > 0
    second = await _second_turn(reference, first, request)
    assert _text(second)


async def test_tampered_reasoning_is_rejected(reference):
    request = _reasoning_request(include_thoughts=True)
    first = await reference.arun(request)
    first.choices[0].message.parts[0].reasoning.text += "!"
    with pytest.raises(ForeignArtifactError, match="signature check"):
        await _second_turn(reference, first, request)


async def test_foreign_artifacts_rejected_by_default_and_dropped_on_request(reference):
    request = _reasoning_request(include_thoughts=True)
    first = await reference.arun(request)
    other = Model(ReferenceModel(provider_model="another-model"))
    with pytest.raises(ForeignArtifactError, match="another issuer"):
        await _second_turn(other, first, request)
    request.foreign_artifact_policy = request_pb2.FOREIGN_ARTIFACT_POLICY_DROP
    second = await _second_turn(other, first, request)
    assert [w.code for w in second.warnings] == ["foreign_reasoning_dropped"]


async def test_input_scoring_of_a_continuation(reference):
    score = await reference.ascore("The cat sat on ", "the mat ☃")
    assert score.token_count == score.byte_count == len("the mat ☃".encode())
    assert score.char_count == len("the mat ☃")
    assert score.scores.unscored_token_count == 0
    assert score.scores.span_start_byte == len(b"The cat sat on ")
    assert math.isclose(score.logprob_sum, sum(score.scores.tokens.token_logprobs), rel_tol=1e-5)
    assert score.bits_per_byte == pytest.approx(-score.logprob_sum / math.log(2) / score.byte_count)
    assert lp.text_of(score.scores.tokens) == "the mat ☃"


async def test_whole_prompt_scoring_never_scores_the_first_token(reference):
    request = build_request("reference", token_ids=[72, 105, 33], max_output_tokens=0)
    request.input_scoring.SetInParent()
    response = await reference.arun(request)
    (scores,) = response.input_scores
    assert scores.unscored_token_count == 1
    assert list(scores.tokens.token_ids) == [105, 33]
    assert scores.scored_byte_count == 2 and scores.span_start_byte == 1


async def test_tokenize_with_context(reference):
    tokens = await reference.atokenize("é!", context="caf")
    assert list(tokens.token_ids) == [0xC3, 0xA9, 0x21]
    assert tokens.token_bytes.decode() == "é!"
    assert not tokens.straddles_context
    with_bos = await reference.atokenize("a", add_special_tokens=True)
    assert list(with_bos.token_ids) == [256, 97]


async def test_stop_sequence_is_cut_and_reported(reference):
    response = await reference.arun(CAPABILITY_REQUESTS["stop"])
    choice = response.choices[0]
    assert choice.finish_reason == response_pb2.FINISH_REASON_STOP_SEQUENCE and choice.stop_sequence == "e"
    assert "e" not in _text(response)
    assert lp.text_of(choice.logprobs) == _text(response)


async def test_prefill_is_continued_not_repeated(reference):
    response = await reference.arun(CAPABILITY_REQUESTS["prefill"])
    assert not _text(response).startswith("1, 2,")
    assert response.usage.output_token_count == 12


async def test_sync_twins_work_inside_and_outside_loops():
    model = Model(ReferenceModel())
    assert model.generate("x", max_output_tokens=5).choices[0].message.parts[0].text
    assert len(list(model.stream(build_request("", messages=[message("user", "x")])))) >= 3


async def test_a_json_answer_cut_short_by_its_length_limit_is_a_soft_error_with_the_partial_output():
    request = build_request("reference", prompt="x", max_output_tokens=4)
    request.constraint.json_schema.schema_json = orjson.dumps(SCHEMA).decode()
    response = await ReferenceModel().run(request)
    assert response.choices[0].finish_reason == response_pb2.FINISH_REASON_LENGTH
    assert _text(response)  # the partial output is kept
    [error] = response.errors
    assert (error.reason, error.choice_index) == (errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED, 0)
    streamed = accumulate([event async for event in ReferenceModel().stream(request)])
    assert list(streamed.errors) == [error]


async def test_delay_seconds_slows_the_answer_and_every_stream_event():
    slow = ReferenceModel(delay_seconds=0.05)
    request = build_request("reference", prompt="x", max_output_tokens=2)
    started = time.monotonic()
    await slow.run(request)
    assert time.monotonic() - started >= 0.05
    started = time.monotonic()
    events = [event async for event in slow.stream(request)]
    assert time.monotonic() - started >= 0.05 * len(events)
    with pytest.raises(ValueError):
        ReferenceModel(delay_seconds=-1)
