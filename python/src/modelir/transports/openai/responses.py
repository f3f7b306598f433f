"""OpenAI Responses (`POST /responses`): the manifest and the lowering into input items and instructions.

From OpenAI's reference (https://platform.openai.com/docs/api-reference/responses/create) and its reasoning guide
(https://platform.openai.com/docs/guides/reasoning): a reasoning item is replayed with its `id`, `summary` and
`encrypted_content`, together with the item that followed it (with that item's id), or the API answers 400;
`include: ["reasoning.encrypted_content"]` makes stateless replay possible. The lift is in `responses_lift`, the
stream lift in `responses_stream`.
"""

from __future__ import annotations

from typing import Any

from modelir.errors import soft as soft_errors
from modelir.pipeline import content_kinds
from modelir.pipeline.survey import Survey, survey
from modelir.transports import _common as common
from modelir.transports.base import HttpResponse, StreamLifter
from modelir.transports.manifests import CHAT_WITH_TOOLS, COMMON, LOGPROBS, capability_set
from modelir.transports.openai import _wire as wire
from modelir.transports.openai import responses_items as items
from modelir.transports.openai import responses_lift
from modelir.transports.openai.embed import OpenAIEmbeddings
from modelir.transports.openai.responses_stream import ResponsesStreamLifter
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2, response_pb2

ENCRYPTED = responses_lift.ENCRYPTED
_SUMMARIES = {
    request_pb2.REASONING_SUMMARY_AUTO: "auto",
    request_pb2.REASONING_SUMMARY_CONCISE: "concise",
    request_pb2.REASONING_SUMMARY_DETAILED: "detailed",
}
PROVIDER_OPTION_KEYS = tuple(sorted((*wire.OPTION_KEYS, "background", "max_tool_calls", "truncation")))
_ROLES = {
    content_pb2.ROLE_SYSTEM: "system",
    content_pb2.ROLE_DEVELOPER: "developer",
    content_pb2.ROLE_USER: "user",
    content_pb2.ROLE_ASSISTANT: "assistant",
}


_PHASE_NAMES = {v: k for k, v in responses_lift.PHASES.items()}
# The hosted tools this wire declares (`Tool.provider.type`, with its configuration merged in).
PROVIDER_TOOL_TYPES = (
    "code_interpreter",
    "file_search",
    "image_generation",
    "mcp",
    "web_search",
    "web_search_preview",
)
_MESSAGE_KINDS = ("text", "refusal")
# The `include` entry that returns each hosted tool's results (https://platform.openai.com/docs/api-reference/responses/create).
_TOOL_RESULTS = {
    "code_interpreter": "code_interpreter_call.outputs",
    "file_search": "file_search_call.results",
    "web_search": "web_search_call.action.sources",
}

_SAMPLING = (
    "temperature top_p max_output_tokens"  # IR sampling fields, as `ir_name:native_name` where this wire renames them
)


