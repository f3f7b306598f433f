"""The transport registry: option schemas read from the constructors, and configuration reaching every option."""

from __future__ import annotations

import textwrap

import orjson
import pytest
from modelir import build_request
from modelir.config import _MODEL_KEYS, ConfigError, build_config, load_config
from modelir.registry import TransportOptionError, build_transport, registry, schema_of
from modelir.transports import TRANSPORTS
from modelir.transports.anthropic.messages import AnthropicMessages
from modelir.transports.base import LocalTransport
from modelir.transports.reference import ReferenceModel

# The registry finds transports among what `modelir.transports` exports; a reorganised package that stops
# exporting one would drop it from configuration silently, so the names are spelled out here once.
KNOWN = {
    "reference",
    "openai_completions",
    "openai_chat",
    "openai_responses",
    "vllm",
    "anthropic_messages",
    "google_genai",
    "sglang",
    "llamacpp",
    "ollama",
}


def test_the_registry_holds_every_transport_by_name():
    assert KNOWN <= set(registry())
    assert sorted(registry()) == sorted(TRANSPORTS)
    for name, entry in registry().items():
        assert entry.cls.name == name
        assert "provider_model" in entry.options, name
        assert isinstance(build_transport(name), entry.cls)


def test_no_transport_option_hides_behind_a_model_field():
    for name, entry in registry().items():
        assert not set(entry.options) & _MODEL_KEYS, name


def test_the_schema_is_the_constructor():
    options = registry()["anthropic_messages"].options
    assert list(options) == ["provider_model", "default_max_tokens", "beta"]
    assert options["default_max_tokens"].types == (int,)
    assert options["default_max_tokens"].default == 4096
    assert registry()["reference"].options["secret"].types == (bytes,)


def test_options_are_checked_and_converted():
    transport = build_transport("anthropic_messages", {"provider_model": "claude", "default_max_tokens": 8192})
    assert isinstance(transport, AnthropicMessages) and transport.default_max_tokens == 8192
    reference = build_transport("reference", {"secret": "s3cret", "provider_model": "ref-2"})
    assert (
        isinstance(reference, ReferenceModel)
        and reference._sealer._secret == b"s3cret"
        and reference.model_id == "ref-2"
    )
    for options, key, text in [
        ({"default_max_tokens": "8k"}, "default_max_tokens", "expected a whole number"),
        ({"default_max_tokens": True}, "default_max_tokens", "got bool"),
        ({"provider_model": 3}, "provider_model", "expected a string"),
        ({"max_tokens": 5}, "max_tokens", "takes no such option; it takes: beta, default_max_tokens, provider_model"),
    ]:
        with pytest.raises(TransportOptionError) as caught:
            build_transport("anthropic_messages", options)
        assert caught.value.key == key
        assert text in str(caught.value)
        assert "8k" not in str(caught.value)  # values are never echoed: an option may be a secret


def test_unsupported_option_types_and_optional_ones():
    class Odd(LocalTransport):
        def __init__(self, *, table: dict | None = None) -> None: ...

    with pytest.raises(TypeError, match=r"Odd\(table\)"):
        schema_of(Odd)

    class Fine(LocalTransport):
        def __init__(self, *, label: str | None = None, scale: float = 1.0) -> None: ...

    schema = schema_of(Fine)
    assert schema["label"].coerce(None) is None and schema["scale"].coerce(2) == 2.0


def _anthropic_config(extra: str) -> str:
    return textwrap.dedent(
        f"""
        models:
          claude:
            transport: anthropic_messages
            base_url: http://127.0.0.1:9/v1
            provider_model: claude-sonnet-4-0
            {extra}
        """
    )


async def test_configuration_reaches_a_transport_option(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(_anthropic_config("default_max_tokens: 8192"))
    config = load_config(path, environ={})
    model = config.models["claude"]
    assert isinstance(model.transport, AnthropicMessages)
    body = orjson.loads(model.transport.lower(build_request("claude", messages=[("user", "hi")]), stream=False).body)
    assert body["max_tokens"] == 8192 and body["model"] == "claude-sonnet-4-0"
    await config.aclose()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("default_max_tokens: lots", "models.claude.default_max_tokens: expected a whole number"),
        ("max_token: 10", "models.claude.max_token: unknown field"),
        ("secret: x", "the options of transport 'anthropic_messages': provider_model, default_max_tokens"),
    ],
)
def test_configuration_rejects_unknown_and_mistyped_options(tmp_path, extra, message):
    path = tmp_path / "models.yaml"
    path.write_text(_anthropic_config(extra))
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value)


def test_the_reference_model_takes_its_provider_model_from_configuration():
    config = build_config(
        {"models": {"ref": {"transport": "reference", "provider_model": "ref-9"}}}, source="t.yaml", environ={}
    )
    assert config.models["ref"].run(build_request("ref", prompt="a", max_output_tokens=2)).model == "ref-9"
