"""The SDK layer's reading (`view`, numpy logprobs, summaries) and writing (tools, enum names, images, tool results)."""

from __future__ import annotations

import enum
import json
from typing import Literal

import modelir
import numpy as np
import orjson
import pydantic
import pytest
from modelir import build_request, view
from modelir.reading.view import delta_text, logprob_arrays
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import content_pb2, logprobs_pb2, request_pb2, response_pb2, stream_pb2
from modelir.writing import ArgumentError, image, tool, tool_choice, tool_result
from modelir.writing.names import enum_name, enum_value, short_names

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


# ---- reading ----------------------------------------------------------------------------------------------


def test_view_reads_text_tool_calls_reasoning_and_usage(reference):
    def get_weather(city: str) -> str:
        """Weather."""

    response = reference.chat(
        [("user", "weather?")], tools=[get_weather], tool_choice="required", reasoning="low", max_output_tokens=300
    )
    reply = view(response)
    assert reply.message is response
    assert reply.finish_reason == "tool_calls"
    assert [c.name for c in reply.tool_calls] == ["get_weather"]
    assert set(reply.arguments()) == {"city"}
    assert reply.artifacts and reply.artifacts[0].issuer.transport == "reference"
    assert reply.usage.input == response.usage.input_token_count
    assert reply.usage.total == response.usage.input_token_count + response.usage.output_token_count
    assert reply.usage.cache_read is None  # not reported is None, never 0
    assert reply.assistant_message == response.choices[0].message

    text = view(reference.generate("Hello", max_output_tokens=12))
    assert (
        text.text == response_pb2.Response.FromString(text.message.SerializeToString()).choices[0].message.parts[0].text
    )
    assert text.text and text.reasoning == "" and text.tool_calls == []


def test_logprobs_come_out_as_numpy_columns(reference):
    response = reference.generate("Hello", max_output_tokens=20, top_logprobs=3, require_token_ids=True)
    arrays = view(response).logprobs
    source = response.choices[0].logprobs
    assert arrays.ids.dtype == np.int32 and arrays.ids.tolist() == list(source.token_ids)
    assert arrays.logprobs.dtype == np.float32 and np.array_equal(
        arrays.logprobs, np.array(source.token_logprobs, np.float32)
    )
    assert arrays.top_logprobs.shape == arrays.top_ids.shape == (20, 3)
    assert arrays.top_mask.all()
    assert arrays.top_tokens[0] == list(source.top_tokens[:3])
    assert arrays.text == view(response).text
    source.token_logprobs[0] = 0.0  # the arrays are a copy, safe to keep
    assert arrays.logprobs[0] != 0.0


def test_top_k_is_dense_and_padded_where_a_provider_returned_fewer():
    columns = logprobs_pb2.TokenLogprobs(
        token_logprobs=[-0.1, -0.2, -0.3],
        tokens=["a", "b", "c"],
        top_counts=[2, 0, 3],
        top_logprobs=[-0.1, -2.0, -0.3, -1.0, -4.0],
        top_token_ids=[1, 2, 3, 4, 5],
        top_tokens=["a", "x", "c", "y", "z"],
    )
    arrays = logprob_arrays(columns)
    assert arrays.ids is None  # absent, not zeros
    assert arrays.top_logprobs.shape == (3, 3)
    assert arrays.top_logprobs[0].tolist() == [pytest.approx(-0.1), -2.0, -np.inf]
    assert arrays.top_logprobs[1].tolist() == [-np.inf] * 3
    assert arrays.top_ids.tolist() == [[1, 2, -1], [-1, -1, -1], [3, 4, 5]]
    assert arrays.top_mask.sum(axis=1).tolist() == [2, 0, 3]
    assert arrays.top_tokens == [["a", "x"], [], ["c", "y", "z"]]
    columns.top_counts[2] = 4
    with pytest.raises(ValueError, match="top_counts sum to 6"):
        logprob_arrays(columns)


def test_the_summary_is_short(reference):
    response = reference.generate("Hello", max_output_tokens=20, top_logprobs=3)
    assert len(str(response).splitlines()) > 300
    lines = repr(view(response)).splitlines()
    assert len(lines) <= 5
    assert "finish length" in lines[1] and "top-3" in lines[-1]
    scored = reference.run(build_request("", prompt="The cat", max_output_tokens=0))
    assert "bits/byte" not in repr(view(scored))


def test_a_response_without_choices_says_so():
    response = response_pb2.Response()
    response.errors.add(message="cut off")
    with pytest.raises(ValueError, match=r"no choices.*cut off"):
        _ = view(response).text
    with pytest.raises(TypeError, match="reads a modelir Response"):
        view(request_pb2.Request())


def test_delta_text():
    assert delta_text(stream_pb2.StreamEvent(delta=stream_pb2.PartDelta(text="hi"))) == "hi"
    assert delta_text(stream_pb2.StreamEvent(end=stream_pb2.StreamEnd())) == ""


