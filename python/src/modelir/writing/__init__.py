"""Writing a `Request` from plain Python: tools, tool choice, reasoning, stops, enum names, tool results, images.

Every helper returns the generated message it builds (`Tool`, `Part`, `Message`), so the protobuf stays the truth
and anything not covered here is set on the message itself. `build_request` hands its extra keywords to `apply`.
A wrong argument raises `ArgumentError` (an `InvalidRequestError` and a `ValueError`) naming the field and what
it expects, before anything is sent.

- `arguments`: `ArgumentError` and `enum_value`;
- `tools`: `tool`, `tools`, `tool_choice` (JSON schemas from signatures and annotations);
- `content`: `chat_message`, `image`, `tool_result`;
- `options`: `apply` and `EXTRA_KEYWORDS` (logit bias, min output tokens, JSON object, provider tools, allowed
  tools, a cache breakpoint, ...), with `reasoning`, `stop_sequences`, `set_sampling`, `provider_tool`.
"""

from __future__ import annotations

from modelir.writing.arguments import ArgumentError, enum_value
from modelir.writing.content import ContentLike, chat_message, image, tool_result
from modelir.writing.options import EXTRA_KEYWORDS, apply, provider_tool, reasoning, set_sampling, stop_sequences
from modelir.writing.tools import ToolLike, tool, tool_choice, tools

__all__ = [
    "EXTRA_KEYWORDS",
    "ArgumentError",
    "ContentLike",
    "ToolLike",
    "apply",
    "chat_message",
    "enum_value",
    "image",
    "provider_tool",
    "reasoning",
    "set_sampling",
    "stop_sequences",
    "tool",
    "tool_choice",
    "tool_result",
    "tools",
]
