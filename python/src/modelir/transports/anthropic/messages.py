"""Anthropic Messages (`POST /v1/messages`): content blocks, tools, extended thinking with signatures, prefill.

Facts this follows (Anthropic's Messages reference, https://docs.anthropic.com/en/api/messages, and its streaming
and extended-thinking guides): thinking blocks carry a `signature` and `redacted_thinking`
blocks an opaque `data`, and both go back verbatim and in order; `input_tokens` excludes cache reads and writes
(the IR's input count adds them back); in the stream, `ping` can come anywhere, a `signature_delta` ends a
thinking block, `input_json_delta` partials are joined then parsed, `message_delta.usage.output_tokens` is
cumulative, and a `redacted_thinking` block arrives whole in `content_block_start`.

`max_tokens` is required by the API. When the IR leaves it unset, this transport sends `DEFAULT_MAX_TOKENS`
(4,096), or the thinking budget plus 4,096 when a budget is set (the API requires max_tokens above the budget).
A thinking budget is at least `reasoning.MIN_THINKING_BUDGET` (1,024) tokens (the manifest's
`min_reasoning_budget_tokens` limit, checked with the capabilities) and below `max_tokens` (refused before any I/O,
naming `reasoning.budget_tokens`).

Reasoning effort and thinking budgets, per model, are `reasoning.py`'s; the content blocks a request is lowered to
are `lowering.py`'s, and `blocks.py` lifts the answer's.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelir.pipeline import content_kinds
from modelir.pipeline.survey import Survey, survey
from modelir.transports import _common as common
from modelir.transports.anthropic import blocks, lowering, reasoning
from modelir.transports.anthropic.lowering import PROVIDER_TOOL_TYPES, REDACTED, SIGNATURE
from modelir.transports.anthropic.messages_stream import MessagesStreamLifter
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter
from modelir.transports.manifests import CHAT_WITH_TOOLS, COMMON, capability_set
from modelir.v1 import capabilities_pb2, content_pb2, errors_pb2, request_pb2, response_pb2

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
# The media types of input blobs: images, and documents (PDF, plain text) as `document` blocks.
INPUT_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp", "application/pdf", "text/plain")

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
    limits = capabilities_pb2.ModelLimits(max_choices=1, min_reasoning_budget_tokens=reasoning.MIN_THINKING_BUDGET)
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
            reasoning.BUDGETLESS_MODELS
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
                if part.HasField("cache_breakpoint") and lowering.cache_control(part) is None:
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

    # ---- reasoning (`reasoning`) ---------------------------------------------------------------------

    def native_effort(self, request: request_pb2.Request) -> str | None:
        """The `output_config.effort` to send: the request's effort, on a model that takes one."""
        return reasoning.native_effort(request, self.model_for(request))

    def thinking_budget(self, request: request_pb2.Request) -> int | None:
        """The thinking budget to send (`reasoning.thinking_budget`); None when no budget goes on the wire."""
        return reasoning.thinking_budget(request, self.model_for(request))

    def reasoning_warnings(self, request: request_pb2.Request) -> list[errors_pb2.Warning]:
        """What the lowering did to the request's effort, said in the response (never silently)."""
        return reasoning.warnings(request, self.model_for(request))

    # ---- lower -------------------------------------------------------------------------------------

    def _max_tokens(self, request: request_pb2.Request) -> int:
        if request.sampling.HasField("max_output_tokens"):
            return request.sampling.max_output_tokens
        budget = self.thinking_budget(request)
        if budget is not None:
            return budget + self.default_max_tokens
        return self.default_max_tokens

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        return self.lower_surveyed(request, survey(request), stream=stream)

    def lower_surveyed(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> HttpRequest:
        messages = list(zip(request.conversation.messages, seen.messages, strict=True))
        system = []
        while messages and messages[0][1].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER):
            system.append(messages.pop(0))
        body: dict[str, Any] = {"model": self.model_for(request), "max_tokens": self._max_tokens(request)}
        if system:
            body["system"] = lowering.system(system)
        wire_messages = [{"role": lowering.role(m), "content": lowering.content(m, noted)} for m, noted in messages]
        if container := lowering.replayed_container(seen, len(system)):
            body["container"] = container
        if request.prefill:
            wire_messages.append({"role": "assistant", "content": [{"type": "text", "text": request.prefill}]})
        body["messages"] = lowering.merge_roles(wire_messages)
        s = request.sampling
        common.copy_sampling(s, body, _SAMPLING)
        if request.tools:
            body["tools"] = [lowering.tool(t) for t in request.tools]
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
        for block in common.array(body, "content"):
            choice.message.parts.append(blocks.lift_block(block, issuer, call_names))
        choice.message.parts.extend(blocks.message_facts(body.get("container"), body.get("stop_details"), issuer))
        blocks.finish(choice, body.get("stop_reason"), body.get("stop_sequence"))
        out.service_tier = blocks.usage(body.get("usage"), out.usage)
        out.warnings.extend(self.reasoning_warnings(request))
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return MessagesStreamLifter(self, request)