def test_enum_names_both_ways():
    assert enum_value(request_pb2.ReasoningEffort, "high", field="f") == request_pb2.REASONING_EFFORT_HIGH
    assert (
        enum_value(request_pb2.ReasoningEffort, "REASONING_EFFORT_LOW", field="f") == request_pb2.REASONING_EFFORT_LOW
    )
    assert enum_value(content_pb2.Role, "User", field="role") == content_pb2.ROLE_USER
    assert enum_name(response_pb2.FinishReason, response_pb2.FINISH_REASON_STOP_SEQUENCE) == "stop_sequence"
    assert enum_name(response_pb2.FinishReason, 999) == "999"  # a newer value than this schema knows
    assert "unspecified" not in short_names(content_pb2.Role)
    for bad in ("unspecified", True, 0, "loud"):
        with pytest.raises(ValueError, match="role: expected one of 'system'"):
            enum_value(content_pb2.Role, bad, field="role")


# ---- writing: tools --------------------------------------------------------------------------------------


class Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


def forecast(city: str, days: int, unit: Unit = Unit.C, hourly: bool = False, tags: list[str] | None = None) -> str:
    """The forecast for a city.

    Args:
        city: The city's name,
            in English.
        days (int): How many days ahead.
    """
    return city


def test_a_tool_from_a_typed_function():
    declared = tool(forecast)
    schema = json.loads(declared.function.parameters_json_schema)
    assert declared.function.name == "forecast" and declared.function.description == "The forecast for a city."
    assert schema["required"] == ["city", "days"]
    assert schema["properties"]["city"] == {"type": "string", "description": "The city's name, in English."}
    assert schema["properties"]["days"] == {"type": "integer", "description": "How many days ahead."}
    assert schema["properties"]["unit"] == {"enum": ["celsius", "fahrenheit"]}
    assert schema["properties"]["tags"] == {"type": "array", "items": {"type": "string"}}
    assert "default" not in json.dumps(schema)  # strict modes reject it


def test_tools_from_dicts_in_every_providers_shape_agree():
    parameters = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    shapes = [
        {"name": "search", "description": "Search.", "parameters": parameters},
        {"type": "function", "function": {"name": "search", "description": "Search.", "parameters": parameters}},
        {"name": "search", "description": "Search.", "input_schema": parameters},
    ]
    tools = [tool(shape) for shape in shapes] + [tool(parameters, name="search", description="Search.")]
    assert all(t == tools[0] for t in tools)
    assert json.loads(tools[0].function.parameters_json_schema) == parameters


def test_a_tool_from_a_pydantic_model():
    class GetWeather(pydantic.BaseModel):
        """Weather in a city."""

        city: str
        unit: Literal["c", "f"] = "c"

    declared = tool(GetWeather)
    assert declared.function.name == "get_weather" and declared.function.description == "Weather in a city."
    assert json.loads(declared.function.parameters_json_schema)["required"] == ["city"]


def test_wrong_tools_name_the_field():
    def untyped(city): ...

    def variadic(*cities: str): ...

    def opaque(when: object): ...

    cases = [
        (untyped, "tool.city: expected a type annotation"),
        (variadic, "tool.cities: expected named parameters only"),
        (opaque, "tool.when: expected a JSON-representable annotation"),
        ({"type": "object"}, "tool.name: expected a tool name"),
        (42, "tool: expected a typed function, a pydantic model class, a dict or a Tool"),
    ]
    for spec, message in cases:
        with pytest.raises(ArgumentError, match=message):
            tool(spec)
    with pytest.raises(ArgumentError, match=r"tools\[1\]\.city"):
        build_request("m", messages=[("user", "x")], tools=[forecast, untyped])


def test_tool_choice():
    declared = [tool(forecast)]
    assert tool_choice("required", declared).mode == request_pb2.TOOL_CHOICE_MODE_REQUIRED
    assert tool_choice("forecast", declared).tool_name == "forecast"
    assert tool_choice(forecast, declared).tool_name == "forecast"
    with pytest.raises(ArgumentError, match="tool_choice: expected 'auto', 'none', 'required' or a declared tool"):
        tool_choice("search", declared)


# ---- writing: build_request's keywords ---------------------------------------------------------------------


