"""Anthropic content blocks lifted into IR parts, with stop reasons and usage: shared by the unary and stream lifts.

From Anthropic's Messages reference (https://docs.anthropic.com/en/api/messages): thinking blocks carry a
`signature`, `redacted_thinking` blocks an opaque `data`; `input_tokens` excludes cache reads and writes.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelir import stops
from modelir.v1 import content_pb2, response_pb2

SIGNATURE = content_pb2.OPAQUE_ARTIFACT_KIND_SIGNATURE
REDACTED = content_pb2.OPAQUE_ARTIFACT_KIND_REDACTED_DATA
STOP_REASONS = {
    "end_turn": response_pb2.FINISH_REASON_STOP,
    "max_tokens": response_pb2.FINISH_REASON_LENGTH,
    "stop_sequence": response_pb2.FINISH_REASON_STOP_SEQUENCE,
    "tool_use": response_pb2.FINISH_REASON_TOOL_CALLS,
    "pause_turn": response_pb2.FINISH_REASON_PAUSED,
    "refusal": response_pb2.FINISH_REASON_REFUSAL,
    "model_context_window_exceeded": response_pb2.FINISH_REASON_CONTEXT_WINDOW,
}


def lift_block(block: dict[str, Any], issuer: content_pb2.Issuer) -> content_pb2.Part | None:
    kind = block.get("type")
    if kind == "text":
        return content_pb2.Part(text=block.get("text") or "")
    if kind == "thinking":
        part = content_pb2.Part(reasoning=content_pb2.Reasoning(text=block.get("thinking") or ""))
        part.artifacts.add(kind=SIGNATURE, data=(block.get("signature") or "").encode(), issuer=issuer)
        return part
    if kind == "redacted_thinking":
        part = content_pb2.Part(reasoning=content_pb2.Reasoning())
        part.artifacts.add(kind=REDACTED, data=(block.get("data") or "").encode(), issuer=issuer)
        return part
    if kind == "tool_use":
        arguments = orjson.dumps(block.get("input") or {}).decode()
        return content_pb2.Part(
            tool_call=content_pb2.ToolCall(
                id=block.get("id") or "", name=block.get("name") or "", arguments_json=arguments
            )
        )
    return None


def finish(choice: response_pb2.Choice, stop_reason: str | None, stop_sequence: str | None) -> None:
    choice.raw_finish_reason = stop_reason or ""
    choice.finish_reason = (
        STOP_REASONS.get(stop_reason, response_pb2.FINISH_REASON_OTHER)
        if stop_reason
        else response_pb2.FINISH_REASON_UNSPECIFIED
    )
    stops.set_stop(choice, stop_sequence)


def usage(raw: dict[str, Any] | None, usage: response_pb2.Usage) -> None:
    """Anthropic's `input_tokens` excludes cache reads and writes; the IR's input count includes them."""
    if not raw:
        return
    if raw.get("input_tokens") is not None:
        read = raw.get("cache_read_input_tokens") or 0
        write = raw.get("cache_creation_input_tokens") or 0
        usage.input_token_count = raw["input_tokens"] + read + write
        if raw.get("cache_read_input_tokens") is not None:
            usage.cache_read_token_count = read
        if raw.get("cache_creation_input_tokens") is not None:
            usage.cache_write_token_count = write
    if raw.get("output_tokens") is not None:
        usage.output_token_count = raw["output_tokens"]
