"""OpenAI Chat Completions (`POST /chat/completions`): the manifest, the lowering and the unary lift.

From OpenAI's API reference (https://platform.openai.com/docs/api-reference/chat): tool-call arguments are a JSON
*string*; `content` is null when only tool calls come back; logprob entries carry `bytes` (text is rebuilt from
them); cached and reasoning tokens are counted inside the totals, as in the IR. Engines that speak a dialect of
this wire (vLLM, llama.cpp) subclass it and extend `body`, `finish`, `adjust_logprobs` and `lift_extras`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import msgspec
import orjson

from modelir.errors import soft as soft_errors
from modelir.errors.soft import Facts
from modelir.logprobs import native
from modelir.pipeline import content_kinds
from modelir.pipeline.survey import Survey, survey
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import accounting_typed, zero_output
from modelir.transports.base import HttpResponse, StreamLifter
from modelir.transports.manifests import CHAT_WITH_TOOLS, COMMON, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.transports.openai import _typed as typed
from modelir.transports.openai import _wire as wire
from modelir.transports.openai import responses_items as items
from modelir.transports.openai.chat_facts import REASONING_DETAILS, annotations_part, reasoning_details_part
from modelir.transports.openai.chat_stream import ChatStreamLifter
from modelir.transports.openai.embed import OpenAIEmbeddings
from modelir.v1 import capabilities_pb2, content_pb2, logprobs_pb2, request_pb2, response_pb2

_ROLE_NAMES = {
    content_pb2.ROLE_SYSTEM: "system",
    content_pb2.ROLE_DEVELOPER: "developer",
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
    content_pb2.ROLE_TOOL: "tool",
}
PROVIDER_OPTION_KEYS = tuple(sorted((*wire.OPTION_KEYS, "logit_bias", "verbosity")))


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = (
    "temperature top_p seed presence_penalty frequency_penalty max_output_tokens:max_completion_tokens stop "
    "choice_count:n"
)


# What every server speaking this wire honours, and what OpenAI's own service adds. A dialect (a subclass) inherits
# only the first: it claims what its own server honours (see `__init_subclass__`).
_WIRE_CAPABILITIES = capability_set(
    COMMON | CHAT_WITH_TOOLS | LOGPROBS | OPENAI_SAMPLING,
    "REASONING REASONING_EFFORT CONSTRAINT_JSON_SCHEMA MULTIPLE_CHOICES",
)
# SERVER_TOOL_REPLAY: its own provider parts (OpenRouter's reasoning details) go back on their message.
# REASONING_EFFORT_XHIGH: OpenAI's `xhigh` (IR 1.1); an engine's chat template need not know it.
# EMBEDDINGS: OpenAI's `/embeddings` beside it (IR 1.1, `openai.embed`); an engine's embedding wire is its own.
_OPENAI_CAPABILITIES = capability_set(
    "CONSTRAINT_JSON_OBJECT LOGIT_BIAS ALLOWED_TOOLS SERVER_TOOL_REPLAY REASONING_EFFORT_XHIGH EMBEDDINGS"
)
_WIRE_KINDS = content_kinds.chat_kinds(
    "OpenAI chat completions", reasoning="OpenAI chat completions cannot replay reasoning"
)


class OpenAIChat(wire.BodyTransport, OpenAIEmbeddings):
    name = "openai_chat"
    answer_keys = ("choices",)  # see HttpTransport.answer_keys
    path = "/chat/completions"
    capabilities = _WIRE_CAPABILITIES | _OPENAI_CAPABILITIES
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=128, max_stop_sequences=4)
    provider_option_keys = PROVIDER_OPTION_KEYS
    part_kinds = content_kinds.chat_kinds(
        "OpenAI chat completions",
        reasoning="OpenAI chat completions cannot replay reasoning",
        refusal=content_kinds.CARRIED,  # an assistant message's `refusal`
        provider_part=content_kinds.CARRIED,  # its own: `reasoning_details` replayed, the other facts not sent
    )
    # What a dialect's server adds to this wire (structured, so that dialects need no filtering of reasons).
    returns_reasoning_text: ClassVar[bool] = False
    # Whether the server takes an assistant message's `refusal` back (OpenAI does; a dialect says so itself).
    replays_refusals: ClassVar[bool] = True
    # Whether the native logprob builder reads vLLM's -9999.0 clamp back as -inf (then `adjust_native_logprobs`,
    # not `adjust_logprobs`, finishes its columns).
    native_unclamp: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A dialect starts from what the wire carries everywhere, not from OpenAI's own additions."""
        super().__init_subclass__(**kwargs)
        if "capabilities" not in cls.__dict__:
            cls.capabilities = _WIRE_CAPABILITIES
        if "part_kinds" not in cls.__dict__:
            cls.part_kinds = _WIRE_KINDS
        if "replays_refusals" not in cls.__dict__:
            cls.replays_refusals = False
        if "body" in cls.__dict__ and "body_surveyed" not in cls.__dict__:
            # A dialect that extends `body` alone is lowered through it (from its own walk of the request).
            cls.body_surveyed = wire.BodyTransport.body_surveyed  # type: ignore[method-assign]

    def field_problems(self, request: request_pb2.Request) -> list[tuple[str, str]]:
        return super().field_problems(request) + wire.logit_bias_problems(request.sampling, self)

    # `max_output_tokens = 0`: the chat API takes at least one output token (OpenAI answers 0 with a 400), so the
    # zero-output rule applies (`transports.zero_output`): ask for one and drop it. A dialect whose route does its
    # own thing with 0 (vLLM's, llama-server's) turns this off.
    emulates_zero_output: ClassVar[bool] = True

    def _emulates_zero(self, request: request_pb2.Request) -> bool:
        return self.emulates_zero_output and zero_output.asks_for_nothing(request)

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        """What chat completions cannot carry, beyond the catalog and the content kinds."""
        return self.wire_unsupported_surveyed(request, survey(request), streaming=streaming)

    def wire_unsupported_surveyed(
        self, request: request_pb2.Request, seen: Survey, *, streaming: bool = False
    ) -> list[str]:
        reasons = []
        if streaming and self._emulates_zero(request):
            reasons.append("Chat completions cannot generate zero tokens, and a stream cannot take back what it sent.")
        if "reasoning_controls" in seen.present:
            if request.reasoning_controls.include_thoughts and not self.returns_reasoning_text:
                reasons.append("OpenAI chat completions return no reasoning text (reasoning.include_thoughts).")
            if request.reasoning_controls.summary:
                reasons.append("OpenAI chat completions return no reasoning summaries (reasoning.summary).")
        for i, message in enumerate(seen.messages):
            for j, k, part, kind, artifacts in message.parts:
                if k >= 0:  # a tool result's content: what the kinds allow there, the lowering carries
                    continue
                if artifacts and kind != "reasoning":
                    reasons.append(
                        f"OpenAI chat completions cannot replay reasoning (conversation.messages[{i}].parts[{j}])."
                    )
                elif kind == "tool_result" and part.tool_result.failed:
                    reasons.append(
                        "OpenAI chat completions cannot mark a tool result as failed "
                        f"(conversation.messages[{i}].parts[{j}].tool_result.failed); say so in its content."
                    )
                elif kind == "blob" and not part.blob.mime_type.startswith("image/"):
                    reasons.append(f"OpenAI chat completions take only image blobs, not {part.blob.mime_type!r}.")
                elif kind == "refusal" and not self.replays_refusals:
                    reasons.append(f"This server does not take refusals back (conversation.messages[{i}].parts[{j}]).")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        """The native body as a dict: the hook dialects extend before it is serialised once."""
        return self._body(request, survey(request), stream=stream)

    def body_surveyed(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> dict[str, Any]:
        return self._body(request, seen, stream=stream)

    def _body(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model_for(request), "messages": self._messages(request, seen)}
        s = request.sampling
        sampling = seen.sampling
        common.copy_sampling(s, body, _SAMPLING, present=sampling)
        if self._emulates_zero(request):
            body["max_completion_tokens"] = 1
        # A section the request does not set (`seen.present`) is not asked: a small chat sets three or four fields.
        present = seen.present
        if "tools" in present:
            body["tools"] = [{"type": "function", "function": wire.function_tool(t)} for t in request.tools]
        if "tool_choice" in present:
            choice = wire.tool_choice(request, lambda name: {"type": "function", "function": {"name": name}})
            if request.tool_choice.WhichOneof("choice") == "allowed_tools":
                allowed = request.tool_choice.allowed_tools
                tools = [{"type": "function", "function": {"name": name}} for name in allowed.tool_names]
                choice = {
                    "type": "allowed_tools",
                    "allowed_tools": {"mode": wire.allowed_mode(allowed), "tools": tools},
                }
            if choice is not None:
                body["tool_choice"] = choice
        if "logit_bias" in sampling:  # token ids as decimal keys, as the API takes them
            body["logit_bias"] = wire.logit_bias(s)
        if "reasoning_controls" in present and request.reasoning_controls.WhichOneof("amount") == "effort":
            body["reasoning_effort"] = wire.EFFORTS[request.reasoning_controls.effort]
        if "constraint" in present:
            kind = request.constraint.WhichOneof("kind")
            if kind == "json_schema":
                body["response_format"] = {
                    "type": "json_schema",
                    "json_schema": wire.json_schema_format(request.constraint.json_schema),
                }
            elif kind == "json_object":
                body["response_format"] = {"type": "json_object"}
        if "logprob_options" in present:
            body["logprobs"] = True
            if request.logprob_options.top_logprob_count:
                body["top_logprobs"] = request.logprob_options.top_logprob_count
        return wire.finish_body(request, body, stream=stream, transport=self.name, seen=seen)

    def _content(self, parts: Sequence[tuple[content_pb2.Part, str | None]]) -> str | list[dict[str, Any]]:
        """A plain string when the parts are one text; the array form otherwise."""
        if len(parts) == 1 and parts[0][1] == "text":
            text: str = parts[0][0].text
            return text
        out: list[dict[str, Any]] = []
        for part, kind in parts:
            if kind == "text":
                out.append({"type": "text", "text": part.text})
            elif kind == "blob":
                out.append({"type": "image_url", "image_url": {"url": wire.blob_url(part.blob)}})
            else:
                raise self.not_carried(kind)
        return out

    def _messages(self, request: request_pb2.Request, seen: Survey) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message, noted in zip(request.conversation.messages, seen.messages, strict=True):
            # A tool result's content follows it in `noted.parts` (k >= 0): it goes with the last result.
            results: list[tuple[str, list[tuple[content_pb2.Part, str | None]]]] = []
            calls, others, refusals, details = [], [], [], []
            for _, k, part, kind, _ in noted.parts:
                if k >= 0:
                    results[-1][1].append((part, kind))
                elif kind == "tool_result":
                    results.append((part.tool_result.tool_call_id, []))
                elif kind == "tool_call":
                    calls.append(part.tool_call)
                elif kind == "refusal" and self.replays_refusals:
                    refusals.append(part.refusal)
                elif kind == "provider_part":  # the artifact policy let only this transport's own ones through
                    if part.provider_part.type == f"{self.name}.{REASONING_DETAILS}":
                        details.extend(orjson.loads(part.provider_part.native_json or "[]"))
                    # the other native facts of an answer (filter results, executed tools) are not sent back
                elif kind in ("text", "blob"):
                    others.append((part, kind))
                else:
                    raise self.not_carried(kind)
            for call_id, content in results:  # each tool result is a message of its own on this wire
                out.append({"role": "tool", "tool_call_id": call_id, "content": self._content(content)})
            if message.role == content_pb2.ROLE_TOOL and not others:
                continue
            entry: dict[str, Any] = {"role": _ROLE_NAMES[message.role]}
            if others:
                entry["content"] = self._content(others)
            elif not calls and not refusals:
                entry["content"] = ""
            if refusals:
                entry["refusal"] = "".join(refusals)
            if calls:
                entry["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json}}
                    for c in calls
                ]
            if details:
                entry["reasoning_details"] = details
            if message.name:
                entry["name"] = message.name
            out.append(entry)
        return out

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        return self.lift_typed(
            request, response, typed.chat_completion(response.body, self.name, unclamp=self.native_unclamp)
        )

    def lift_accounted(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        out = self.lift_once(request, response, self.native_fields(request, "unary"))
        return out if out is not None else super().lift_accounted(request, response)

    def lift_once(
        self, request: request_pb2.Request, response: HttpResponse, section: str
    ) -> response_pb2.Response | None:
        """The lift, when one decode also shows that accounting under `section` has nothing to add
        (`accounting_typed`); None for an answer it does not show that for (or that the native logprob builder
        declines): the caller lifts and accounts it the reference way. (A composite transport passes its own section.)
        """
        # A dialect that extends `lift` itself (not `lift_typed`) is lifted through it.
        if type(self).lift is not OpenAIChat.lift:
            return None
        body = response.body
        if not native.wanted(body):
            once = accounting_typed.decode_accounted(typed.ChatCompletion, section, body)
            return self.lift_typed(request, response, once) if once is not None else None
        # A large answer: its logprob sections left raw for the native builder, as `typed.chat_completion` does.
        raw = accounting_typed.decode_accounted(typed.NativeChatCompletion, section, body)
        if raw is None:
            return None
        try:
            built = typed.native_chat(raw, unclamp=self.native_unclamp)
        except (msgspec.DecodeError, RecursionError, native.Unsupported):
            return None  # the reference path declines it too, and lifts it with the typed structs
        return self.lift_typed(request, response, built)

    def lift_typed(
        self, request: request_pb2.Request, response: HttpResponse, body: typed.ChatCompletion
    ) -> response_pb2.Response:
        """The lift of a decoded answer (`response` is the exchange it came in): the hook dialects extend."""
        out = response_pb2.Response(id=body.id or "", model=body.model or "", service_tier=body.service_tier or "")
        facts = soft_errors.Facts()
        for raw in body.choices or ():
            choice = out.choices.add(index=raw.index)
            message = raw.message or typed.Message()
            lifted = choice.message  # read once: each read of a message field is a look-up in upb
            lifted.role = content_pb2.ROLE_ASSISTANT
            parts = lifted.parts
            # OpenAI-compatible reasoning servers (vLLM, DeepSeek) put reasoning text beside the content.
            reasoning = message.reasoning_content or message.reasoning
            if reasoning:
                parts.add().reasoning.text = reasoning
            # An empty `content` (a forced end token, an answer of tool calls only) is no text part, as in the
            # stream, which sends no text for it: a stream folds into exactly the unary answer.
            annotations = [typed.raw_json(a)[0] for a in message.annotations] if message.annotations else []
            if message.content:
                text = parts.add(text=message.content)
                if annotations:
                    text.citations.extend(items.chat_citation(value, message.content) for value in annotations)
            if message.refusal is not None:
                parts.add(refusal=message.refusal)
            for call in message.tool_calls or ():
                function = call.function or typed.FunctionCall()
                parts.add(
                    tool_call=content_pb2.ToolCall(
                        id=call.id or "", name=function.name or "", arguments_json=function.arguments or ""
                    )
                )
            if annotations and not message.content:  # nothing to cite: kept as they came, never dropped
                parts.append(annotations_part(annotations, self.issuer(request), self.name))
            if message.reasoning_details:  # OpenRouter: the reasoning's entries with their signatures, for replay
                details = [orjson.loads(bytes(d)) for d in message.reasoning_details]
                parts.append(reasoning_details_part(details, self.issuer(request), self.name))
            choice.finish_reason, choice.raw_finish_reason, stop = self.finish(raw.finish_reason, raw.stop_reason)
            stops.set_stop(choice, stop)
            if message.refusal is not None:
                choice.finish_reason = response_pb2.FINISH_REASON_REFUSAL
            content = raw.logprobs.content if raw.logprobs is not None else None
            refusal = raw.logprobs.refusal if raw.logprobs is not None else None
            if isinstance(content, bytes):  # the native builder's columns (it declines bodies with refusal tokens)
                if content:
                    self.adjust_native_logprobs(typed.columns(content, choice.logprobs))
                continue
            # The refusal's tokens come after the content's, as its part does.
            entries = [*(content or ()), *(refusal or ())]
            if entries:
                self.adjust_logprobs(typed.columns(entries, choice.logprobs))
            elif content is None and refusal is None:
                facts.lack_logprobs(choice.index)
        usage = body.usage or (body.x_groq or {}).get("usage")  # Groq may report it inside `x_groq` only
        wire.usage_from(usage, out.usage, input_key="prompt_tokens", output_key="completion_tokens")
        if usage:
            wire.provider_timing(usage, out.timing)
        self.lift_extras(request, body, out, facts)
        if self._emulates_zero(request):
            zero_output.drop_output(out, f"this server ({self.name})")
        soft_errors.settle(request, out, facts)
        return out

    def adjust_logprobs(self, logprobs: logprobs_pb2.TokenLogprobs) -> logprobs_pb2.TokenLogprobs:
        """A hook for servers whose logprobs need more than the OpenAI shape (vLLM: ids, -inf clamp), in place."""
        return logprobs

    def adjust_native_logprobs(self, logprobs: logprobs_pb2.TokenLogprobs) -> logprobs_pb2.TokenLogprobs:
        """`adjust_logprobs` for the native builder's columns, which already have what `native_unclamp` says."""
        return self.adjust_logprobs(logprobs)

    def lift_extras(
        self, request: request_pb2.Request, body: typed.ChatCompletion, out: response_pb2.Response, facts: Facts
    ) -> None:
        """A hook for a dialect's extensions of the body (vLLM: prompt token ids and prompt logprobs)."""

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return ChatStreamLifter(self, request)