def test_build_request_takes_the_new_keywords():
    request = build_request(
        "m",
        messages=[("user", "hi")],
        system="Be brief.",
        stop="\n",
        reasoning="high",
        reasoning_summary="auto",
        tools=[forecast],
        tool_choice="forecast",
        foreign_artifact_policy="drop",
        logprob_basis="post_sampling",
        require_token_ids=True,
        include_raw=True,
        min_p=0.1,
    )
    assert list(request.sampling.stop) == ["\n"]  # one stop sequence, not its characters
    assert request.conversation.messages[0].role == content_pb2.ROLE_SYSTEM
    assert request.reasoning_controls.effort == request_pb2.REASONING_EFFORT_HIGH
    assert request.reasoning_controls.summary == request_pb2.REASONING_SUMMARY_AUTO
    assert request.tool_choice.tool_name == "forecast"
    assert request.foreign_artifact_policy == request_pb2.FOREIGN_ARTIFACT_POLICY_DROP
    assert (
        request.logprob_options.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
        and request.logprob_options.require_token_ids
    )
    assert request.include_raw and request.sampling.min_p == pytest.approx(0.1)
    assert build_request("m", prompt="x", reasoning=2048).reasoning_controls.budget_tokens == 2048
    assert list(build_request("m", prompt="x", stop=["a", "b"]).sampling.stop) == ["a", "b"]


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"temperature": "hot"}, "temperature: expected a number, 0 or more; got 'hot'"),
        ({"max_output_tokens": 2.5}, "max_output_tokens: expected a whole number"),
        ({"seed": True}, "seed: expected a whole number"),
        ({"reasoning": "extreme"}, "reasoning: expected one of 'none', 'minimal', 'low', 'medium', 'high'"),
        ({"reasoning": 0}, "reasoning: expected a positive token budget"),
        ({"reasoning": 1.5}, "reasoning: expected an effort"),
        ({"stop": ["", "x"]}, "stop: expected a non-empty string or a list of non-empty strings"),
        ({"stop": 3}, "stop: expected a non-empty string"),
        ({"system": 3}, "system: expected the system prompt as a string"),
        ({"foreign_artifact_policy": "ignore"}, "foreign_artifact_policy: expected one of 'reject', 'drop'"),
        ({"grammar": "root ::= x"}, "grammar: expected a .dialect, text. pair"),
        ({"stop_token_ids": [1, "2"]}, "stop_token_ids: expected a list of token ids"),
    ],
)
def test_a_wrong_argument_names_the_field(keywords, message):
    with pytest.raises(ArgumentError, match=message) as caught:
        build_request("m", messages=[("user", "x")], **keywords)
    assert isinstance(caught.value, modelir.InvalidRequestError)  # one exception type for every request problem


def test_unknown_keywords_and_misplaced_system_are_refused():
    with pytest.raises(
        ArgumentError, match="temprature: expected a keyword build_request takes; did you mean temperature="
    ):
        build_request("m", prompt="x", temprature=1)
    with pytest.raises(ArgumentError, match="system: expected messages= to go with it"):
        build_request("m", prompt="x", system="Be brief.")


# ---- writing: images and tool results --------------------------------------------------------------------


def test_images_by_path_bytes_or_url(tmp_path):
    path = tmp_path / "cat.png"
    path.write_bytes(PNG)
    assert image(path).blob.mime_type == "image/png" and image(path).blob.data == PNG
    assert image(str(path)).blob == image(PNG).blob
    assert image("https://example.org/cat.jpg?size=2").blob.mime_type == "image/jpeg"
    assert image("data:image/webp;base64,AAAA").blob.mime_type == "image/webp"
    message = modelir.chat_message("user", "What is this?", path)
    assert [p.WhichOneof("content") for p in message.parts] == ["text", "blob"]
    with pytest.raises(ArgumentError, match="image: expected an existing file"):
        image(tmp_path / "missing.png")
    with pytest.raises(ArgumentError, match=r"image\.mime_type: expected a MIME type: the bytes are not"):
        image(b"not an image")
    with pytest.raises(ArgumentError, match=r"content\[0\]: expected text"):
        modelir.chat_message("user", 42)
    with pytest.raises(ArgumentError, match="role: expected one of"):
        modelir.chat_message("robot", "hi")


def test_a_tool_result_answers_its_call(reference):
    response = reference.chat([("user", "x")], tools=[forecast], tool_choice="required", max_output_tokens=200)
    call = view(response).tool_calls[0]
    answer = tool_result(call, {"high": 21, "unit": Unit.C})
    result = answer.parts[0].tool_result
    assert answer.role == content_pb2.ROLE_TOOL
    assert (result.tool_call_id, result.name) == (call.id, "forecast")
    assert json.loads(result.content[0].text) == {"high": 21, "unit": "celsius"}
    assert tool_result(call, "boom", failed=True).parts[0].tool_result.failed
    conversation = [("user", "x"), view(response).assistant_message, answer]
    follow_up = view(reference.chat(conversation, tools=[forecast], max_output_tokens=20))
    assert follow_up.finish_reason in ("stop", "length")
    with pytest.raises(ArgumentError, match=r"tool_result\.result: expected text, or a JSON-serializable value"):
        tool_result(call, object())


def test_images_and_tools_from_the_helpers_lower_onto_a_providers_wire(tmp_path):
    path = tmp_path / "cat.png"
    path.write_bytes(PNG)
    message = modelir.chat_message("user", "What is this?", path, image("https://example.org/cat.jpg"))
    request = build_request("m", messages=[message], tools=[forecast], tool_choice="forecast", max_output_tokens=10)
    body = orjson.loads(OpenAIChat(provider_model="gpt-4o").lower(request, stream=False).body)
    content = body["messages"][0]["content"]
    assert [c["type"] for c in content] == ["text", "image_url", "image_url"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert content[2]["image_url"]["url"] == "https://example.org/cat.jpg"
    assert body["tools"][0]["function"]["name"] == "forecast"
    assert body["tools"][0]["function"]["parameters"]["required"] == ["city", "days"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "forecast"}}
