"""llama.cpp `llama-server`: one transport (`transport`) routing raw prompts to the native wire (`completion`,
`completion_stream`) and conversations to the chat wire (`chat`), with the sampling fields both take (`sampling`)."""

from modelir.transports.llamacpp.transport import PROVIDER_OPTION_KEYS, LlamaCpp

__all__ = ["PROVIDER_OPTION_KEYS", "LlamaCpp"]
