"""The one lift of an OpenAI Responses object (the unary body, or the final object of a stream) into the IR.

From OpenAI's reference (https://platform.openai.com/docs/api-reference/responses/object): output items are
reasoning (with `summary` and `encrypted_content`), messages (output text with logprobs, or refusals) and function
calls, each with its item id; `status` and `incomplete_details.reason` say how the response ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.transports import provider_errors
from modelir.transports.openai import _typed as typed
from modelir.transports.openai import _wire as wire
from modelir.transports.openai import responses_items as items
from modelir.v1 import content_pb2, request_pb2, response_pb2

if TYPE_CHECKING:
    from modelir.transports.openai.responses import OpenAIResponses

ENCRYPTED = content_pb2.OPAQUE_ARTIFACT_KIND_ENCRYPTED_CONTENT
_INCOMPLETE = {
    "max_output_tokens": response_pb2.FINISH_REASON_LENGTH,
    "content_filter": response_pb2.FINISH_REASON_CONTENT_FILTER,
}


def decode(body: bytes, *, event: bool = False) -> typed.ResponseObject:
    """The typed object of a unary body or of a final stream event; shape errors are typed errors."""
    try:
        return typed.response_object(body, event=event)
    except msgspec.DecodeError as exc:
        raise wire.malformed("openai_responses", exc) from None


PHASES = {"commentary": content_pb2.MESSAGE_PHASE_COMMENTARY, "final_answer": content_pb2.MESSAGE_PHASE_FINAL_ANSWER}


def output_items(body: typed.ResponseObject) -> list[typed.Item]:
    """Each output item, typed, or raw for an item of a type the structs do not model."""
    try:
        return [typed.output_item(raw) for raw in body.output or ()]
    except msgspec.ValidationError as exc:
        raise wire.malformed("openai_responses", exc) from None


def finish(
    body: typed.ResponseObject, has_calls: bool, refused: bool
) -> tuple[response_pb2.FinishReason.ValueType, str]:
    status = body.status or ""
    if status == "incomplete":
        reason = (body.incomplete_details.reason if body.incomplete_details else None) or ""
        return _INCOMPLETE.get(reason, response_pb2.FINISH_REASON_OTHER), f"incomplete:{reason}" if reason else status
    if status == "failed":
        return response_pb2.FINISH_REASON_ERROR, status
    if status == "cancelled":
        return response_pb2.FINISH_REASON_OTHER, status
    if refused:
        return response_pb2.FINISH_REASON_REFUSAL, status
    if has_calls:
        return response_pb2.FINISH_REASON_TOOL_CALLS, status
    return response_pb2.FINISH_REASON_STOP, status


def lift_object(
    transport: OpenAIResponses, request: request_pb2.Request, body: typed.ResponseObject, out: response_pb2.Response
) -> soft_errors.Facts:
    """Fill `out` from a complete Responses object; returns the facts for the soft-error policy."""
    out.id = body.id or ""
    out.model = body.model or ""
    choice = out.choices.add(index=0)
    choice.message.role = content_pb2.ROLE_ASSISTANT
    issuer = transport.issuer(request)
    chunks = []
    has_calls = refused = saw_logprobs = False
    for item in output_items(body):
        if isinstance(item, typed.RawItem):
            choice.message.parts.extend(items.item_parts(item, issuer))
        elif isinstance(item, typed.ReasoningItem):
            choice.message.parts.append(reasoning_part(item, issuer))
        elif isinstance(item, typed.MessageItem):
            if item.phase in PHASES:
                choice.message.phase = PHASES[item.phase]
            for content in item.content or ():
                if isinstance(content, typed.Refusal):
                    refused = True
                    choice.message.parts.add(refusal=content.refusal, item_id=item.id or "")
                    continue
                part = choice.message.parts.add(text=content.text, item_id=item.id or "")
                part.citations.extend(items.citations(content.annotations, content.text))
                if content.logprobs is not None:
                    saw_logprobs = True
                    if content.logprobs:
                        chunks.append(content.logprobs)
        else:
            has_calls = True
            choice.message.parts.add(
                item_id=item.id or "",
                tool_call=content_pb2.ToolCall(
                    id=item.call_id or "", name=item.name or "", arguments_json=item.arguments or ""
                ),
            )
    if len(chunks) == 1:
        typed.columns(chunks[0], choice.logprobs)
    elif chunks:
        choice.logprobs.CopyFrom(lp.concat([typed.columns(c) for c in chunks]))
    choice.finish_reason, choice.raw_finish_reason = finish(body, has_calls, refused)
    wire.usage_from(body.usage, out.usage, input_key="input_tokens", output_key="output_tokens")
    out.service_tier = body.service_tier or ""
    facts = soft_errors.Facts()
    if isinstance(body.error, dict):
        facts.provider_error = provider_errors.mid_stream(body.error, "the response failed")
    # Logprobs travel on output text: a response without text has nowhere to carry them.
    if not saw_logprobs and any(p.WhichOneof("content") == "text" for p in choice.message.parts):
        facts.lack_logprobs(0)
    return facts


def reasoning_part(item: typed.ReasoningItem, issuer: content_pb2.Issuer) -> content_pb2.Part:
    """A reasoning item as a part: summaries, raw reasoning text (gpt-oss servers), the encrypted content as an
    artifact; the item id on the part only."""
    part = content_pb2.Part(item_id=item.id or "")
    part.reasoning.SetInParent()
    part.reasoning.summary.extend(s.text for s in item.summary or ())
    part.reasoning.text = "".join(c.text for c in item.content or ())
    if item.encrypted_content:
        part.artifacts.add(kind=ENCRYPTED, data=item.encrypted_content.encode(), issuer=issuer)
    return part
