"""The Gemini API transport: manifest, lowering and unary lift (`generateContent`, `streamGenerateContent`).

Facts this follows (the Gemini API reference, https://ai.google.dev/api/generate-content, and its thinking and
thought-signature guides): a `thoughtSignature` rides on the very part that carried it
(a thought, a text part, an empty-text part, a function call) and goes back on that part; a candidate's `content`
can lack `parts`; a blocked prompt has `promptFeedback.blockReason` and no candidates; `candidatesTokenCount`
excludes `thoughtsTokenCount` (the IR's output count adds them) and `cachedContentTokenCount` is inside the prompt
count; zero counts are omitted; logprobs come with token ids (`logProbability`); the SSE stream has no `[DONE]`
and repeats the cumulative usage on every chunk; error bodies carry `google.rpc` details, whose
`RetryInfo.retryDelay` feeds the executor's retry wait.

Built-in tools (`Tool.provider`) are declared as `{<type>: <config>}`; their parts come back as
`executableCode` / `codeExecutionResult` (server tool call and result) and grounding as candidate metadata (citations
on the text parts plus verbatim provider parts, see `parts`); every part kind this lift does not model is a
provider part, replayed verbatim to Gemini only. A blocked prompt is `Response.prompt_feedback`, with no choice.

Tool results go back as `functionResponse.response`, which must be an object: a result whose text is a JSON
object is sent as that object, any other text as `{"result": text}`.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Any

import orjson

from modelir import errors
from modelir.errors import soft as soft_errors
from modelir.pipeline import content_kinds
from modelir.pipeline.survey import SeenMessage, Survey, survey
from modelir.transports import _common as common
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter, error_for_status
from modelir.transports.google import embed, parts
from modelir.transports.google.genai_stream import GenAIStreamLifter
from modelir.transports.manifests import CHAT_WITH_TOOLS, COMMON, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.v1 import capabilities_pb2, content_pb2, embedding_pb2, request_pb2, response_pb2

THOUGHT_SIGNATURE = parts.THOUGHT_SIGNATURE
_MODES = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: "AUTO",
    request_pb2.TOOL_CHOICE_MODE_NONE: "NONE",
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: "ANY",
}
PROVIDER_OPTION_KEYS = ("labels", "safetySettings")  # `cachedContent` is the typed `Request.cached_content`
# The built-in tools of the Gemini API (`Tool` fields besides `functionDeclarations`), each declared as
# `{<type>: <config>}`.
PROVIDER_TOOL_TYPES = (
    *("codeExecution", "googleSearch", "googleSearchRetrieval", "googleMaps", "urlContext", "fileSearch"),
)
# The input media types of the Gemini API's image, audio, video and document understanding guides.
INPUT_MEDIA_TYPES = (
    *("image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"),
    *("audio/wav", "audio/mp3", "audio/mpeg", "audio/aiff", "audio/aac", "audio/ogg", "audio/flac"),
    *("video/mp4", "video/mpeg", "video/mov", "video/avi", "video/x-flv", "video/mpg", "video/webm", "video/wmv"),
    *("video/3gpp", "application/pdf", "text/plain"),
)
# Candidate metadata kept as provider parts: Gemini takes nothing back for it, so replay leaves it out.
_NOT_REPLAYED = {f"google_genai.{key}" for key in parts.CANDIDATE_METADATA}


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
        "SERVER_TOOL_REPLAY PROVIDER_TOOLS CACHED_CONTENT CONSTRAINT_JSON_OBJECT AUDIO_INPUT VIDEO_INPUT",
        "DOCUMENT_INPUT IMAGE_OUTPUT EMBEDDINGS",  # EMBEDDINGS: `batchEmbedContents` (`google.embed`)
    )
    # `thinkingBudget` is at most 32768 (Gemini 2.5 Pro; Flash takes 24576) and may be 0 on Flash (thinking off), so
    # the manifest, which is the same for every model, sets no minimum; the API refuses a budget its model cannot
    # take.
    limits = capabilities_pb2.ModelLimits(
        max_top_logprobs=20, max_choices=8, max_stop_sequences=5, max_reasoning_budget_tokens=32768
    )
    provider_option_keys = PROVIDER_OPTION_KEYS
    part_kinds = content_kinds.chat_kinds(
        "Gemini",
        server_tool_call=content_kinds.CARRIED,
        server_tool_result=content_kinds.CARRIED,
        provider_part=content_kinds.CARRIED,
    )

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        out = super().manifest()
        out.input_media_types.extend(INPUT_MEDIA_TYPES)
        out.provider_tool_types.extend(PROVIDER_TOOL_TYPES)
        out.output_modalities.append(request_pb2.MODALITY_IMAGE)
        return out

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        return self.wire_unsupported_surveyed(request, survey(request), streaming=streaming)

    def wire_unsupported_surveyed(
        self, request: request_pb2.Request, seen: Survey, *, streaming: bool = False
    ) -> list[str]:
        reasons = [
            f"Gemini takes system text only before the conversation (conversation.messages[{i}])."
            for i in common.late_system_messages(request)
        ]
        if request.HasField("reasoning_controls") and request.reasoning_controls.summary:
            reasons.append("Gemini returns thought summaries with reasoning.include_thoughts, not reasoning.summary.")
        for i, message in enumerate(seen.messages):
            own = [(j, part, kind, artifacts) for j, k, part, kind, artifacts in message.parts if k < 0]
            if message.role in common.SYSTEM_ROLES:
                if any(kind != "text" for _, _, kind, _ in own):
                    reasons.append(f"Gemini's system instruction is text only here (conversation.messages[{i}]).")
                continue
            for j, part, kind, artifacts in own:
                where = f"conversation.messages[{i}].parts[{j}]"
                if any(a.kind != THOUGHT_SIGNATURE for a in artifacts):
                    reasons.append(f"Gemini takes only thought signatures ({where}).")
                reasons += _replay_problems(part, kind, where)
                if kind == "tool_result" and part.tool_result.failed:
                    reasons.append(f"Gemini cannot mark a function response as failed ({where}).")
        reasons += common.non_text_tool_results(request, "Gemini", seen)
        if any(m != request_pb2.MODALITY_IMAGE for m in request.output_modalities):
            reasons.append("Gemini's generateContent gives image output only (audio needs the Live or TTS API).")
        for i, tool in enumerate(request.tools):
            if tool.WhichOneof("kind") != "provider":
                continue
            if tool.provider.name:
                reasons.append(f"Gemini's built-in tools take no name (tools[{i}].provider.name).")
            if tool.provider.config_json and not isinstance(_loads(tool.provider.config_json), dict):
                reasons.append(
                    f"A built-in tool's config_json must be a JSON object (tools[{i}].provider.config_json)."
                )
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        return self.lower_surveyed(request, survey(request), stream=stream)

    def lower_surveyed(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> HttpRequest:
        messages = list(zip(request.conversation.messages, seen.messages, strict=True))
        system: list[dict[str, Any]] = []
        while messages and messages[0][1].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
            system.extend({"text": p.text} for p in messages.pop(0)[0].parts)
        body: dict[str, Any] = {"contents": _contents(messages)}
        if system:
            body["systemInstruction"] = {"parts": system}
        config: dict[str, Any] = {}
        common.copy_sampling(request.sampling, config, _SAMPLING)
        constraint = request.constraint.WhichOneof("kind")
        if constraint in ("json_schema", "json_object"):
            config["responseMimeType"] = "application/json"
        if constraint == "json_schema":
            config["responseJsonSchema"] = orjson.loads(request.constraint.json_schema.schema_json)
        if request.output_modalities:
            config["responseModalities"] = ["TEXT", "IMAGE"]
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
        declarations = [_declaration(t) for t in request.tools if t.WhichOneof("kind") == "function"]
        tools = [{"functionDeclarations": declarations}] if declarations else []
        tools += [_provider_tool(t.provider) for t in request.tools if t.WhichOneof("kind") == "provider"]
        if tools:
            body["tools"] = tools
        if request.cached_content:
            body["cachedContent"] = request.cached_content
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

    # ---- embed (IR 1.1, `google.embed`) ------------------------------------------------------------

    embed_option_keys = embed.OPTION_KEYS

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        return embed.SUPPORT.problems(request)

    def lower_embed(self, request: embedding_pb2.EmbedRequest) -> HttpRequest:
        return embed.lower(request, self.provider_model or request.model, self.name)

    def lift_embed(self, request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
        return embed.lift(request, response)

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
            if isinstance(detail, dict) and str(detail.get("@type") or "").endswith("google.rpc.RetryInfo"):
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
        candidates = common.array(body, "candidates")
        if not candidates and not body.get("promptFeedback"):
            # Gemini answers a candidate, or says why there is none (`promptFeedback.blockReason`): neither is a
            # wrong shape, not an empty success.
            raise errors.MalformedResponseError("the answer has no candidates and no promptFeedback saying why")
        facts = soft_errors.Facts()
        for position, candidate in enumerate(candidates):
            if not candidate.get("content") and not candidate.get("finishReason"):
                # A whole answer's candidate says what it generated or why it stopped (only stream chunks leave the
                # reason out): one with neither is a wrong shape, not an empty success.
                raise errors.MalformedResponseError(f"candidate {position} has neither content nor a finishReason")
            choice = out.choices.add(index=candidate.get("index", position))
            choice.message.role = content_pb2.ROLE_ASSISTANT
            pairing = parts.CallPairing()
            for raw in (candidate.get("content") or {}).get("parts") or ():
                choice.message.parts.append(parts.lift_part(raw, issuer, pairing))
            texts = [p.text if p.WhichOneof("content") == "text" else None for p in choice.message.parts]
            for index, cited in parts.citations(candidate.get("groundingMetadata"), texts).items():
                choice.message.parts[index].citations.extend(cited)
            choice.message.parts.extend(parts.candidate_metadata(candidate, issuer))
            parts.finish(choice, candidate.get("finishReason"))
            if candidate.get("logprobsResult"):
                parts.logprobs(candidate["logprobsResult"], choice.logprobs)
            elif choice.message.parts:
                facts.lack_logprobs(choice.index)
        parts.prompt_feedback(body.get("promptFeedback"), out.prompt_feedback)
        parts.usage(body.get("usageMetadata"), out.usage)
        soft_errors.settle(request, out, facts)
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return GenAIStreamLifter(self, request)


def _seconds(duration: object) -> float | None:
    if not isinstance(duration, str) or not duration.endswith("s"):
        return None
    try:
        return float(duration[:-1])
    except ValueError:
        return None


def _contents(messages: Iterable[tuple[content_pb2.Message, SeenMessage]]) -> list[dict[str, Any]]:
    """The turns, from each message's parts as the request's `survey` noted them (with their kinds)."""
    out: list[dict[str, Any]] = []
    for _, noted in messages:
        role = "model" if noted.role == content_pb2.ROLE_ASSISTANT else "user"
        wire_parts = [
            _wire_part(p, kind)
            for _, k, p, kind, _ in noted.parts
            if k < 0 and not (kind == "provider_part" and p.provider_part.type in _NOT_REPLAYED)
        ]
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(wire_parts)
        else:
            out.append({"role": role, "parts": wire_parts})
    return out


def _wire_part(part: content_pb2.Part, kind: str | None) -> dict[str, Any]:
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
    elif kind == "server_tool_call":
        # Only code execution is a part on this wire (`_replay_problems` refuses the rest before any I/O).
        wire = {"executableCode": orjson.loads(part.server_tool_call.arguments_json or "{}")}
        if part.server_tool_call.id:
            wire["executableCode"]["id"] = part.server_tool_call.id
    elif kind == "server_tool_result":
        wire = {"codeExecutionResult": orjson.loads(part.server_tool_result.result_json or "{}")}
    elif kind == "provider_part":
        wire = orjson.loads(part.provider_part.native_json or "{}")
    else:
        raise content_kinds.NotCarriedError(GoogleGenAI.name, kind)
    for artifact in part.artifacts:
        # The signature goes back on the very part that carried it, spelled exactly as received.
        wire["thoughtSignature"] = artifact.data.decode()
    return wire


def _replay_problems(part: content_pb2.Part, kind: str | None, where: str) -> list[str]:
    """Why a provider-run tool part or provider part (of `kind`) cannot go back to Gemini: only code execution is
    a part on this wire, and a provider part goes back only to the transport that issued it, as a JSON object."""
    if kind == "server_tool_call":
        call = part.server_tool_call
        if call.name != parts.CODE_EXECUTION:
            return [f"Gemini replays only {parts.CODE_EXECUTION} server tool calls, not {call.name!r} ({where})."]
        if not isinstance(_loads(call.arguments_json or "{}"), dict):
            return [f"A code execution call's arguments must be a JSON object ({where}.server_tool_call)."]
    elif kind == "server_tool_result":
        result = part.server_tool_result
        if result.name != parts.CODE_EXECUTION:
            return [f"Gemini replays only {parts.CODE_EXECUTION} server tool results, not {result.name!r} ({where})."]
        if not isinstance(_loads(result.result_json), dict):
            return [f"A code execution result replays its result_json, a JSON object ({where}.server_tool_result)."]
    elif kind == "provider_part":
        native = part.provider_part
        if native.issuer.transport != GoogleGenAI.name or not native.type.startswith(f"{GoogleGenAI.name}."):
            source = f"{native.type!r} from {native.issuer.transport!r}"
            return [f"Gemini replays only its own provider parts, not {source} ({where})."]
        if native.type not in _NOT_REPLAYED and not isinstance(_loads(native.native_json), dict):
            return [f"A provider part's native_json must be a JSON object ({where}.provider_part)."]
    return []


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _provider_tool(tool: request_pb2.ProviderTool) -> dict[str, Any]:
    return {tool.type: orjson.loads(tool.config_json) if tool.config_json else {}}


def _declaration(tool: request_pb2.Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.function.name}
    if tool.function.description:
        out["description"] = tool.function.description
    if tool.function.parameters_json_schema:
        out["parametersJsonSchema"] = orjson.loads(tool.function.parameters_json_schema)
    return out
