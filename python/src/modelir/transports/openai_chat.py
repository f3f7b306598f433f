"""The public import path of the OpenAI chat transport (`modelir.transports.openai_chat`); see `openai.chat`."""

from modelir.transports.openai.chat import PROVIDER_OPTION_KEYS, OpenAIChat

__all__ = ["PROVIDER_OPTION_KEYS", "OpenAIChat"]
