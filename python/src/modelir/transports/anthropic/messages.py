"""Anthropic Messages (`POST /v1/messages`): content blocks, tools, extended thinking with signatures, prefill.

Facts this follows (Anthropic's Messages reference, https://docs.anthropic.com/en/api/messages, and its streaming
and extended-thinking guides): thinking blocks carry a `signature` and `redacted_thinking`
blocks an opaque `data`, and both go back verbatim and in order; `input_tokens` excludes cache reads and writes
(the IR's input count adds them back); in the stream, `ping` can come anywhere, a `signature_delta` ends a
thinking block, `input_json_delta` partials are joined then parsed, `message_delta.usage.output_tokens` is
cumulative, and a `redacted_thinking` block arrives whole in `content_block_start`.

`max_tokens` is required by the API. When the IR leaves it unset, this transport sends `DEFAULT_MAX_TOKENS`
(4,096), or the thinking budget plus 4,096 when a budget is set (the API requires max_tokens above the budget).
A thinking budget is at least `MIN_THINKING_BUDGET` (1,024) tokens (the manifest's `min_reasoning_budget_tokens`
limit, checked with the capabilities) and below `max_tokens` (refused before any I/O, naming
`reasoning.budget_tokens`).

Reasoning effort (Anthropic's effort and adaptive-thinking guides, https://platform.claude.com/docs/en/build-with-claude/
effort): the models in `EFFORT_MODELS` take an effort natively as `output_config.effort` (`low`, `medium`,
`high`). Those in `ADAPTIVE_THINKING_MODELS` (Opus 4.6, Sonnet 4.6, Opus 4.7) think adaptively, so an effort is sent
as `thinking: {"type": "adaptive"}` plus the effort, nothing mapped. Every other model (Opus 4.5 included, which
takes an effort but thinks only under a budget) takes a thinking budget, so an effort is sent as the budget
`EFFORT_BUDGETS` gives it (and, on Opus 4.5, as the effort too), and the response carries a
`reasoning_effort_mapped` warning saying so. A thinking budget on a model in `BUDGETLESS_MODELS` (Opus 4.7, which
answers 400 to one) is refused up front.

| IR effort | adaptive models | other models: thinking budget (warned) |
|---|---|---|
| `minimal` | effort `low` (warned: there is no minimal) | 1,024 |
| `low` | effort `low` | 2,048 |
| `medium` | effort `medium` | 8,192 |
| `high` | effort `high` | 16,384 |
| `none` | no thinking | no thinking |
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from modelir.pipeline import content_kinds
from modelir.transports import _common as common
from modelir.transports import opaque_json
from modelir.transports.anthropic import blocks
from modelir.transports.anthropic.messages_stream import MessagesStreamLifter
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter
from modelir.transports.manifests import CHAT_WITH_TOOLS, COMMON, capability_set
from modelir.v1 import capabilities_pb2, content_pb2, errors_pb2, request_pb2, response_pb2

SIGNATURE = blocks.SIGNATURE
REDACTED = blocks.REDACTED
# Provider-option keys that belong on a content block (a part's or message's options), not on the request.
BLOCK_OPTION_KEYS = ("cache_control", "citations", "context", "title", "caller")
API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_TOOL_CHOICE = {
    request_pb2.TOOL_CHOICE_MODE_AUTO: {"type": "auto"},
    request_pb2.TOOL_CHOICE_MODE_NONE: {"type": "none"},
    request_pb2.TOOL_CHOICE_MODE_REQUIRED: {"type": "any"},
}
PROVIDER_OPTION_KEYS = ("metadata", "service_tier", "container", *BLOCK_OPTION_KEYS)
MIN_THINKING_BUDGET = 1024
# The provider-run tool types this wire declares (Anthropic's server tools; each is sent as `{type, name,
# ...config}`), with the name Anthropic gives each when the IR leaves `ProviderTool.name` empty.
PROVIDER_TOOL_TYPES = {
    "web_search_20250305": "web_search",
    "web_search_20260209": "web_search",
    "web_search_20260318": "web_search",
    "web_fetch_20250910": "web_fetch",
    "web_fetch_20260209": "web_fetch",
    "web_fetch_20260309": "web_fetch",
    "web_fetch_20260318": "web_fetch",
    "code_execution_20250522": "code_execution",
    "code_execution_20250825": "code_execution",
    "code_execution_20260120": "code_execution",
    "code_execution_20260521": "code_execution",
    "tool_search_tool_regex_20251119": "tool_search_tool_regex",
    "tool_search_tool_bm25_20251119": "tool_search_tool_bm25",
}
# The media types of input blobs: images, and documents (PDF, plain text) as `document` blocks.
INPUT_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp", "application/pdf", "text/plain")
# Cache-breakpoint TTLs Anthropic takes (`cache_control.ttl`), in seconds.
_CACHE_TTLS = {300: "5m", 3600: "1h"}
# Model id prefixes, from Anthropic's effort and adaptive-thinking guides.
ADAPTIVE_THINKING_MODELS = ("claude-opus-4-6", "claude-sonnet-4-6", "claude-opus-4-7")
EFFORT_MODELS = (*ADAPTIVE_THINKING_MODELS, "claude-opus-4-5")
BUDGETLESS_MODELS = ("claude-opus-4-7",)
_NATIVE_EFFORT = {
    request_pb2.REASONING_EFFORT_MINIMAL: "low",
    request_pb2.REASONING_EFFORT_LOW: "low",
    request_pb2.REASONING_EFFORT_MEDIUM: "medium",
    request_pb2.REASONING_EFFORT_HIGH: "high",
}
EFFORT_BUDGETS = {
    request_pb2.REASONING_EFFORT_MINIMAL: MIN_THINKING_BUDGET,
    request_pb2.REASONING_EFFORT_LOW: 2048,
    request_pb2.REASONING_EFFORT_MEDIUM: 8192,
    request_pb2.REASONING_EFFORT_HIGH: 16384,
}


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = "temperature top_p top_k stop:stop_sequences"


class AnthropicMessages(HttpTransport):
    name = "anthropic_messages"
    answer_keys = ("content",)  # see HttpTransport.answer_keys
    version = "1.0.0"
    path = "/v1/messages"

    def __init__(
        self, *, provider_model: str = "", default_max_tokens: int = DEFAULT_MAX_TOKENS, beta: str = ""
    ) -> None:
        """`beta`: the `anthropic-beta` header (comma-separated feature names, e.g. `web-fetch-2025-09-10`) for tool
        versions that still need one; empty sends none."""
        super().__init__(provider_model=provider_model)
        self.default_max_tokens = default_max_tokens
        self.beta = beta

    def auth_headers(self, credential: str) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self.beta:
            headers["anthropic-beta"] = self.beta
        if credential:
            headers["x-api-key"] = credential
        return headers

    capabilities = capability_set(
        COMMON | CHAT_WITH_TOOLS,
        "REASONING REASONING_BUDGET REASONING_EFFORT PREFILL TOP_K_SAMPLING STOP_SEQUENCES",
        "SERVER_TOOL_REPLAY PROVIDER_TOOLS PROMPT_CACHE_BREAKPOINTS DOCUMENT_INPUT",
    )
    limits = capabilities_pb2.ModelLimits(max_choices=1, min_reasoning_budget_tokens=MIN_THINKING_BUDGET)
    provider_option_keys = PROVIDER_OPTION_KEYS
    reads_nested_provider_options = True  # block options on parts, message options on the message's last block
    input_media_types = INPUT_MEDIA_TYPES
    provider_tool_types = tuple(PROVIDER_TOOL_TYPES)
    # A refusal part is never sent back (Anthropic has no input form for it: it came from `stop_details`).
    part_kinds = content_kinds.chat_kinds(
        "Anthropic Messages",
        refusal=content_kinds.CARRIED,
        server_tool_call=content_kinds.CARRIED,
        server_tool_result=content_kinds.CARRIED,
        provider_part=content_kinds.CARRIED,
    )

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.HasField("reasoning_controls") and request.reasoning_controls.summary:
            reasons.append("Anthropic returns thinking blocks, not summaries on request (reasoning.summary).")
        if request.reasoning_controls.WhichOneof("amount") == "budget_tokens" and self.model_for(request).startswith(
            BUDGETLESS_MODELS
        ):
            reasons.append(
                f"{self.model_for(request)} thinks adaptively and refuses a thinking budget "
                "(reasoning.budget_tokens); give reasoning.effort instead."
            )
        for i in common.late_system_messages(request):
            reasons.append(f"Anthropic takes system text only before the conversation (conversation.messages[{i}]).")
        for i, message in enumerate(request.conversation.messages):
            where = f"conversation.messages[{i}]"
            if message.role in common.SYSTEM_ROLES:
                if any(p.WhichOneof("content") != "text" for p in message.parts):
                    reasons.append(f"Anthropic's system prompt is text only ({where}).")
                continue
            for j, part in enumerate(message.parts):
                kind = part.WhichOneof("content")
                if kind == "reasoning" and not any(a.kind in (SIGNATURE, REDACTED) for a in part.artifacts):
                    reasons.append(
                        f"Anthropic requires each thinking block back with its signature ({where}.parts[{j}])."
                    )
                elif kind == "blob" and part.blob.mime_type == "text/plain" and part.blob.WhichOneof("source") == "uri":
                    reasons.append(
                        f"Anthropic takes a plain-text document inline only, not by URI ({where}.parts[{j}])."
                    )
                elif kind == "provider_part" and part.provider_part.issuer.transport != self.name:
                    reasons.append(
                        f"A provider part from {part.provider_part.issuer.transport or 'no issuer'} cannot be replayed "
                        f"to {self.name} ({where}.parts[{j}])."
                    )
        if misplaced := sorted(set(common.provider_options(request, self.name)) & set(BLOCK_OPTION_KEYS)):
            reasons.append(
                f"The provider options {', '.join(misplaced)} belong on a message or part, not on the request."
            )
        return reasons

    def field_problems(self, request: request_pb2.Request) -> list[tuple[str, str]]:
        problems = super().field_problems(request)
        for i, message in enumerate(request.conversation.messages):
            for where, part in content_kinds.parts_of(message):
                if part.HasField("cache_breakpoint") and _cache_control(part) is None:
                    problems.append(
                        (
                            f"conversation.messages[{i}].{where}.cache_breakpoint.ttl",
                            "Anthropic caches for 5 minutes (300s) or 1 hour (3600s), nothing else.",
                        )
                    )
        budget = self.thinking_budget(request)
        if budget is None:
            return problems
        field = "reasoning.budget_tokens"
        if request.reasoning_controls.WhichOneof("amount") == "effort":
            field = "reasoning.effort"
            budget_text = f"The effort maps to a thinking budget of {budget} tokens (see EFFORT_BUDGETS), which"
        else:
            budget_text = f"Anthropic's thinking budget ({budget})"
        max_tokens = self._max_tokens(request)
        if budget >= max_tokens:
            problems.append(
                (
                    field,
                    f"{budget_text} must be less than the output limit (sampling.max_output_tokens = {max_tokens}).",
                )
            )
        return problems

    # ---- reasoning ---------------------------------------------------------------------------------

    def native_effort(self, request: request_pb2.Request) -> str | None:
        """The `output_config.effort` to send: the request's effort, on a model that takes one."""
        if request.reasoning_controls.WhichOneof("amount") != "effort":
            return None
        if not self.model_for(request).startswith(EFFORT_MODELS):
            return None
        return _NATIVE_EFFORT.get(request.reasoning_controls.effort)

    def thinking_budget(self, request: request_pb2.Request) -> int | None:
        """The thinking budget to send: the request's own, or its effort's (`EFFORT_BUDGETS`) on a model that does
        not think adaptively; None when no budget goes on the wire."""
        amount = request.reasoning_controls.WhichOneof("amount")
        if amount == "budget_tokens":
            return request.reasoning_controls.budget_tokens
        if amount == "effort" and not self.model_for(request).startswith(ADAPTIVE_THINKING_MODELS):
            return EFFORT_BUDGETS.get(request.reasoning_controls.effort)
        return None

    def reasoning_warnings(self, request: request_pb2.Request) -> list[errors_pb2.Warning]:
        """What the lowering did to the request's effort, said in the response (never silently)."""
        if request.reasoning_controls.WhichOneof("amount") != "effort":
            return []
        effort = request_pb2.ReasoningEffort.Name(request.reasoning_controls.effort)
        model = self.model_for(request) or "this model"
        native, budget = self.native_effort(request), self.thinking_budget(request)
        if budget is not None:
            sent = f"thinking.budget_tokens = {budget}" + (f" with effort {native!r}" if native else "")
            message = f"{model} thinks under a budget, not an effort: {effort} was sent as {sent} (EFFORT_BUDGETS)."
        elif native is not None and request.reasoning_controls.effort == request_pb2.REASONING_EFFORT_MINIMAL:
            message = f"{model} has no minimal effort: {effort} was sent as effort {native!r}."
        else:
            return []
        return [errors_pb2.Warning(code="reasoning_effort_mapped", message=message)]

    # ---- lower -------------------------------------------------------------------------------------

    def _max_tokens(self, request: request_pb2.Request) -> int:
        if request.sampling.HasField("max_output_tokens"):
            return request.sampling.max_output_tokens
        budget = self.thinking_budget(request)
        if budget is not None:
            return budget + self.default_max_tokens
        return self.default_max_tokens

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        messages = list(request.conversation.messages)
        system = []
        while messages and messages[0].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
            system.append(messages.pop(0))
        body: dict[str, Any] = {"model": self.model_for(request), "max_tokens": self._max_tokens(request)}
        if system:
            body["system"] = _system(system)
        wire_messages = [{"role": _role(m), "content": _content(m)} for m in messages]
        if container := _replayed_container(messages):
            body["container"] = container
        if request.prefill:
            wire_messages.append({"role": "assistant", "content": [{"type": "text", "text": request.prefill}]})
        body["messages"] = _merge_roles(wire_messages)
        s = request.sampling
        common.copy_sampling(s, body, _SAMPLING)
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        choice = request.tool_choice.WhichOneof("choice")
        if choice == "mode":
            body["tool_choice"] = _TOOL_CHOICE[request.tool_choice.mode]
        elif choice == "tool_name":
            body["tool_choice"] = {"type": "tool", "name": request.tool_choice.tool_name}
        budget, effort = self.thinking_budget(request), self.native_effort(request)
        if budget is not None:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        elif effort is not None:
            body["thinking"] = {"type": "adaptive"}
        if effort is not None:
            body["output_config"] = {"effort": effort}
        if stream:
            body["stream"] = True
        body.update(common.provider_options(request, self.name))
        return HttpRequest(
            "POST", self.path, orjson.dumps(body), (("content-type", "application/json"),), "sse" if stream else None
        )

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        body = common.parse_json(response.body, "response body")
        out = response_pb2.Response(id=body.get("id") or "", model=body.get("model") or "")
        choice = out.choices.add(index=0)
        choice.message.role = content_pb2.ROLE_ASSISTANT
        issuer = self.issuer(request)
        call_names: dict[str, str] = {}
        for block in body.get("content") or ():
            choice.message.parts.append(blocks.lift_block(block, issuer, call_names))
        choice.message.parts.extend(blocks.message_facts(body.get("container"), body.get("stop_details"), issuer))
        blocks.finish(choice, body.get("stop_reason"), body.get("stop_sequence"))
        out.service_tier = blocks.usage(body.get("usage"), out.usage)
        out.warnings.extend(self.reasoning_warnings(request))
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return MessagesStreamLifter(self, request)


