"""Google Gemini API (`models/{model}:generateContent`, `:streamGenerateContent?alt=sse`).

Facts this follows (the Gemini API reference, https://ai.google.dev/api/generate-content, and its thinking and
thought-signature guides): a `thoughtSignature` rides on the very part that carried it
(a thought, a text part, an empty-text part, a function call) and goes back on that part; a candidate's `content`
can lack `parts`; a blocked prompt has `promptFeedback.blockReason` and no candidates; `candidatesTokenCount`
excludes `thoughtsTokenCount` (the IR's output count adds them) and `cachedContentTokenCount` is inside the prompt
count; zero counts are omitted; logprobs come with token ids (`logProbability`); the SSE stream has no `[DONE]`
and repeats the cumulative usage on every chunk; error bodies carry `google.rpc` details, whose
`RetryInfo.retryDelay` feeds the executor's retry wait.

Tool results go back as `functionResponse.response`, which must be an object: a result whose text is a JSON
object is sent as that object, any other text as `{"result": text}`.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from modelir import content_kinds, errors, soft_errors
from modelir import logprobs as lp
from modelir.transports import _common as common
from modelir.transports.base import (
    HttpRequest,
    HttpResponse,
    HttpTransport,
    RawEvent,
    StreamLifter,
    capability_set,
    carries_every_kind,
    error_for_status,
    frozen,
)
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import content_pb2, logprobs_pb2, request_pb2, response_pb2, stream_pb2

THOUGHT_SIGNATURE = content_pb2.REASONING_ARTIFACT_KIND_THOUGHT_SIGNATURE
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
_MODES = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: "AUTO",
    request_pb2.TOOL_CHOICE_MODE_NONE: "NONE",
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: "ANY",
}
PROVIDER_OPTION_KEYS = ("cachedContent", "labels", "safetySettings")


class GoogleGenAI(HttpTransport):
    name = "google_genai"
    version = "1.0.0"

    def auth_headers(self, credential: str) -> dict[str, str]:
        return {"x-goog-api-key": credential} if credential else {}

    capabilities = capability_set(
        "CHAT",
        "SYSTEM_MESSAGES",
        "IMAGE_INPUT",
        "TOOLS",
        "TOOL_CHOICE",
        "REASONING",
        "REASONING_BUDGET",
        "SAMPLED_LOGPROBS",
        "SAMPLED_TOKEN_IDS",
        "TOP_K_LOGPROBS",
        "CONSTRAINT_JSON_SCHEMA",
        "STREAMING",
        "MULTIPLE_CHOICES",
        "TEMPERATURE",
        "TOP_P",
        "TOP_K_SAMPLING",
        "MAX_OUTPUT_TOKENS",
        "STOP_SEQUENCES",
        "SEED",
        "PRESENCE_FREQUENCY_PENALTIES",
        "PROVIDER_OPTIONS",
    )
    limits = frozen({"max_top_logprobs": 20, "max_choices": 8, "max_stop_sequences": 5})
    provider_option_keys = PROVIDER_OPTION_KEYS
    part_kinds = carries_every_kind()

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.HasField("reasoning") and request.reasoning.summary:
            reasons.append("Gemini returns thought summaries with reasoning.include_thoughts, not reasoning.summary.")
        seen_other = False
        for i, message in enumerate(request.conversation.messages):
            if message.role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
                if seen_other:
                    reasons.append(
                        f"Gemini takes system text only before the conversation (conversation.messages[{i}])."
                    )
                continue
            seen_other = True
            for j, part in enumerate(message.parts):
                for artifact in part.artifacts:
                    if artifact.kind != THOUGHT_SIGNATURE:
                        reasons.append(f"Gemini takes only thought signatures (conversation.messages[{i}].parts[{j}]).")
                if part.WhichOneof("content") == "tool_result" and part.tool_result.failed:
                    reasons.append(
                        f"Gemini cannot mark a function response as failed (conversation.messages[{i}].parts[{j}])."
                    )
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        messages = list(request.conversation.messages)
        system = []
        while messages and messages[0].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
            system.extend({"text": p.text} for p in messages.pop(0).parts)
        body: dict[str, Any] = {"contents": _contents(messages)}
        if system:
            body["systemInstruction"] = {"parts": system}
        config: dict[str, Any] = {}
        s = request.sampling
        common.copy_sampling(
            s,
            (
                ("temperature", "temperature"),
                ("top_p", "topP"),
                ("top_k", "topK"),
                ("max_output_tokens", "maxOutputTokens"),
                ("seed", "seed"),
                ("presence_penalty", "presencePenalty"),
                ("frequency_penalty", "frequencyPenalty"),
            ),
            config,
        )
        if s.stop:
            config["stopSequences"] = list(s.stop)
        if s.choice_count > 1:
            config["candidateCount"] = s.choice_count
        if request.constraint.WhichOneof("kind") == "json_schema":
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = orjson.loads(request.constraint.json_schema.schema_json)
        if request.HasField("logprobs"):
            config["responseLogprobs"] = True
            if request.logprobs.top_k:
                config["logprobs"] = request.logprobs.top_k
        if request.HasField("reasoning"):
            thinking: dict[str, Any] = {}
            if request.reasoning.WhichOneof("amount") == "budget_tokens":
                thinking["thinkingBudget"] = request.reasoning.budget_tokens
            if request.reasoning.include_thoughts:
                thinking["includeThoughts"] = True
            config["thinkingConfig"] = thinking
        if config:
            body["generationConfig"] = config
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
        choice = request.tool_choice.WhichOneof("choice")
        if choice == "mode":
            body["toolConfig"] = {"functionCallingConfig": {"mode": _MODES[request.tool_choice.mode]}}
        elif choice == "tool_name":
            body["toolConfig"] = {
                "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [request.tool_choice.tool_name]}
            }
        body.update(common.provider_options(request))
        model = self.model_for(request)
        path = (
            f"/v1beta/models/{model}:streamGenerateContent?alt=sse"
            if stream
            else f"/v1beta/models/{model}:generateContent"
        )
        return HttpRequest(
            "POST", path, orjson.dumps(body), (("content-type", "application/json"),), "sse" if stream else None
        )

    # ---- lift --------------------------------------------------------------------------------------

    def error(self, response: HttpResponse) -> errors.ModelError:
        """`{"error": {"code", "message", "status", "details": [...]}}`; RetryInfo.retryDelay is the retry hint."""
        try:
            body = orjson.loads(response.body)
        except orjson.JSONDecodeError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return error_for_status(response, response.body.decode("utf-8", "replace")[:2000])
        retry_after = None
        for detail in error.get("details") or ():
            if isinstance(detail, dict) and detail.get("@type", "").endswith("google.rpc.RetryInfo"):
                retry_after = _seconds(detail.get("retryDelay"))
        return error_for_status(
            response,
            str(error.get("message") or ""),
            provider_code=str(error.get("status") or ""),
            retry_after=retry_after,
        )

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        body = common.parse_json(response.body, "response body")
        out = response_pb2.Response(id=body.get("responseId") or "", model=body.get("modelVersion") or "")
        issuer = self.issuer(request)
        candidates = body.get("candidates") or []
        facts = soft_errors.Facts()
        for position, candidate in enumerate(candidates):
            choice = out.choices.add(index=candidate.get("index", position))
            choice.message.role = content_pb2.ROLE_ASSISTANT
            for raw in (candidate.get("content") or {}).get("parts") or ():
                part = _part(raw, issuer)
                if part is None:
                    out.warnings.add(code="unknown_part", message=f"a part with keys {sorted(raw)} was not lifted")
                else:
                    choice.message.parts.append(part)
            _finish(choice, candidate.get("finishReason"))
            if candidate.get("logprobsResult"):
                _logprobs(candidate["logprobsResult"], choice.logprobs)
            elif choice.message.parts:
                facts.lack_logprobs(choice.index)
        _blocked(body, out)
        _usage(body.get("usageMetadata"), out.usage)
        soft_errors.settle(request, out, facts)
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _GenAIStreamLifter(self, request)


def _seconds(duration: str | None) -> float | None:
    if not duration or not duration.endswith("s"):
        return None
    try:
        return float(duration[:-1])
    except ValueError:
        return None


def _contents(messages) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "model" if message.role == content_pb2.ROLE_ASSISTANT else "user"
        parts = [_wire_part(p) for p in message.parts]
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


def _wire_part(part: content_pb2.Part) -> dict[str, Any]:
    kind = part.WhichOneof("content")
    if kind == "text":
        wire: dict[str, Any] = {"text": part.text}
    elif kind == "reasoning":
        wire = {"text": part.reasoning.text, "thought": True}
    elif kind == "blob":
        blob = part.blob
        if blob.WhichOneof("source") == "uri":
            wire = {"fileData": {"mimeType": blob.mime_type, "fileUri": blob.uri}}
        else:
            wire = {"inlineData": {"mimeType": blob.mime_type, "data": base64.b64encode(blob.data).decode()}}
    elif kind == "tool_call":
        call = part.tool_call
        wire = {"functionCall": {"name": call.name, "args": orjson.loads(call.arguments_json or "{}")}}
        if call.id:
            wire["functionCall"]["id"] = call.id
    elif kind == "tool_result":
        result = part.tool_result
        text = "".join(p.text for p in result.content if p.WhichOneof("content") == "text")
        try:
            response = orjson.loads(text)
        except orjson.JSONDecodeError:
            response = None
        if not isinstance(response, dict):
            response = {"result": text}
        wire = {"functionResponse": {"name": result.name, "response": response}}
        if result.tool_call_id:
            wire["functionResponse"]["id"] = result.tool_call_id
    else:
        raise content_kinds.NotCarriedError(GoogleGenAI.name, kind)
    for artifact in part.artifacts:
        # The signature goes back on the very part that carried it, spelled exactly as received.
        wire["thoughtSignature"] = artifact.data.decode()
    return wire


def _declaration(tool: request_pb2.Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    if tool.parameters_json_schema:
        out["parametersJsonSchema"] = orjson.loads(tool.parameters_json_schema)
    return out


def _part(raw: dict[str, Any], issuer: content_pb2.Issuer) -> content_pb2.Part | None:
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


def _finish(choice: response_pb2.Choice, reason: str | None) -> None:
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


def _blocked(body: dict[str, Any], out: response_pb2.Response) -> None:
    """A blocked prompt has no candidates: one empty choice that says so, never an empty list."""
    reason = (body.get("promptFeedback") or {}).get("blockReason")
    if reason and not out.choices:
        choice = out.choices.add(index=0)
        choice.message.role = content_pb2.ROLE_ASSISTANT
        choice.finish_reason = response_pb2.FINISH_REASON_CONTENT_FILTER
        choice.raw_finish_reason = f"promptFeedback.blockReason:{reason}"


def _usage(raw: dict[str, Any] | None, usage: response_pb2.Usage) -> None:
    """Gemini omits zero counts and counts thoughts apart from candidates; the IR output includes thoughts."""
    if not raw:
        return
    usage.input_token_count = raw.get("promptTokenCount") or 0
    usage.output_token_count = (raw.get("candidatesTokenCount") or 0) + (raw.get("thoughtsTokenCount") or 0)
    if "thoughtsTokenCount" in raw:
        usage.reasoning_token_count = raw["thoughtsTokenCount"]
    if "cachedContentTokenCount" in raw:
        usage.cache_read_token_count = raw["cachedContentTokenCount"]


def _logprobs(raw: dict[str, Any], out: logprobs_pb2.TokenLogprobs) -> None:
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


def _apply_partial(args: dict[str, Any], fragment: dict[str, Any], warnings: list[str]) -> None:
    """Apply one `partialArgs` fragment (`$.a.b` paths; string values arrive in pieces and are appended)."""
    path = fragment.get("jsonPath") or ""
    keys = path.removeprefix("$.").split(".") if path.startswith("$.") else []
    if not keys or any(not k or "[" in k for k in keys):
        warnings.append(f"a streamed argument at JSON path {path!r} is not supported and was left out")
        return
    target = args
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    last = keys[-1]
    if "stringValue" in fragment:
        target[last] = target.get(last, "") + fragment["stringValue"]
    elif "numberValue" in fragment:
        target[last] = fragment["numberValue"]
    elif "boolValue" in fragment:
        target[last] = fragment["boolValue"]
    elif "nullValue" in fragment:
        target[last] = None


class _GenAIStreamLifter(StreamLifter):
    """Each SSE event is a whole response chunk with only the new parts. Consecutive text fragments of one kind
    are joined into one part; a part that carries a signature alone (an empty-text part) stays its own part."""

    def __init__(self, transport: GoogleGenAI, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.issuer = transport.issuer(request)
        self.parts = StreamParts()  # labelled with the kind of each part, to join runs of one kind
        self.signed: dict[int, set[int]] = {}  # candidate index -> parts that already carry a signature
        self.finishes: dict[int, str] = {}
        self.has_logprobs: set[int] = set()
        self.usage: dict[str, Any] | None = None
        self.block_reason = ""
        self.pending_calls: dict[int, dict[str, Any]] = {}  # candidate index -> a call whose arguments stream
        self.warnings: list[str] = []

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        chunk = common.parse_json(event.data, "stream chunk")
        out: list[stream_pb2.StreamEvent] = []
        if not self.started:
            self.started = True
            model = chunk.get("modelVersion") or ""
            out.append(
                stream_pb2.StreamEvent(start=stream_pb2.StreamStart(id=chunk.get("responseId") or "", model=model))
            )
        for position, candidate in enumerate(chunk.get("candidates") or ()):
            index = candidate.get("index", position)
            kinds = self.parts.labels(index)
            signed = self.signed.setdefault(index, set())
            for raw in (candidate.get("content") or {}).get("parts") or ():
                out.extend(self._part_events(index, kinds, signed, raw))
            if candidate.get("logprobsResult"):
                self.has_logprobs.add(index)
                delta = stream_pb2.PartDelta(choice_index=index)
                _logprobs(candidate["logprobsResult"], delta.logprobs)
                out.append(stream_pb2.StreamEvent(delta=delta))
            if candidate.get("finishReason"):
                self.finishes[index] = candidate["finishReason"]
        if chunk.get("usageMetadata"):
            self.usage = chunk["usageMetadata"]  # cumulative on every chunk: the last one wins
        if (chunk.get("promptFeedback") or {}).get("blockReason"):
            self.block_reason = chunk["promptFeedback"]["blockReason"]
        return out

    def _streamed_call(self, index: int, kinds: list[str], raw: dict[str, Any]) -> list[stream_pb2.StreamEvent] | None:
        """Gemini 3 streams a call's arguments: `{name, willContinue}`, then `partialArgs` fragments addressed by
        JSON path, then an empty `functionCall` that closes it. Returns None for an ordinary (whole) call."""
        call = raw["functionCall"]
        pending = self.pending_calls.get(index)
        if not ("partialArgs" in call or call.get("willContinue") or (not call and pending is not None)):
            return None
        delta = stream_pb2.PartDelta(choice_index=index)
        if pending is None:
            delta.part_index = self.parts.index(index, len(kinds), "call")
            delta.tool_call.id = call.get("id") or ""
            delta.tool_call.name = call.get("name") or ""
            pending = self.pending_calls[index] = {"part": delta.part_index, "args": {}}
        else:
            delta.part_index = pending["part"]
        for fragment in call.get("partialArgs") or ():
            _apply_partial(pending["args"], fragment, self.warnings)
        if not call:  # the closing empty functionCall: the arguments are complete
            delta.tool_call.arguments_json = orjson.dumps(pending["args"]).decode()
            del self.pending_calls[index]
        if raw.get("thoughtSignature"):
            delta.artifacts.add(kind=THOUGHT_SIGNATURE, data=raw["thoughtSignature"].encode(), issuer=self.issuer)
        return [stream_pb2.StreamEvent(delta=delta)]

    def _part_events(self, index: int, kinds: list[str], signed: set[int], raw: dict[str, Any]):
        if "functionCall" in raw and (streamed := self._streamed_call(index, kinds, raw)) is not None:
            return streamed
        kind = (
            "call"
            if "functionCall" in raw
            else "thought"
            if raw.get("thought")
            else "text"
            if "text" in raw
            else "other"
        )
        text = raw.get("text") or ""
        signature = raw.get("thoughtSignature")
        joinable = kind in ("text", "thought") and kinds and kinds[-1] == kind and (len(kinds) - 1) not in signed
        if joinable and (text or not signature):
            part_index = len(kinds) - 1
        else:
            part_index = self.parts.index(index, len(kinds), kind)
        delta = stream_pb2.PartDelta(choice_index=index, part_index=part_index)
        if kind == "text" or (kind == "other" and signature):
            delta.text = text
            self.parts.add_text(index, text)
        elif kind == "thought":
            delta.reasoning.text = text
        elif kind == "call":
            part = _part(raw, self.issuer)
            delta.tool_call.id = part.tool_call.id
            delta.tool_call.name = part.tool_call.name
            delta.tool_call.arguments_json = part.tool_call.arguments_json
        else:
            part = _part(raw, self.issuer)
            if part is None or part.WhichOneof("content") != "blob":
                return []
            delta.blob.CopyFrom(part.blob)
        if signature:
            delta.artifacts.add(kind=THOUGHT_SIGNATURE, data=signature.encode(), issuer=self.issuer)
            signed.add(part_index)
        return [stream_pb2.StreamEvent(delta=delta)]

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        choices = self.parts.choices()
        for index in choices:
            choice = response_pb2.Choice()
            for kind in self.parts.labels(index):
                if kind == "call":
                    choice.message.parts.add(tool_call=content_pb2.ToolCall())
            _finish(choice, self.finishes.get(index))
            end.finishes.add(
                choice_index=index, finish_reason=choice.finish_reason, raw_finish_reason=choice.raw_finish_reason
            )
        if self.block_reason and not choices:
            end.finishes.add(
                choice_index=0,
                finish_reason=response_pb2.FINISH_REASON_CONTENT_FILTER,
                raw_finish_reason=f"promptFeedback.blockReason:{self.block_reason}",
            )
        _usage(self.usage, end.usage)
        if not end.usage.ListFields():
            end.ClearField("usage")
        for warning in dict.fromkeys(self.warnings):
            end.warnings.add(code="partial_args_unsupported_path", message=warning)
        facts = soft_errors.Facts()
        if interrupted or (choices and not self.finishes) or self.pending_calls:
            # There is no [DONE]: a stream is complete when its candidates have said why they finished.
            facts.cut_short = "the stream ended before a finishReason; the output is partial"
        facts.missing_logprobs = [i for i in choices if i not in self.has_logprobs and self.parts.labels(i)]
        soft_errors.settle_stream(self.request, end, facts, self.parts.texts())
        return [stream_pb2.StreamEvent(end=end)]
