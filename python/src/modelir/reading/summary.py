"""A `Response` in a few readable lines: what `repr(view(response))` shows (`summary`), choice by choice."""

from __future__ import annotations

from modelir.logprobs import build as lp
from modelir.reading import stops
from modelir.reading.view import Usage
from modelir.v1 import content_pb2, errors_pb2, logprobs_pb2, response_pb2
from modelir.writing.names import enum_name

_PREVIEW_CHARS = 72


def _preview(text: str) -> str:
    shown = text if len(text) <= _PREVIEW_CHARS else text[: _PREVIEW_CHARS - 1] + "…"
    return f"{shown!r}" + (f" ({len(text)} chars)" if len(text) > _PREVIEW_CHARS else "")


def _logprob_line(logprobs: logprobs_pb2.TokenLogprobs) -> str:
    counts = logprobs.top_counts
    k = f", top-{max(counts)}" if counts else ""
    ids = ", with ids" if logprobs.token_ids else ""
    total = sum(logprobs.token_logprobs)
    return f"{len(logprobs.token_logprobs)} tokens{k}{ids}, sum {total:.3f}"


def choice_lines(choice: response_pb2.Choice) -> list[str]:
    finish = enum_name(response_pb2.FinishReason, choice.finish_reason)
    lines = [
        f"  [{choice.index}] finish {finish}"
        + (f" (stop {stops.stop_of(choice)!r})" if choice.WhichOneof("stop") else "")
    ]
    for part in choice.message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            lines.append(f"      text {_preview(part.text)}")
        elif kind == "reasoning":
            shown = part.reasoning.text or " / ".join(part.reasoning.summary)
            lines.append(f"      reasoning {_preview(shown)}" if shown else "      reasoning (redacted)")
        elif kind == "tool_call":
            call = part.tool_call
            lines.append(f"      tool_call {call.name}({_preview(call.arguments_json)}) id={call.id}")
        elif kind == "blob":
            where = part.blob.uri or f"{len(part.blob.data)} bytes"
            lines.append(f"      blob {part.blob.mime_type} ({where})")
        elif kind is not None:
            lines.append(f"      {kind}")
        for artifact in part.artifacts:
            kind_name = enum_name(content_pb2.OpaqueArtifactKind, artifact.kind)
            issuer = f"{artifact.issuer.transport}/{artifact.issuer.model}"
            lines.append(f"        artifact {kind_name} ({len(artifact.data)} bytes, from {issuer})")
    if choice.HasField("logprobs"):
        lines.append(f"      logprobs {_logprob_line(choice.logprobs)}")
    return lines


def summary(response: response_pb2.Response, *, choices: int = 4) -> str:
    """A few readable lines about `response` (what `repr(view(response))` shows)."""
    usage = Usage.of(response.usage)
    lines = [f"Response {response.id or '(no id)'} from {response.model or '(unknown model)'}: usage {usage}"]
    for choice in list(response.choices)[:choices]:
        lines.extend(choice_lines(choice))
    if len(response.choices) > choices:
        lines.append(f"  ... {len(response.choices) - choices} more choices")
    for s in response.input_scores:
        lines.append(
            f"  input_scores {s.scored_token_count} tokens, sum {s.logprob_sum:.3f}, {s.scored_byte_count} bytes"
            + (f", {lp.bits_per_byte(s.logprob_sum, s.scored_byte_count):.4f} bits/byte" if s.scored_byte_count else "")
        )
    for error in response.errors:
        reason = enum_name(errors_pb2.ErrorReason, error.reason)
        lines.append(f"  error {reason}: {error.message}")
    for warning in response.warnings:
        lines.append(f"  warning {warning.code}: {warning.message}")
    if response.HasField("raw"):
        raw = response.raw
        size = len(raw.body) or sum(len(e.data) for e in raw.stream_events)
        lines.append(f"  raw {raw.transport} HTTP {raw.http_status}, {size} bytes")
    return "\n".join(lines)