def _role(message: content_pb2.Message) -> str:
    return "assistant" if message.role == content_pb2.ROLE_ASSISTANT else "user"


def _merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive turns of one role (e.g. a tool message after a user message) become one turn."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"].extend(message["content"])
        else:
            out.append(message)
    return out


def _system(messages: list[content_pb2.Message]) -> Any:
    """The system prompt: one string, or text blocks when a part carries a cache breakpoint or options."""
    if not any(
        m.provider_options or any(p.provider_options or p.HasField("cache_breakpoint") for p in m.parts)
        for m in messages
    ):
        return "\n\n".join("".join(p.text for p in m.parts) for m in messages)
    return [block for m in messages for block in _content(m)]


def _content(message: content_pb2.Message) -> list[dict[str, Any]]:
    """A message's blocks; the message's own provider options go on its last block (where a message-level
    `cache_control` belongs)."""
    content = [block for part in message.parts if (block := _block(part)) is not None]
    options = _entry_options(message.provider_options, AnthropicMessages.name)
    if options and content:
        content[-1].update(options)
    return content


def _replayed_container(messages: list[content_pb2.Message]) -> str | None:
    """The id of the last code-execution container in the replayed turns: the conversation continues in it."""
    container = None
    for message in messages:
        for part in message.parts:
            if part.WhichOneof("content") == "provider_part" and part.provider_part.type == blocks.CONTAINER:
                container = orjson.loads(part.provider_part.native_json).get("id") or container
    return container


