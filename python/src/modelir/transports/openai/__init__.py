"""The OpenAI wire family: chat completions, Responses and legacy completions, plus what they share (`_wire`)."""

from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.openai.completions import OpenAICompletions
from modelir.transports.openai.responses import OpenAIResponses

__all__ = ["OpenAIChat", "OpenAICompletions", "OpenAIResponses"]
