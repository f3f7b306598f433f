"""The public import path of the OpenAI completions transport; see `openai.completions`."""

from modelir.transports.openai.completions import PROVIDER_OPTION_KEYS, OpenAICompletions

__all__ = ["PROVIDER_OPTION_KEYS", "OpenAICompletions"]
