"""Ollama's native API: `/api/chat` for conversations, `/api/generate` (raw mode) for prompts and FIM.

Facts this follows (Ollama's API reference, https://github.com/ollama/ollama/blob/main/docs/api.md):
`options` holds the sampling controls (`num_predict` is the
output limit); `format` takes a JSON schema; `think` turns thinking on (a level string where the model has
levels) and the thinking comes back in `message.thinking` (chat) or `thinking` (generate); tool-call arguments
are a JSON *object*; streams are NDJSON (one object a line, no `[DONE]`, the last line has `done: true`, and a
mid-stream failure is a final `{"error": ...}` line with status 200); usage is `prompt_eval_count` /
`eval_count`; durations are nanoseconds; logprobs (recent servers) carry no token ids.

A choice among labels lowers to a JSON schema `{"enum": labels}`; the reply is a JSON string, kept verbatim as the
text (so that text, token bytes and logprobs agree), and the label it unwraps to is `Choice.constrained_label`.
A JSON object constraint is `format: "json"`.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson

from modelir import errors
from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.pipeline import content_kinds
from modelir.transports import _common as common
from modelir.transports import ollama_embed, ollama_show, ollama_warnings, zero_output
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter
from modelir.transports.manifests import COMMON, ENGINE_SAMPLING, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.transports.ollama_warnings import TRUNCATION_WARNING as TRUNCATION_WARNING
from modelir.v1 import (
    capabilities_pb2,
    content_pb2,
    embedding_pb2,
    errors_pb2,
    logprobs_pb2,
    request_pb2,
    response_pb2,
)

JSON_HEADERS = (("content-type", "application/json"),)
DONE_REASONS = {"stop": response_pb2.FINISH_REASON_STOP, "length": response_pb2.FINISH_REASON_LENGTH}
_EFFORT = {
    request_pb2.REASONING_EFFORT_LOW: "low",
    request_pb2.REASONING_EFFORT_MEDIUM: "medium",
    request_pb2.REASONING_EFFORT_HIGH: "high",
}
_ROLES = {
    content_pb2.ROLE_SYSTEM: "system",
    content_pb2.ROLE_DEVELOPER: "system",
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
    content_pb2.ROLE_TOOL: "tool",
}
PROVIDER_OPTION_KEYS = ("keep_alive", "num_ctx", "num_keep", "mirostat", "typical_p", "truncate")
_OPTION_KEYS = {"keep_alive", "truncate"}  # top-level request fields; the rest go inside `options`
# Ollama answers a 400 "... does not support insert|thinking|tools" when the model's template has no slot for it:
# the manifest claims the wire's capability, the model lacks it, and the caller gets the typed gap.
_TEMPLATE_LACKS = re.compile(r"does not support (insert|thinking|tools)")
_LACKED = {
    "insert": capabilities_pb2.CAPABILITY_FIM,
    "thinking": capabilities_pb2.CAPABILITY_REASONING,
    "tools": capabilities_pb2.CAPABILITY_TOOLS,
}


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = (
    "temperature top_p top_k min_p seed presence_penalty frequency_penalty repetition_penalty:repeat_penalty stop"
)


class Ollama(HttpTransport):
    name = "ollama"
    answer_keys = ("message", "response")  # see HttpTransport.answer_keys
    version = "1.0.0"

    capabilities = capability_set(
        COMMON | LOGPROBS | OPENAI_SAMPLING | ENGINE_SAMPLING,
        "COMPLETION CHAT SYSTEM_MESSAGES IMAGE_INPUT TOOLS REASONING REASONING_EFFORT FIM CONSTRAINT_CHOICE "
        "CONSTRAINT_JSON_SCHEMA CONSTRAINT_JSON_OBJECT EMBEDDINGS",  # EMBEDDINGS: `/api/embed` (`ollama_embed`)
    )
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=1)
    provider_option_keys = PROVIDER_OPTION_KEYS
    logprob_bases = ("PRE_SAMPLING",)  # a softmax of the raw logits, before penalties and sampling
    part_kinds = content_kinds.chat_kinds("Ollama")  # reasoning goes as `thinking` text; artifacts are refused below

    def __init__(self, *, provider_model: str = "", vision: bool | None = None) -> None:
        super().__init__(provider_model=provider_model)
        # Whether the model reads images, overriding what its `/api/show` capabilities say (`ollama_show`): Ollama
        # accepts images for any model and ignores them when it has no vision. False: IMAGE_INPUT is not claimed
        # (refused before any call); True: images are sent without asking; None: `/api/show` is asked, once.
        self.vision = vision

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        manifest = super().manifest()
        if self.vision is False:
            kept = [c for c in manifest.capabilities if c != capabilities_pb2.CAPABILITY_IMAGE_INPUT]
            del manifest.capabilities[:]
            manifest.capabilities.extend(kept)
        return manifest

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.HasField("reasoning_controls"):
            if request.reasoning_controls.summary:
                reasons.append("Ollama returns thinking text, not summaries (reasoning.summary).")
            if request.reasoning_controls.effort == request_pb2.REASONING_EFFORT_MINIMAL:
                reasons.append("Ollama's thinking levels are low, medium and high (not minimal).")
        for i, message in enumerate(request.conversation.messages):
            for j, part in enumerate(message.parts):
                if part.artifacts:
                    reasons.append(f"Ollama takes no reasoning artifacts (conversation.messages[{i}].parts[{j}]).")
                if part.WhichOneof("content") == "tool_result" and part.tool_result.failed:
                    reasons.append(
                        f"Ollama cannot mark a tool result as failed (conversation.messages[{i}].parts[{j}])."
                    )
                if part.WhichOneof("content") == "blob" and part.blob.WhichOneof("source") == "uri":
                    reasons.append(f"Ollama takes images inline, not by URI (conversation.messages[{i}].parts[{j}]).")
        reasons += common.non_text_tool_results(request, "Ollama")
        if not isinstance(common.provider_options(request, self.name).get("truncate", False), bool):
            reasons.append("Ollama's truncate option is true or false.")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        body: dict[str, Any] = {"model": self.model_for(request)}
        if request.WhichOneof("input") == "conversation":
            path = "/api/chat"
            body["messages"] = _messages(request)
            if request.tools:
                body["tools"] = [_tool(t) for t in request.tools]
        else:
            path = "/api/generate"
            body["prompt"] = request.prompt
            body["raw"] = True  # plain completion: no chat template around the prompt
            if request.HasField("fim"):
                body["suffix"] = request.fim.suffix
        options: dict[str, Any] = {}
        common.copy_sampling(request.sampling, options, _SAMPLING)
        if (limit := zero_output.engine_limit(request)) is not None:
            options["num_predict"] = limit  # Ollama reads 0 as "no limit"
        # Ollama cuts an over-long prompt to num_ctx with a 200 unless told not to: never silently.
        body["truncate"] = False
        kind = request.constraint.WhichOneof("kind")
        if kind == "json_schema":
            body["format"] = orjson.loads(request.constraint.json_schema.schema_json)
        elif kind == "choice":
            body["format"] = {"enum": list(request.constraint.choice.labels)}
        elif kind == "json_object":
            body["format"] = "json"
        if request.HasField("reasoning_controls"):
            amount = request.reasoning_controls.WhichOneof("amount")
            if amount == "effort" and request.reasoning_controls.effort == request_pb2.REASONING_EFFORT_NONE:
                body["think"] = False
            elif amount == "effort":
                body["think"] = _EFFORT[request.reasoning_controls.effort]
            else:
                body["think"] = True
        if request.HasField("logprob_options"):
            body["logprobs"] = True
            if request.logprob_options.top_logprob_count:
                body["top_logprobs"] = request.logprob_options.top_logprob_count
        for key, value in common.provider_options(request, self.name).items():
            (body if key in _OPTION_KEYS else options)[key] = value
        if options:
            body["options"] = options
        body["stream"] = stream
        return HttpRequest("POST", path, orjson.dumps(body), JSON_HEADERS, "ndjson" if stream else None)

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        body = common.parse_json(response.body, "response body")
        out = response_pb2.Response(model=body.get("model") or "")
        choice = out.choices.add(index=0)
        choice.message.role = content_pb2.ROLE_ASSISTANT
        message = body.get("message") or {}
        thinking = message.get("thinking") if "message" in body else body.get("thinking")
        text = message.get("content") if "message" in body else body.get("response")
        if thinking:
            choice.message.parts.add().reasoning.text = thinking
        choice.message.parts.add(text=text or "")
        choice.constrained_label = chosen_label(request, text or "")
        for call in message.get("tool_calls") or body.get("tool_calls") or ():
            choice.message.parts.append(call_part(call))
        facts = soft_errors.Facts()
        if body.get("logprobs"):
            lp.from_openai_content(body["logprobs"], into=choice.logprobs)
            choice.logprobs.basis = logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
            replaced = lp.replaced_bytes_warning(choice.logprobs.tokens, "Ollama")
            if replaced is not None and not zero_output.asks_for_nothing(request):  # else the logprobs are dropped
                out.warnings.append(replaced)
        else:
            facts.lack_logprobs(0)
        settle(body, choice, out)
        if zero_output.asks_for_nothing(request):
            zero_output.drop_output(out, "Ollama")
        soft_errors.settle(request, out, facts)
        out.warnings.extend(ollama_warnings.truncation(request, out.usage))
        out.warnings.extend(ollama_warnings.default_penalty(request))
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        from modelir.transports.ollama_stream import NdjsonStreamLifter  # it builds on this module's helpers

        return NdjsonStreamLifter(self, request)

    def native_fields(self, request: request_pb2.Request | None, kind: str) -> str:
        """Chat and raw generation answer with different members (`native_fields/ollama.toml`)."""
        if kind in ("unary", "stream") and request is not None:
            route = "chat" if request.WhichOneof("input") == "conversation" else "generate"
            return f"ollama.{route}" + ("_stream" if kind == "stream" else "")
        return f"ollama.{kind}"

    def error(self, response: HttpResponse) -> errors.ModelError:
        exc = super().error(response)
        if response.status == 400 and (lacks := _TEMPLATE_LACKS.search(str(exc))):
            gaps = errors_pb2.UnsupportedCapabilities(missing=[_LACKED[lacks[1]]])
            gaps.reasons.append(f"Ollama: the model's template {lacks[0]} ({exc})")
            return errors.UnsupportedCapabilityError(gaps, http_status=response.status)
        return exc

    # ---- embed (IR 1.1, `ollama_embed`) ------------------------------------------------------------

    embed_option_keys = ollama_embed.OPTION_KEYS

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        return ollama_embed.SUPPORT.problems(request)

    def lower_embed(self, request: embedding_pb2.EmbedRequest) -> HttpRequest:
        return ollama_embed.lower(request, self.provider_model or request.model, self.name)

    def lift_embed(self, request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
        return ollama_embed.lift(request, response)

    # ---- vision, learned from `/api/show` (`ollama_show`, through `calls/engine_facts`) ---------------------

    def lower_model_facts(self, request: request_pb2.Request) -> HttpRequest | None:
        unasked = self.vision is None and ollama_show.image_count(request)
        return ollama_show.lower(self.model_for(request)) if unasked else None

    def lift_model_facts(self, response: HttpResponse) -> ollama_show.Shown:
        return ollama_show.lift(response)

    def model_fact_warnings(
        self, request: request_pb2.Request, facts: object | None, unavailable: str
    ) -> list[errors_pb2.Warning]:
        shown = facts if isinstance(facts, ollama_show.Shown) else None
        return ollama_show.vision_warnings(request, self.model_for(request), shown, unavailable)

    def lower_manifest_facts(self, model: str) -> HttpRequest | None:
        """`/api/show` for the served model (the same request an image asks, so one answer serves both), unless the
        `vision` option already says."""
        return ollama_show.lower(self.provider_model or model) if self.vision is None else None

    def manifest_with_facts(
        self, manifest: capabilities_pb2.CapabilityManifest, facts: object
    ) -> capabilities_pb2.CapabilityManifest:
        return ollama_show.narrowed(manifest, facts if isinstance(facts, ollama_show.Shown) else None)

    # ---- tokenizer facts ---------------------------------------------------------------------------

    def lower_tokenizer_info(self, model: str) -> list[HttpRequest]:
        """`POST /api/show`, whose `model_info` holds the GGUF metadata (`ModelInfo.tokenizer`)."""
        body = {"model": self.provider_model or model}
        return [HttpRequest("POST", "/api/show", orjson.dumps(body), JSON_HEADERS)]

    def lift_tokenizer_info(self, responses: list[HttpResponse]) -> capabilities_pb2.TokenizerInfo:
        """`<architecture>.vocab_size`, `tokenizer.ggml.bos_token_id` and `tokenizer.ggml.eos_token_id` (plus
        `tokenizer.ggml.eos_token_ids` where a model has several), each left unset when absent."""
        body = common.parse_json(responses[0].body, "show body")
        info = body.get("model_info") if isinstance(body, dict) else None
        if not isinstance(info, dict):
            raise errors.MalformedResponseError(f"{self.name}: /api/show has no model_info")
        out = capabilities_pb2.TokenizerInfo()
        architecture = info.get("general.architecture")
        if (size := _token_id(info.get(f"{architecture}.vocab_size"))) is not None and size > 0:
            out.vocabulary_size = size
        if (bos := _token_id(info.get("tokenizer.ggml.bos_token_id"))) is not None:
            out.bos_token_id = bos
        eos = [info.get("tokenizer.ggml.eos_token_id"), *(info.get("tokenizer.ggml.eos_token_ids") or [])]
        for token in eos:
            if (eos_id := _token_id(token)) is not None and eos_id not in out.eos_token_ids:
                out.eos_token_ids.append(eos_id)
        return out


def _token_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else None


def chosen_label(request: request_pb2.Request, text: str) -> str:
    """Under a choice constraint the reply is a JSON string: the label it unwraps to, or "" when it is none."""
    if request.constraint.WhichOneof("kind") != "choice":
        return ""
    try:
        label = orjson.loads(text)
    except orjson.JSONDecodeError:
        return ""
    return label if isinstance(label, str) and label in request.constraint.choice.labels else ""


def _messages(request: request_pb2.Request) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in request.conversation.messages:
        texts, images, calls, thinking = [], [], [], []
        for part in message.parts:
            kind = part.WhichOneof("content")
            if kind == "text":
                texts.append(part.text)
            elif kind == "blob":
                images.append(base64.b64encode(part.blob.data).decode())
            elif kind == "tool_call":
                call = part.tool_call
                wire: dict[str, Any] = {
                    "function": {"name": call.name, "arguments": orjson.loads(call.arguments_json or "{}")}
                }
                if call.id:
                    wire["id"] = call.id
                calls.append(wire)
            elif kind == "reasoning":
                thinking.append(part.reasoning.text)
            elif kind == "tool_result":
                result = part.tool_result
                entry: dict[str, Any] = {"role": "tool", "content": "".join(p.text for p in result.content)}
                if result.name:
                    entry["tool_name"] = result.name
                if result.tool_call_id:
                    entry["tool_call_id"] = result.tool_call_id
                out.append(entry)
            else:
                raise content_kinds.NotCarriedError(Ollama.name, kind)
        if message.role == content_pb2.ROLE_TOOL and not (texts or images or calls):
            continue
        entry = {"role": _ROLES[message.role], "content": "".join(texts)}
        if images:
            entry["images"] = images
        if calls:
            entry["tool_calls"] = calls
        if thinking:
            entry["thinking"] = "".join(thinking)
        out.append(entry)
    if request.prefill:
        out.append({"role": "assistant", "content": request.prefill})
    return out


def _tool(tool: request_pb2.Tool) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": tool.function.name,
        "parameters": common.json_object(tool.function.parameters_json_schema),
    }
    if tool.function.description:
        function["description"] = tool.function.description
    return {"type": "function", "function": function}


def call_part(call: dict[str, Any]) -> content_pb2.Part:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
    return content_pb2.Part(
        tool_call=content_pb2.ToolCall(id=call.get("id") or "", name=function.get("name") or "", arguments_json=text)
    )


def settle(body: dict[str, Any], choice: response_pb2.Choice, out: response_pb2.Response) -> None:
    """The final object's finish reason, usage and provider timings."""
    reason = body.get("done_reason") or ""
    choice.raw_finish_reason = reason
    choice.finish_reason = DONE_REASONS.get(
        reason, response_pb2.FINISH_REASON_OTHER if reason else response_pb2.FINISH_REASON_UNSPECIFIED
    )
    if choice.finish_reason == response_pb2.FINISH_REASON_STOP and any(
        p.WhichOneof("content") == "tool_call" for p in choice.message.parts
    ):
        choice.finish_reason = response_pb2.FINISH_REASON_TOOL_CALLS
    if body.get("prompt_eval_count") is not None:
        out.usage.input_token_count = body["prompt_eval_count"]
    if body.get("eval_count") is not None:
        out.usage.output_token_count = body["eval_count"]
    if body.get("prompt_eval_duration") is not None:
        out.timing.provider_input_duration.FromNanoseconds(body["prompt_eval_duration"])
    if body.get("eval_duration") is not None:
        out.timing.provider_output_duration.FromNanoseconds(body["eval_duration"])
