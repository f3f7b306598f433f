"""The commonest first-hour mistakes: each is an `ArgumentError` saying what was given, what is expected and the
nearest right spelling; the obvious unambiguous forms (one string as a user message, OpenAI-style content parts)
are accepted."""

from __future__ import annotations

import base64

import modelir
import pytest
from modelir import ArgumentError, build_request
from modelir.v1 import content_pb2

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def test_a_bare_string_is_one_user_message(reference):
    request = build_request("m", messages="Hello")
    assert [(m.role, m.parts[0].text) for m in request.conversation.messages] == [(content_pb2.ROLE_USER, "Hello")]
    assert modelir.view(reference.chat("Hello", max_output_tokens=4)).text


def test_openai_style_content_parts_are_accepted():
    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": "https://example.com/cat.jpg"},
            ],
        },
    ]
    user = build_request("m", messages=messages).conversation.messages[1]
    assert [p.WhichOneof("content") for p in user.parts] == ["text", "blob", "blob"]
    assert user.parts[1].blob.mime_type == "image/png"
    assert user.parts[2].blob.uri == "https://example.com/cat.jpg"


@pytest.mark.parametrize(
    "messages, field, says",
    [
        ([{"role": "user", "content": [{"type": "audio", "data": "..."}]}], "messages[0].content[0]", "image_url"),
        ([{"role": "user", "content": [{"type": "text"}]}], "messages[0].content[0]", '"type": "text"'),
        ([("usr", "hi")], "role", "one of 'system'"),
        ([{"content": "hi"}], "messages[0]", 'a dict with "role" and "content"'),
        ([("user", "hi", "x")], "messages[0]", "a (role, text) pair"),
        (("user", "hi"), "messages", "wrap this one in"),
        ([{"role": "assistant", "content": "", "tool_calls": [{}]}], "messages[0].tool_calls", "tool_result"),
        (42, "messages", "a list of messages"),
    ],
)
def test_a_malformed_message_names_the_field_and_the_right_form(messages, field, says):
    with pytest.raises(ArgumentError) as caught:
        build_request("m", messages=messages)
    violation = caught.value.violations[0]
    assert violation.field == field
    assert says in violation.description


@pytest.mark.parametrize(
    "keyword, suggestion",
    [
        ("max_tokens", "max_output_tokens"),
        ("temprature", "temperature"),
        ("max_completion_tokens", "max_output_tokens"),
    ],
)
def test_a_keyword_of_another_sdk_or_a_typo_suggests_ours(reference, keyword, suggestion):
    with pytest.raises(ArgumentError) as caught:
        reference.chat("Hello", **{keyword: 5})
    assert caught.value.violations[0].field == keyword
    assert f"did you mean {suggestion}=?" in caught.value.violations[0].description
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("method", ["run", "stream", "validate"])
def test_a_string_where_a_request_goes_says_how_to_build_one(reference, method):
    with pytest.raises(ArgumentError) as caught:
        result = getattr(reference, method)("Hello")
        next(iter(result))
    description = caught.value.violations[0].description
    assert "expected a modelir Request" in description and "'Hello'" in description
    assert "build_request(model.name, messages=" in description


async def test_the_async_primitives_refuse_a_string_before_anything_else(reference):
    with pytest.raises(ArgumentError, match="arun"):
        await reference.arun("Hello")
    with pytest.raises(ArgumentError, match="astream"):
        reference.astream("Hello")
    with pytest.raises(ArgumentError, match="prompt"):
        await reference.agenerate([("user", "Hello")])
