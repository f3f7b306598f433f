"""The transports modelir ships: exporting a concrete `Transport` class here is what registers it by name.

`modelir.registry` finds every concrete transport exported from this package, reads its options from its
constructor and builds it: `registry.build_transport(name, options)` is how configuration makes one.
`TRANSPORTS` (name -> `build(options)`) is that same registry, kept for callers that index it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from modelir.transports.anthropic import AnthropicMessages
from modelir.transports.base import HttpTransport, LocalTransport, Transport
from modelir.transports.google import GoogleGenAI
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.ollama import Ollama
from modelir.transports.openai import OpenAIChat, OpenAICompletions, OpenAIResponses
from modelir.transports.reference import ReferenceModel
from modelir.transports.sglang import SGLang
from modelir.transports.vllm import VLLM

__all__ = [
    "TRANSPORTS",
    "VLLM",
    "AnthropicMessages",
    "GoogleGenAI",
    "HttpTransport",
    "LlamaCpp",
    "LocalTransport",
    "Ollama",
    "OpenAIChat",
    "OpenAICompletions",
    "OpenAIResponses",
    "ReferenceModel",
    "SGLang",
    "Transport",
]


def __getattr__(name: str) -> Any:
    # `TRANSPORTS` is derived from the registry, which imports this package: it is made on first use (PEP 562).
    if name == "TRANSPORTS":
        from modelir.registry import registry

        transports: dict[str, Callable[[Mapping[str, Any]], Transport]] = {
            transport: entry.build for transport, entry in registry().items()
        }
        globals()["TRANSPORTS"] = transports
        return transports
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
