"""The Gemini API transport: manifest, lowering and unary lift (`generateContent`, `streamGenerateContent`).

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
from modelir.transports import _common as common
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter, error_for_status
from modelir.transports.google import parts
from modelir.transports.google.genai_stream import GenAIStreamLifter
from modelir.transports.manifests import CHAT_WITH_TOOLS, COMMON, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2, response_pb2

THOUGHT_SIGNATURE = parts.THOUGHT_SIGNATURE
_MODES = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: "AUTO",
    request_pb2.TOOL_CHOICE_MODE_NONE: "NONE",
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: "ANY",
}
PROVIDER_OPTION_KEYS = ("cachedContent", "labels", "safetySettings")


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = (
    "temperature seed top_p:topP top_k:topK max_output_tokens:maxOutputTokens presence_penalty:presencePenalty "
    "frequency_penalty:frequencyPenalty stop:stopSequences choice_count:candidateCount"
)


class GoogleGenAI(HttpTransport):
    name = "google_genai"
    answer_keys = ("candidates", "promptFeedback")  # see HttpTransport.answer_keys
    version = "1.0.0"

    def auth_headers(self, credential: str) -> dict[str, str]:
        return {"x-goog-api-key": credential} if credential else {}

    capabilities = capability_set(
        COMMON | CHAT_WITH_TOOLS | LOGPROBS | OPENAI_SAMPLING,
        "REASONING REASONING_BUDGET SAMPLED_TOKEN_IDS CONSTRAINT_JSON_SCHEMA MULTIPLE_CHOICES TOP_K_SAMPLING",
    )
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=8, max_stop_sequences=5)
    provider_option_keys = PROVIDER_OPTION_KEYS
    part_kinds = content_kinds.chat_kinds("Gemini")

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = [
            f"Gemini takes system text only before the conversation (conversation.messages[{i}])."
            for i in common.late_system_messages(request)
        ]
        if request.HasField("reasoning_controls") and request.reasoning_controls.summary:
            reasons.append("Gemini returns thought summaries with reasoning.include_thoughts, not reasoning.summary.")
        for i, message in enumerate(request.conversation.messages):
            if message.role in common.SYSTEM_ROLES:
                if any(p.WhichOneof("content") != "text" for p in message.parts):
                    reasons.append(f"Gemini's system instruction is text only here (conversation.messages[{i}]).")
                continue
            for j, part in enumerate(message.parts):
                where = f"conversation.messages[{i}].parts[{j}]"
                if any(a.kind != THOUGHT_SIGNATURE for a in part.artifacts):
                    reasons.append(f"Gemini takes only thought signatures ({where}).")
                if part.WhichOneof("content") == "tool_result" and part.tool_result.failed:
                    reasons.append(f"Gemini cannot mark a function response as failed ({where}).")
        reasons += common.non_text_tool_results(request, "Gemini")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        messages = list(request.conversation.messages)
        system: list[dict[str, Any]] = []
        while messages and messages[0].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
            system.extend({"text": p.text} for p in messages.pop(0).parts)
        body: dict[str, Any] = {"contents": _contents(messages)}
        if system:
            body["systemInstruction"] = {"parts": system}
        config: dict[str, Any] = {}
        common.copy_sampling(request.sampling, config, _SAMPLING)
        if request.constraint.WhichOneof("kind") == "json_schema":
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = orjson.loads(request.constraint.json_schema.schema_json)
        if request.HasField("logprob_options"):
            config["responseLogprobs"] = True
            if request.logprob_options.top_logprob_count:
                config["logprobs"] = request.logprob_options.top_logprob_count
        if request.HasField("reasoning_controls"):
            thinking: dict[str, Any] = {}
            if request.reasoning_controls.WhichOneof("amount") == "budget_tokens":
                thinking["thinkingBudget"] = request.reasoning_controls.budget_tokens
            if request.reasoning_controls.include_thoughts:
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
        body.update(common.provider_options(request, self.name))
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
                part = parts.lift_part(raw, issuer)
                if part is None:
                    out.warnings.add(code="unknown_part", message=f"a part with keys {sorted(raw)} was not lifted")
                else:
                    choice.message.parts.append(part)
            parts.finish(choice, candidate.get("finishReason"))
            if candidate.get("logprobsResult"):
                parts.logprobs(candidate["logprobsResult"], choice.logprobs)
            elif choice.message.parts:
                facts.lack_logprobs(choice.index)
        parts.blocked(body, out)
        parts.usage(body.get("usageMetadata"), out.usage)
        soft_errors.settle(request, out, facts)
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return GenAIStreamLifter(self, request)


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
        wire_parts = [_wire_part(p) for p in message.parts]
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(wire_parts)
        else:
            out.append({"role": role, "parts": wire_parts})
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
    out: dict[str, Any] = {"name": tool.function.name}
    if tool.function.description:
        out["description"] = tool.function.description
    if tool.function.parameters_json_schema:
        out["parametersJsonSchema"] = orjson.loads(tool.function.parameters_json_schema)
    return out