def _cache_control(part: content_pb2.Part) -> dict[str, Any] | None:
    ttl = part.cache_breakpoint.ttl
    if not part.cache_breakpoint.HasField("ttl"):
        return {"type": "ephemeral"}
    name = _CACHE_TTLS.get(ttl.seconds) if not ttl.nanos else None
    return {"type": "ephemeral", "ttl": name} if name else None


def _block(part: content_pb2.Part) -> dict[str, Any] | None:
    """One part as a content block, with its cache breakpoint and options; None for a part with no input form
    (a refusal, the stop details, the container, which `_replayed_container` sends)."""
    block = _content_block(part)
    if block is None:
        return None
    if part.HasField("cache_breakpoint"):
        block["cache_control"] = _cache_control(part)
    block.update(_entry_options(part.provider_options, AnthropicMessages.name))
    return block


def _document(blob: content_pb2.Blob) -> dict[str, Any]:
    if blob.WhichOneof("source") == "uri":
        return {"type": "document", "source": {"type": "url", "url": blob.uri}}
    if blob.mime_type == "text/plain":
        return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": blob.data.decode()}}
    data = base64.b64encode(blob.data).decode()
    return {"type": "document", "source": {"type": "base64", "media_type": blob.mime_type, "data": data}}


def _content_block(part: content_pb2.Part) -> dict[str, Any] | None:
    kind = part.WhichOneof("content")
    if kind == "text":
        block: dict[str, Any] = {"type": "text", "text": part.text}
        citations = [c for c in map(blocks.citation_native, part.citations) if c is not None]
        if citations:
            block["citations"] = [
                {k: v for k, v in c.items() if k in blocks.CITATION_REQUEST_KEYS.get(c["type"], c)} for c in citations
            ]
        return block
    if kind == "blob":
        blob = part.blob
        if not blob.mime_type.startswith("image/"):
            return _document(blob)
        if blob.WhichOneof("source") == "uri":
            return {"type": "image", "source": {"type": "url", "url": blob.uri}}
        data = base64.b64encode(blob.data).decode()
        return {"type": "image", "source": {"type": "base64", "media_type": blob.mime_type, "data": data}}
    if kind == "tool_call":
        call = part.tool_call
        return {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": orjson.loads(call.arguments_json or "{}"),
        }
    if kind == "tool_result":
        result = part.tool_result
        content: Any = [b for p in result.content if (b := _block(p)) is not None]
        if len(result.content) == 1 and result.content[0].WhichOneof("content") == "text":
            content = result.content[0].text
        return {
            "type": "tool_result",
            "tool_use_id": result.tool_call_id,
            "content": content,
            "is_error": result.failed,
        }
    if kind == "reasoning":  # the artifact says which block it was, and its bytes go back exactly as received
        for artifact in part.artifacts:
            if artifact.kind == REDACTED:
                return {"type": "redacted_thinking", "data": artifact.data.decode()}
            if artifact.kind == SIGNATURE:
                return {"type": "thinking", "thinking": part.reasoning.text, "signature": artifact.data.decode()}
    if kind == "server_tool_call":
        server = part.server_tool_call
        call_block: dict[str, Any] = {"type": "server_tool_use", "id": server.id, "name": server.name}
        if server.server_label:
            call_block.update(type="mcp_tool_use", server_name=server.server_label)
        call_block["input"] = orjson.loads(server.arguments_json or "{}")
        return call_block
    if kind == "server_tool_result":
        restored = opaque_json.restore(part.server_tool_result.result_json, part.artifacts)
        return restored if isinstance(restored, dict) else {"content": restored}
    if kind == "provider_part":
        if part.provider_part.type in (blocks.CONTAINER, blocks.STOP_DETAILS):
            return None
        native = orjson.loads(part.provider_part.native_json or "{}")
        return native if isinstance(native, dict) else {"content": native}
    if kind == "refusal":
        return None
    raise content_kinds.NotCarriedError(AnthropicMessages.name, kind if kind != "reasoning" else "unsigned reasoning")


def _tool(tool: request_pb2.Tool) -> dict[str, Any]:
    if tool.WhichOneof("kind") == "provider":
        provider = tool.provider
        declared: dict[str, Any] = {
            "type": provider.type,
            "name": provider.name or PROVIDER_TOOL_TYPES.get(provider.type, provider.type),
        }
        declared.update(orjson.loads(provider.config_json) if provider.config_json else {})
        return declared
    out: dict[str, Any] = {
        "name": tool.function.name,
        "input_schema": common.json_object(tool.function.parameters_json_schema),
    }
    if tool.function.description:
        out["description"] = tool.function.description
    return out


def _entry_options(entries: Any, transport: str) -> dict[str, Any]:
    """This transport's entry of a message's or part's provider options (other entries are for other wires)."""
    for entry in entries:
        if entry.transport == transport:
            options = orjson.loads(entry.options_json or b"{}")
            return options if isinstance(options, dict) else {}
    return {}
