"""SDK sugar for the v1 fields: reading refusals, citations, constrained labels and sampled tokens (numpy ids and
part masks for RL); writing logit bias, a minimum output length, a JSON-object constraint, provider tools, allowed
tools and a cache breakpoint."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
from modelir import Model, ReferenceModel, build_request
from modelir.reading.view import view
from modelir.v1 import content_pb2, request_pb2, response_pb2
from modelir.writing import ArgumentError


async def test_token_masks_split_reasoning_from_the_answer():
    model = Model(ReferenceModel(), name="reference")
    request = build_request("reference", messages=[("user", "call get_weather")], reasoning="low", seed=3)
    request.reasoning_controls.include_thoughts = True
    request.tools.add(function=request_pb2.FunctionTool(name="get_weather", parameters_json_schema='{"type":"object"}'))
    read = view(await model.arun(request))
    ids = read.sampled_token_ids
    assert ids.dtype == np.int64 and len(ids) == read.first.message.output_token_count
    reasoning, answer = read.token_mask("reasoning"), read.token_mask("tool_call")
    assert reasoning.dtype == bool and not np.any(reasoning & answer) and np.all(reasoning | answer)
    assert bytes(ids[answer].astype(np.uint8)).decode() == read.tool_calls[0].arguments_json
    assert bytes(ids[reasoning].astype(np.uint8)).decode() == f"<think>{read.reasoning}</think>"


def test_token_mask_needs_attributed_tokens_and_marks_trimmed_tokens_false():
    choice = response_pb2.Choice()
    choice.message.parts.add(text="ab")
    choice.sampled_tokens.token_ids.extend([97, 98, 257])
    assert view(response_pb2.Response(choices=[choice])).first.sampled_part_indexes is None
    with pytest.raises(ValueError, match="did not say"):
        view(response_pb2.Response(choices=[choice])).token_mask("text")
    choice.sampled_tokens.part_indexes.extend([0, 0, -1])
    assert view(response_pb2.Response(choices=[choice])).token_mask("text").tolist() == [True, True, False]


def test_refusal_citations_and_the_constrained_label():
    choice = response_pb2.Choice(constrained_label="yes")
    choice.message.parts.add(refusal="I cannot help with that.")
    cited = choice.message.parts.add(text="See there.")
    cited.citations.add(url="https://example.com")
    read = view(response_pb2.Response(choices=[choice]))
    assert read.refusal == "I cannot help with that." and read.text == "See there."
    assert [c.url for c in read.citations] == ["https://example.com"]
    assert read.constrained_label == "yes"


def test_writing_the_v1_keywords():
    request = build_request(
        "m",
        messages=[("system", "long document"), ("user", "q")],
        logit_bias={50256: -100, 13: 2.5},
        min_output_tokens=4,
        json_object=True,
        provider_tools=[{"transport": "anthropic_messages", "type": "web_search_20250305", "config": {"max_uses": 2}}],
        allowed_tools=["web_search"],
        tool_choice="required",
        cache_breakpoint=datetime.timedelta(hours=1),
    )
    assert dict(request.sampling.logit_bias) == {50256: -100.0, 13: 2.5}
    assert request.sampling.min_output_tokens == 4
    assert request.constraint.WhichOneof("kind") == "json_object"
    (tool,) = request.tools
    assert (tool.provider.type, tool.provider.config_json) == ("web_search_20250305", '{"max_uses":2}')
    allowed = request.tool_choice.allowed_tools
    assert list(allowed.tool_names) == ["web_search"] and allowed.mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED
    last = request.conversation.messages[-1].parts[-1]
    assert last.HasField("cache_breakpoint") and last.cache_breakpoint.ttl.seconds == 3600
    default = build_request("m", messages=[("user", "q")], cache_breakpoint=True)
    part: content_pb2.Part = default.conversation.messages[-1].parts[-1]
    assert part.HasField("cache_breakpoint") and not part.cache_breakpoint.HasField("ttl")


@pytest.mark.parametrize(
    ("keywords", "field"),
    [
        ({"logit_bias": {"a": 1}}, "logit_bias"),
        ({"min_output_tokens": -1}, "min_output_tokens"),
        ({"provider_tools": [{"type": "x"}]}, "provider_tools"),
        ({"provider_tools": [{"transport": "t", "type": "x", "extra": 1}]}, "provider_tools"),
        ({"allowed_tools": "one"}, "allowed_tools"),
        ({"allowed_tools": ["a"], "tool_choice": "none"}, "tool_choice"),
        ({"cache_breakpoint": -5}, "cache_breakpoint"),
        ({"json_object": True, "choices": ["a"]}, "json_object"),
    ],
)
def test_wrong_v1_keywords_name_their_field(keywords, field):
    with pytest.raises(ArgumentError) as caught:
        build_request("m", messages=[("user", "q")], **keywords)
    assert field in str(caught.value)


def test_a_cache_breakpoint_needs_messages():
    with pytest.raises(ArgumentError, match="cache_breakpoint"):
        build_request("m", prompt="q", cache_breakpoint=True)
