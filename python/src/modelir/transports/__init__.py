"""The transports, by name. `make_transport(name, options)` is how configuration builds one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from modelir.transports.anthropic_messages import AnthropicMessages
from modelir.transports.base import HttpTransport, LocalTransport, Transport
from modelir.transports.google_genai import GoogleGenAI
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.transports.openai_chat import OpenAIChat
from modelir.transports.openai_completions import OpenAICompletions
from modelir.transports.openai_responses import OpenAIResponses
from modelir.transports.reference import ReferenceModel
from modelir.transports.sglang import SGLang
from modelir.transports.vllm import VLLM


def _reference(options: Mapping[str, Any]) -> Transport:
    kwargs = {}
    if "provider_model" in options:
        kwargs["provider_model"] = options["provider_model"]
    return ReferenceModel(**kwargs)


# name -> factory(options); options are the model's configuration entry.
TRANSPORTS: dict[str, Callable[[Mapping[str, Any]], Transport]] = {
    "reference": _reference,
    "anthropic_messages": lambda options: AnthropicMessages(provider_model=options.get("provider_model", "")),
    "google_genai": lambda options: GoogleGenAI(provider_model=options.get("provider_model", "")),
    "openai_chat": lambda options: OpenAIChat(provider_model=options.get("provider_model", "")),
    "openai_completions": lambda options: OpenAICompletions(provider_model=options.get("provider_model", "")),
    "openai_responses": lambda options: OpenAIResponses(provider_model=options.get("provider_model", "")),
    "llamacpp": lambda options: LlamaCpp(provider_model=options.get("provider_model", "")),
    "ollama": lambda options: Ollama(provider_model=options.get("provider_model", "")),
    "sglang": lambda options: SGLang(provider_model=options.get("provider_model", "")),
    "vllm": lambda options: VLLM(provider_model=options.get("provider_model", "")),
}

__all__ = ["TRANSPORTS", "HttpTransport", "LocalTransport", "Transport"]
