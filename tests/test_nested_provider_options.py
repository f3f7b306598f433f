"""Provider options on messages and parts reach only transports that read them; the others refuse them for
themselves, up front, instead of ignoring them."""

from __future__ import annotations

from modelir import build_request
from modelir.pipeline.prepare import Pipeline
from modelir.registry import build_transport


def _request(transport: str) -> object:
    request = build_request("m", messages=[("user", "hi")])
    request.conversation.messages[0].provider_options.add(transport=transport, options_json='{"user": "u1"}')
    request.conversation.messages[0].parts[0].provider_options.add(transport=transport, options_json="{}")
    return request


def test_a_transport_that_reads_only_request_options_refuses_nested_ones_naming_each():
    chat = build_transport("openai_chat", {"provider_model": "gpt-4o-mini"})
    reasons = chat.extra_unsupported(_request("openai_chat"))
    assert any("(conversation.messages[0].provider_options)" in r for r in reasons)
    assert any("(conversation.messages[0].parts[0].provider_options)" in r for r in reasons)


def test_nested_options_for_another_transport_are_ignored_and_anthropic_reads_its_own():
    chat = build_transport("openai_chat", {"provider_model": "gpt-4o-mini"})
    assert not [r for r in chat.extra_unsupported(_request("anthropic_messages")) if "provider options" in r]
    anthropic = build_transport("anthropic_messages", {"provider_model": "claude-sonnet-4-5"})
    request = build_request("m", messages=[("user", "hi")], max_output_tokens=16)
    part = request.conversation.messages[0].parts[0]
    part.provider_options.add(transport="anthropic_messages", options_json='{"cache_control": {"type": "ephemeral"}}')
    Pipeline(anthropic).check(request)
