"""The public import path of the Anthropic transport (`modelir.transports.anthropic_messages`); see `anthropic`."""

from modelir.transports.anthropic.messages import DEFAULT_MAX_TOKENS, PROVIDER_OPTION_KEYS, AnthropicMessages

__all__ = ["DEFAULT_MAX_TOKENS", "PROVIDER_OPTION_KEYS", "AnthropicMessages"]
