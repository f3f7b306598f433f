"""Gemini's native parts and candidates, lifted into the IR: parts, finish reasons, usage and logprobs.

Shared by the unary lift (`genai`) and the stream lift (`genai_stream`). From the Gemini API reference
(https://ai.google.dev/api/generate-content): a `thoughtSignature` rides on the very part that carried it;
`candidatesTokenCount` excludes `thoughtsTokenCount`; zero counts are omitted; logprobs carry token ids.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from modelir import logprobs as lp
from modelir.v1 import content_pb2, logprobs_pb2, response_pb2

THOUGHT_SIGNATURE = content_pb2.OPAQUE_ARTIFACT_KIND_THOUGHT_SIGNATURE
_FILTERED = {
    "SAFETY",
    "RECITATION",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "IMAGE_SAFETY",
    "IMAGE_PROHIBITED_CONTENT",
    "IMAGE_RECITATION",
}
FINISH_REASONS = {
    "STOP": response_pb2.FINISH_REASON_STOP,
    "MAX_TOKENS": response_pb2.FINISH_REASON_LENGTH,
    "MALFORMED_FUNCTION_CALL": response_pb2.FINISH_REASON_ERROR,
    "UNEXPECTED_TOOL_CALL": response_pb2.FINISH_REASON_ERROR,
    "TOO_MANY_TOOL_CALLS": response_pb2.FINISH_REASON_ERROR,
    **{reason: response_pb2.FINISH_REASON_CONTENT_FILTER for reason in _FILTERED},
}


def lift_part(raw: dict[str, Any], issuer: content_pb2.Issuer) -> content_pb2.Part | None:
    if "functionCall" in raw:
        call = raw["functionCall"]
        part = content_pb2.Part(
            tool_call=content_pb2.ToolCall(
                id=call.get("id") or "",
                name=call.get("name") or "",
                arguments_json=orjson.dumps(call.get("args") or {}).decode(),
            )
        )
    elif "text" in raw and raw.get("thought"):
        part = content_pb2.Part(reasoning=content_pb2.Reasoning(text=raw["text"]))
    elif "text" in raw:
        part = content_pb2.Part(text=raw["text"])
    elif "inlineData" in raw:
        data = raw["inlineData"]
        part = content_pb2.Part(
            blob=content_pb2.Blob(mime_type=data.get("mimeType") or "", data=base64.b64decode(data.get("data") or ""))
        )
    elif "thoughtSignature" in raw:
        part = content_pb2.Part(text="")  # a signature alone stands on an (empty) text part
    else:
        return None
    if raw.get("thoughtSignature"):
        part.artifacts.add(kind=THOUGHT_SIGNATURE, data=raw["thoughtSignature"].encode(), issuer=issuer)
    return part


def finish(choice: response_pb2.Choice, reason: str | None) -> None:
    choice.raw_finish_reason = reason or ""
    if not reason:
        choice.finish_reason = response_pb2.FINISH_REASON_UNSPECIFIED
        return
    normalised = FINISH_REASONS.get(reason, response_pb2.FINISH_REASON_OTHER)
    if normalised == response_pb2.FINISH_REASON_STOP and any(
        p.WhichOneof("content") == "tool_call" for p in choice.message.parts
    ):
        normalised = response_pb2.FINISH_REASON_TOOL_CALLS  # Gemini says STOP after function calls
    choice.finish_reason = normalised


def blocked(body: dict[str, Any], out: response_pb2.Response) -> None:
    """A blocked prompt has no candidates: one empty choice that says so, never an empty list."""
    reason = (body.get("promptFeedback") or {}).get("blockReason")
    if reason and not out.choices:
        choice = out.choices.add(index=0)
        choice.message.role = content_pb2.ROLE_ASSISTANT
        choice.finish_reason = response_pb2.FINISH_REASON_CONTENT_FILTER
        choice.raw_finish_reason = f"promptFeedback.blockReason:{reason}"


def usage(raw: dict[str, Any] | None, usage: response_pb2.Usage) -> None:
    """Gemini omits zero counts and counts thoughts apart from candidates; the IR output includes thoughts."""
    if not raw:
        return
    usage.input_token_count = raw.get("promptTokenCount") or 0
    usage.output_token_count = (raw.get("candidatesTokenCount") or 0) + (raw.get("thoughtsTokenCount") or 0)
    if "thoughtsTokenCount" in raw:
        usage.reasoning_token_count = raw["thoughtsTokenCount"]
    if "cachedContentTokenCount" in raw:
        usage.cache_read_token_count = raw["cachedContentTokenCount"]


def logprobs(raw: dict[str, Any], out: logprobs_pb2.TokenLogprobs) -> None:
    """`logprobsResult` -> columns. Proto3 JSON omits a `logProbability` of exactly 0 and a `tokenId` of 0."""
    chosen = raw.get("chosenCandidates") or []
    tops = [t.get("candidates") or [] for t in raw.get("topCandidates") or []]
    flat = [c for top in tops for c in top]
    lp.columns(
        out,
        tokens=[c.get("token") or "" for c in chosen],
        logprobs=[c.get("logProbability", 0.0) for c in chosen],
        token_ids=[c.get("tokenId", 0) for c in chosen],
        top_counts=list(map(len, tops)) if tops else None,
        top_tokens=[c.get("token") or "" for c in flat],
        top_logprobs=[c.get("logProbability", 0.0) for c in flat],
        top_token_ids=[c.get("tokenId", 0) for c in flat],
    )
