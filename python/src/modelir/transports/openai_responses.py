"""The public import path of the OpenAI Responses transport; see `openai.responses`."""

from modelir.transports.openai.responses import PROVIDER_OPTION_KEYS, OpenAIResponses

__all__ = ["PROVIDER_OPTION_KEYS", "OpenAIResponses"]
