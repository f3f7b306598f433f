"""Typed (msgspec) decoders for OpenAI chat completion and Responses bodies: the one unary lift of each wire.

Decoding straight into typed structs never builds the generic dicts, which is most of the cost of a
logprob-heavy body (2,000 tokens with 20 alternatives each is about 3 MB of JSON and 40,000 small objects).
A body that does not fit them raises `msgspec.ValidationError`, which the lifts report as a typed
`MalformedResponseError` naming the field. Responses output items are decoded one by one, so an item of a type
these structs do not know is reported as a warning and the rest is still lifted.
"""

from __future__ import annotations

import msgspec

from modelir import logprobs as lp
from modelir.v1 import logprobs_pb2


class TopLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None = None
    id: int | None = None  # llama.cpp


class LogprobEntry(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] | None = None
    id: int | None = None  # llama.cpp


class ChoiceLogprobs(msgspec.Struct):
    content: list[LogprobEntry] | None = None


class FunctionCall(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCall(msgspec.Struct):
    id: str | None = None
    function: FunctionCall | None = None


class Message(msgspec.Struct):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class Choice(msgspec.Struct):
    index: int = 0
    message: Message | None = None
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None  # vLLM
    token_ids: list[int] | None = None  # vLLM `return_token_ids`: the sampled ids


class ChatCompletion(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    choices: list[Choice] | None = None
    usage: dict | None = None
    prompt_logprobs: list | None = None  # vLLM
    prompt_token_ids: list[int] | None = None  # vLLM


# The Responses API: output items are tagged by `type`. A body with an item of another type is decoded again with
# its items left raw, and each is decoded on its own (`output_item`), so the unknown one is only warned about.
class SummaryText(msgspec.Struct):
    text: str = ""


class ReasoningItem(msgspec.Struct, tag_field="type", tag="reasoning"):
    id: str | None = None
    summary: list[SummaryText] | None = None
    encrypted_content: str | None = None


class OutputText(msgspec.Struct, tag_field="type", tag="output_text"):
    text: str = ""
    logprobs: list[LogprobEntry] | None = None


class Refusal(msgspec.Struct, tag_field="type", tag="refusal"):
    refusal: str = ""


class MessageItem(msgspec.Struct, tag_field="type", tag="message"):
    id: str | None = None
    content: list[OutputText | Refusal] | None = None


class FunctionCallItem(msgspec.Struct, tag_field="type", tag="function_call"):
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class IncompleteDetails(msgspec.Struct):
    reason: str | None = None


class ResponseObject(msgspec.Struct):
    id: str | None = None
    model: str | None = None
    status: str | None = None
    output: list[ReasoningItem | MessageItem | FunctionCallItem] | None = None
    usage: dict | None = None
    error: dict | None = None
    incomplete_details: IncompleteDetails | None = None


class _ItemByItem(ResponseObject):
    """The same object with its output items left raw, for a body with an item type the structs do not know."""

    output: list[msgspec.Raw] | None = None  # type: ignore[assignment]


class _ItemType(msgspec.Struct):
    type: str | None = None


CHAT_DECODER = msgspec.json.Decoder(ChatCompletion)
_ITEM_TYPE = msgspec.json.Decoder(_ItemType)
_ITEM = msgspec.json.Decoder(ReasoningItem | MessageItem | FunctionCallItem)
KNOWN_ITEM_TYPES = frozenset({"reasoning", "message", "function_call"})


def output_item(
    raw: ReasoningItem | MessageItem | FunctionCallItem | msgspec.Raw,
) -> ReasoningItem | MessageItem | FunctionCallItem | str:
    """One output item, typed; or the type name of an item these structs do not know."""
    if not isinstance(raw, msgspec.Raw):
        return raw
    kind = _ITEM_TYPE.decode(raw).type
    if kind not in KNOWN_ITEM_TYPES:
        return str(kind)
    return _ITEM.decode(raw)


def columns(entries: list[LogprobEntry], out: logprobs_pb2.TokenLogprobs | None = None) -> logprobs_pb2.TokenLogprobs:
    """Typed entries -> columnar logprobs; the same result as `logprobs.from_openai_content` on the dicts."""
    tops = [e.top_logprobs or () for e in entries]
    flat = [t for top in tops for t in top]
    return lp.columns(
        out,
        tokens=[e.token for e in entries],
        logprobs=[e.logprob for e in entries],
        token_ids=[e.id for e in entries] if entries[0].id is not None else None,  # type: ignore[misc]
        token_bytes=lp.joined([e.bytes if e.bytes is not None else e.token.encode() for e in entries]),
        top_counts=list(map(len, tops)) if flat or entries[0].top_logprobs is not None else None,
        top_tokens=[t.token for t in flat],
        top_logprobs=[t.logprob for t in flat],
        top_token_ids=[t.id for t in flat] if flat and flat[0].id is not None else None,  # type: ignore[misc]
        top_token_bytes=lp.joined([t.bytes if t.bytes is not None else t.token.encode() for t in flat])
        if flat
        else None,
    )


class ResponseEvent(msgspec.Struct):
    """The envelope of `response.completed`, `response.incomplete` and `response.failed` stream events."""

    response: ResponseObject | None = None


class _ItemByItemEvent(msgspec.Struct):
    response: _ItemByItem | None = None


_OBJECT = msgspec.json.Decoder(ResponseObject)
_OBJECT_ITEM_BY_ITEM = msgspec.json.Decoder(_ItemByItem)
_EVENT = msgspec.json.Decoder(ResponseEvent)
_EVENT_ITEM_BY_ITEM = msgspec.json.Decoder(_ItemByItemEvent)


def response_object(body: bytes, *, event: bool = False) -> ResponseObject:
    """A Responses object (or the one in a final stream event): fully typed when every item type is known."""
    if not event:
        try:
            return _OBJECT.decode(body)
        except msgspec.ValidationError:
            return _OBJECT_ITEM_BY_ITEM.decode(body)
    try:
        envelope: ResponseEvent | _ItemByItemEvent = _EVENT.decode(body)
    except msgspec.ValidationError:
        envelope = _EVENT_ITEM_BY_ITEM.decode(body)
    return envelope.response or ResponseObject()
