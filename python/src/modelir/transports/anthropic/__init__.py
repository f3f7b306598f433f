"""The Anthropic family: the Messages API (`messages`), its stream lift and the content blocks both share."""

from modelir.transports.anthropic.messages import DEFAULT_MAX_TOKENS, PROVIDER_OPTION_KEYS, AnthropicMessages

__all__ = ["DEFAULT_MAX_TOKENS", "PROVIDER_OPTION_KEYS", "AnthropicMessages"]
