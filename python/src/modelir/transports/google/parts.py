"""Gemini's native parts and candidates, lifted into the IR: parts, finish reasons, usage and logprobs.

Shared by the unary lift (`genai`) and the stream lift (`genai_stream`). From the Gemini API reference
(https://ai.google.dev/api/generate-content): a `thoughtSignature` rides on the very part that carried it;
`candidatesTokenCount` excludes `thoughtsTokenCount`; zero counts are omitted; logprobs carry token ids.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from modelir.logprobs import build as lp
from modelir.v1 import content_pb2, logprobs_pb2, response_pb2

THOUGHT_SIGNATURE = content_pb2.OPAQUE_ARTIFACT_KIND_THOUGHT_SIGNATURE
# Every documented `FinishReason` (https://ai.google.dev/api/generate-content#FinishReason, and Vertex's
# `MODEL_ARMOR`): the filters, then the failures, then the rest.
_FILTERED = {
    "MODEL_ARMOR",  # Vertex: Model Armor blocked the response
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
    "MISSING_THOUGHT_SIGNATURE": response_pb2.FINISH_REASON_ERROR,  # a replayed call lacked its signature
    "MALFORMED_RESPONSE": response_pb2.FINISH_REASON_ERROR,
    "NO_IMAGE": response_pb2.FINISH_REASON_ERROR,  # an image was expected and none was generated
    "LANGUAGE": response_pb2.FINISH_REASON_ERROR,  # the language is not supported: the model gave up
    "IMAGE_OTHER": response_pb2.FINISH_REASON_OTHER,
    "OTHER": response_pb2.FINISH_REASON_OTHER,
    "FINISH_REASON_UNSPECIFIED": response_pb2.FINISH_REASON_UNSPECIFIED,
    **{reason: response_pb2.FINISH_REASON_CONTENT_FILTER for reason in _FILTERED},
}


CODE_EXECUTION = "code_execution"  # the IR name of Gemini's code execution tool (`executableCode` parts)
# Outcomes of `codeExecutionResult` that mean the code did not run to completion.
_FAILED_OUTCOMES = {"OUTCOME_FAILED", "OUTCOME_DEADLINE_EXCEEDED"}
# Keys that qualify a part's content rather than being content (they never name a provider part's type).
_PART_SIBLINGS = {"thoughtSignature", "thought", "partMetadata", "videoMetadata", "mediaResolution"}
# Candidate metadata that Gemini reports beside `content`, kept verbatim as provider parts after the candidate's
# parts (see `candidate_metadata`).
CANDIDATE_METADATA = ("groundingMetadata", "urlContextMetadata")


class CallPairing:
    """Pairs each `codeExecutionResult` with its `executableCode`: by `id` where Gemini gives one (Gemini API),
    else by order, since a result follows its code (Vertex sends no ids)."""

    def __init__(self) -> None:
        self.last_call_id = ""

    def call(self, call_id: str) -> None:
        self.last_call_id = call_id

    def result_for(self, result_id: str) -> str:
        return result_id or self.last_call_id


def provider_type(raw: dict[str, Any]) -> str:
    """The provider part type of a part this lift does not model: `google_genai.<its content key>`."""
    keys = [k for k in raw if k not in _PART_SIBLINGS] or sorted(raw)
    return f"google_genai.{keys[0]}"


def lift_part(raw: dict[str, Any], issuer: content_pb2.Issuer, pairing: CallPairing | None = None) -> content_pb2.Part:
    """One native part as an IR part; a kind this lift does not model becomes a provider part, never dropped."""
    pairing = pairing or CallPairing()
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
    elif isinstance(raw.get("executableCode"), dict):
        code = dict(raw["executableCode"])
        call_id = str(code.pop("id", "") or "")
        pairing.call(call_id)
        # The arguments are the native object without its id (`{language, code}`), so replay restores it exactly.
        part = content_pb2.Part(
            server_tool_call=content_pb2.ServerToolCall(
                id=call_id, name=CODE_EXECUTION, arguments_json=orjson.dumps(code).decode(), issuer=issuer
            )
        )
    elif isinstance(raw.get("codeExecutionResult"), dict):
        result = raw["codeExecutionResult"]
        output = result.get("output")
        part = content_pb2.Part(
            server_tool_result=content_pb2.ServerToolResult(
                tool_call_id=pairing.result_for(str(result.get("id") or "")),
                name=CODE_EXECUTION,
                content=[content_pb2.Part(text=output)] if isinstance(output, str) and output else [],
                result_json=orjson.dumps(result).decode(),
                failed=result.get("outcome") in _FAILED_OUTCOMES,
                issuer=issuer,
            )
        )
    elif set(raw) == {"thoughtSignature"}:
        part = content_pb2.Part(text="")  # a signature alone stands on an (empty) text part
    else:
        native = {k: v for k, v in raw.items() if k != "thoughtSignature"}
        part = content_pb2.Part(
            provider_part=content_pb2.ProviderPart(
                type=provider_type(raw), native_json=orjson.dumps(native).decode(), issuer=issuer
            )
        )
    if raw.get("thoughtSignature"):
        part.artifacts.add(kind=THOUGHT_SIGNATURE, data=str(raw["thoughtSignature"]).encode(), issuer=issuer)
    return part


def candidate_metadata(candidate: dict[str, Any], issuer: content_pb2.Issuer) -> list[content_pb2.Part]:
    """`groundingMetadata` and `urlContextMetadata`, when not empty, as provider parts with their native JSON
    verbatim (Gemini reports them beside the content, with no call id and no place among the parts, and takes
    nothing back for them; the answer's citations are derived from them by `citations`)."""
    return [
        content_pb2.Part(
            provider_part=content_pb2.ProviderPart(
                type=f"google_genai.{key}", native_json=orjson.dumps(candidate[key]).decode(), issuer=issuer
            )
        )
        for key in CANDIDATE_METADATA
        if isinstance(candidate.get(key), dict) and candidate[key]
    ]


def _citation_base(chunk: Any) -> content_pb2.Citation:
    """A grounding chunk as a citation without its span: `web` and `maps` are URLs, `retrievedContext` a
    document; any other kind keeps its native JSON."""
    citation = content_pb2.Citation()
    if not isinstance(chunk, dict):
        return citation
    for key, kind in (("web", content_pb2.CITATION_KIND_URL), ("maps", content_pb2.CITATION_KIND_URL)):
        if isinstance(chunk.get(key), dict):
            citation.kind = kind
            citation.url = str(chunk[key].get("uri") or "")
            citation.title = str(chunk[key].get("title") or "")
            return citation
    if isinstance(chunk.get("retrievedContext"), dict):
        source = chunk["retrievedContext"]
        citation.kind = content_pb2.CITATION_KIND_DOCUMENT
        citation.url = str(source.get("uri") or "")
        citation.title = str(source.get("title") or "")
        return citation
    citation.native_json = orjson.dumps(chunk).decode()
    return citation


def citations(grounding: Any, texts: list[str | None]) -> dict[int, list[content_pb2.Citation]]:
    """`groundingSupports` as citations on the text parts, by part index. `texts` holds each part's text (None
    for a part that is not text). A segment's offsets are UTF-8 bytes into the candidate's text parts joined
    (in a stream: all chunks joined), end exclusive, a start of 0 omitted; a span that crosses parts is cited on
    each part it covers, with offsets relative to that part. Each chunk a support names is one citation."""
    if not isinstance(grounding, dict):
        return {}
    chunks = grounding.get("groundingChunks") or []
    spans: list[tuple[int, int, int]] = []  # (part index, joined start byte, joined end byte)
    offset = 0
    for index, text in enumerate(texts):
        if text is not None:
            size = len(text.encode())
            spans.append((index, offset, offset + size))
            offset += size
    out: dict[int, list[content_pb2.Citation]] = {}
    for support in grounding.get("groundingSupports") or ():
        if not isinstance(support, dict):
            continue
        segment = support.get("segment") or {}
        start, end = int(segment.get("startIndex") or 0), int(segment.get("endIndex") or 0)
        for chunk_index in support.get("groundingChunkIndices") or ():
            if not (isinstance(chunk_index, int) and 0 <= chunk_index < len(chunks)):
                continue  # names no chunk: nothing to cite (the metadata's provider part keeps it verbatim)
            base = _citation_base(chunks[chunk_index])
            for index, low, high in spans:
                if (start < high and end > low) or (start == end == low and low < high):
                    citation = content_pb2.Citation()
                    citation.CopyFrom(base)
                    citation.start_byte = max(start, low) - low
                    citation.end_byte = min(end, high) - low
                    out.setdefault(index, []).append(citation)
    return out


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


def prompt_feedback(raw: Any, out: response_pb2.PromptFeedback) -> bool:
    """`promptFeedback` as data (never an invented choice); True when there was any."""
    if not isinstance(raw, dict) or not raw:
        return False
    out.block_reason = str(raw.get("blockReason") or "")
    out.blocked = bool(out.block_reason)
    out.message = str(raw.get("blockReasonMessage") or "")
    out.native_json = orjson.dumps(raw).decode()
    return True


def usage(raw: dict[str, Any] | None, usage: response_pb2.Usage) -> None:
    """Gemini omits zero counts and counts thoughts apart from candidates; the IR output includes thoughts."""
    if not raw:
        return
    # Tool output fed back to the model (`toolUsePromptTokenCount`) is outside `promptTokenCount` on the wire
    # (total = prompt + candidates + toolUsePrompt + thoughts) but part of the IR's input.
    tool_use = raw.get("toolUsePromptTokenCount") or 0
    usage.input_token_count = (raw.get("promptTokenCount") or 0) + tool_use
    if "toolUsePromptTokenCount" in raw:
        usage.details["tool_use_input_token_count"] = tool_use
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