class OpenAIResponses(wire.BodyTransport, OpenAIEmbeddings):
    name = "openai_responses"
    answer_keys = ("output",)  # see HttpTransport.answer_keys
    path = "/responses"
    capabilities = capability_set(
        COMMON | CHAT_WITH_TOOLS | LOGPROBS,
        "REASONING REASONING_EFFORT REASONING_SUMMARY CONSTRAINT_JSON_SCHEMA CONSTRAINT_JSON_OBJECT "
        "PROVIDER_TOOLS ALLOWED_TOOLS SERVER_TOOL_REPLAY EMBEDDINGS",  # EMBEDDINGS: `/embeddings` (`openai.embed`)
    )
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=1)
    provider_option_keys = PROVIDER_OPTION_KEYS
    provider_tool_types = tuple(PROVIDER_TOOL_TYPES)
    part_kinds = content_kinds.chat_kinds(
        "OpenAI Responses",
        refusal=content_kinds.CARRIED,
        server_tool_call=content_kinds.CARRIED,
        server_tool_result=content_kinds.CARRIED,
        provider_part=content_kinds.CARRIED,
        compaction=content_kinds.CARRIED,
    )

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        return self.wire_unsupported_surveyed(request, survey(request), streaming=streaming)

    def wire_unsupported_surveyed(
        self, request: request_pb2.Request, seen: Survey, *, streaming: bool = False
    ) -> list[str]:
        reasons = []
        if request.reasoning_controls.include_thoughts:
            reasons.append(
                "OpenAI Responses return reasoning summaries, not reasoning text: use reasoning.summary "
                "instead of reasoning.include_thoughts."
            )
        for i, (message, noted) in enumerate(zip(request.conversation.messages, seen.messages, strict=True)):
            own = [(j, part, kind) for j, k, part, kind, _ in noted.parts if k < 0]
            for j, part, kind in own:
                where = f"conversation.messages[{i}].parts[{j}]"
                if kind == "reasoning":
                    if not part.item_id:
                        reasons.append(f"A replayed reasoning item needs its item id ({where}.item_id).")
                    following = own[j + 1][1] if j + 1 < len(own) else None
                    if following is None or not following.item_id:
                        # The API answers 400 "provided without its required following item" otherwise.
                        reasons.append(
                            f"A replayed reasoning item must be followed by the item that followed it, with its "
                            f"item id ({where})."
                        )
                    for artifact in part.artifacts:
                        if artifact.kind != ENCRYPTED:
                            reasons.append(f"OpenAI Responses take only encrypted reasoning content ({where}).")
                elif kind == "tool_result" and part.tool_result.failed:
                    reasons.append(
                        f"OpenAI Responses cannot mark a tool result as failed ({where}.tool_result.failed)."
                    )
                elif kind == "blob" and not part.blob.mime_type.startswith("image/"):
                    reasons.append(f"Only image blobs are supported here, not {part.blob.mime_type!r} ({where}).")
                elif kind == "refusal" and not part.item_id:
                    reasons.append(f"A replayed refusal needs the item id of its message ({where}.item_id).")
                if part.citations:
                    for k, cited in enumerate(part.citations):
                        if not cited.native_json and cited.kind not in items.REPLAYED_CITATION_KINDS:
                            reasons.append(f"OpenAI Responses cite only URLs and files ({where}.citations[{k}].kind).")
            if message.role == content_pb2.ROLE_ASSISTANT:
                reasons.extend(items.replay_problems(list(message.parts), f"conversation.messages[{i}].parts[{{}}]"))
        reasons += common.non_text_tool_results(request, "OpenAI Responses", seen)
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        messages = list(request.conversation.messages)
        instructions = []
        while (
            messages
            and messages[0].role in (content_pb2.ROLE_SYSTEM, content_pb2.ROLE_DEVELOPER)
            and all(p.WhichOneof("content") == "text" for p in messages[0].parts)
        ):
            instructions.append("".join(p.text for p in messages.pop(0).parts))
        body: dict[str, Any] = {"model": self.model_for(request), "input": self._items(messages)}
        if instructions:
            body["instructions"] = "\n\n".join(instructions)
        common.copy_sampling(request.sampling, body, _SAMPLING)
        if request.tools:
            body["tools"] = [self._tool(t) for t in request.tools]
        choice = wire.tool_choice(request, lambda name: {"type": "function", "name": name})
        if request.tool_choice.WhichOneof("choice") == "allowed_tools":
            allowed = request.tool_choice.allowed_tools
            choice = {
                "type": "allowed_tools",
                "mode": wire.allowed_mode(allowed),
                "tools": [self._allowed(request, name) for name in allowed.tool_names],
            }
        if choice is not None:
            body["tool_choice"] = choice
        include = []
        if request.HasField("reasoning_controls"):
            reasoning: dict[str, Any] = {}
            if request.reasoning_controls.WhichOneof("amount") == "effort":
                reasoning["effort"] = wire.EFFORTS[request.reasoning_controls.effort]
            if request.reasoning_controls.summary:
                reasoning["summary"] = _SUMMARIES[request.reasoning_controls.summary]
            body["reasoning"] = reasoning
            # Without the encrypted content, the reasoning could not be replayed statelessly next turn.
            include.append("reasoning.encrypted_content")
        if request.constraint.WhichOneof("kind") == "json_schema":
            body["text"] = {
                "format": {"type": "json_schema", **wire.json_schema_format(request.constraint.json_schema)}
            }
        elif request.constraint.WhichOneof("kind") == "json_object":
            body["text"] = {"format": {"type": "json_object"}}
        if request.HasField("logprob_options"):
            include.append("message.output_text.logprobs")
            if request.logprob_options.top_logprob_count:
                body["top_logprobs"] = request.logprob_options.top_logprob_count
        # A hosted tool's results travel only when asked for; without them its result part would be empty.
        include.extend(
            _TOOL_RESULTS[t.provider.type]
            for t in request.tools
            if t.WhichOneof("kind") == "provider" and t.provider.type in _TOOL_RESULTS
        )
        if include:
            body["include"] = list(dict.fromkeys(include))
        if stream:
            body["stream"] = True
        body.update(common.provider_options(request, self.name))
        return body

    @staticmethod
    def _tool(tool: request_pb2.Tool) -> dict[str, Any]:
        if tool.WhichOneof("kind") == "provider":
            return {"type": tool.provider.type, **wire.config(tool.provider.config_json)}
        return {"type": "function", **wire.function_tool(tool)}

    @staticmethod
    def _allowed(request: request_pb2.Request, name: str) -> dict[str, Any]:
        """An allowed tool by name: a function tool, or a hosted tool by its type or name (an MCP server with its
        label)."""
        for tool in request.tools:
            if tool.WhichOneof("kind") != "provider":
                continue
            config = wire.config(tool.provider.config_json)
            if name not in (tool.provider.type, tool.provider.name):
                continue
            if tool.provider.type == "mcp" and config.get("server_label"):
                return {"type": "mcp", "server_label": config["server_label"]}
            return {"type": tool.provider.type}
        return {"type": "function", "name": name}

    def _content(self, parts: list[content_pb2.Part]) -> list[dict[str, Any]] | str:
        if len(parts) == 1 and parts[0].WhichOneof("content") == "text":
            return parts[0].text
        out: list[dict[str, Any]] = []
        for part in parts:
            kind = part.WhichOneof("content")
            if kind == "text":
                out.append({"type": "input_text", "text": part.text})
            elif kind == "blob":  # the API requires a detail level
                out.append({"type": "input_image", "image_url": wire.blob_url(part.blob), "detail": "auto"})
            else:
                raise self.not_carried(kind)
        return out

    def _items(self, messages: list[content_pb2.Message]) -> list[dict[str, Any]]:
        """IR messages -> input items. Assistant parts become output items in order, with their ids."""
        items_out: list[dict[str, Any]] = []
        for message in messages:
            pending: list[content_pb2.Part] = []
            start = len(items_out)
            for part in message.parts:
                kind = part.WhichOneof("content")
                if kind == "tool_result":
                    self._flush(items_out, message.role, pending)
                    result = part.tool_result
                    output = "".join(p.text for p in result.content if p.WhichOneof("content") == "text")
                    items_out.append({"type": "function_call_output", "call_id": result.tool_call_id, "output": output})
                elif message.role != content_pb2.ROLE_ASSISTANT:
                    pending.append(part)
                elif kind in _MESSAGE_KINDS and part.item_id and self._extends(items_out, part):
                    items_out[-1]["content"].append(self._message_content(part))
                elif kind == "server_tool_call":
                    continue  # its result part carries the whole native item
                else:
                    items_out.append(self._output_item(part, kind))
            self._flush(items_out, message.role, pending)
            if message.phase:
                self._set_phases(items_out[start:], _PHASE_NAMES[message.phase])
        return items_out

    @staticmethod
    def _extends(items_out: list[dict[str, Any]], part: content_pb2.Part) -> bool:
        """Whether `part` is further content of the message item just emitted (same item id)."""
        last = items_out[-1] if items_out else {}
        return last.get("type") == "message" and last.get("id") == part.item_id

    @staticmethod
    def _set_phases(turn: list[dict[str, Any]], phase: str) -> None:
        """The message's phase on its last message item; the ones before it in the same turn were commentary
        (the documented meaning of the two phases), since the IR keeps one phase per message."""
        messages = [item for item in turn if item.get("type") == "message" or item.get("role") == "assistant"]
        for k, item in enumerate(messages):
            item["phase"] = phase if k == len(messages) - 1 else "commentary"

    @staticmethod
    def _message_content(part: content_pb2.Part) -> dict[str, Any]:
        if part.WhichOneof("content") == "refusal":
            return {"type": "refusal", "refusal": part.refusal}
        return {"type": "output_text", "text": part.text, "annotations": items.annotations_of(part)}

    def _output_item(self, part: content_pb2.Part, kind: str | None) -> dict[str, Any]:
        if kind == "reasoning":
            item: dict[str, Any] = {
                "type": "reasoning",
                "id": part.item_id,
                "summary": [{"type": "summary_text", "text": s} for s in part.reasoning.summary],
            }
            if part.reasoning.text:  # raw reasoning, as compatible servers (gpt-oss) return it
                item["content"] = [{"type": "reasoning_text", "text": part.reasoning.text}]
            for artifact in part.artifacts:
                item["encrypted_content"] = artifact.data.decode()
            return item
        if kind == "tool_call":
            call = part.tool_call
            item = {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments_json}
            if part.item_id:
                item["id"] = part.item_id
            return item
        if kind in _MESSAGE_KINDS:
            if not part.item_id:
                return {"role": "assistant", "content": part.text}
            return {
                "type": "message",
                "role": "assistant",
                "id": part.item_id,
                "status": "completed",
                "content": [self._message_content(part)],
            }
        if (replayed := items.replay_item(part)) is not None:
            return replayed
        raise self.not_carried(kind)

    def _flush(
        self, items: list[dict[str, Any]], role: content_pb2.Role.ValueType, pending: list[content_pb2.Part]
    ) -> None:
        """Emit the user/system parts gathered so far as one input message."""
        if pending:
            items.append({"role": _ROLES[role], "content": self._content(pending)})
            pending.clear()

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        out = response_pb2.Response()
        facts = responses_lift.lift_object(self, request, responses_lift.decode(response.body), out)
        soft_errors.settle(request, out, facts)
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return ResponsesStreamLifter(self, request)
