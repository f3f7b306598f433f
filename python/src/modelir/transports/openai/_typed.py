"""Typed (msgspec) decoders for OpenAI chat completion and Responses bodies: the one unary lift of each wire.

Decoding straight into typed structs never builds the generic dicts, which is most of the cost of a
logprob-heavy body (2,000 tokens with 20 alternatives each is about 3 MB of JSON and 40,000 small objects).
A body that does not fit them raises `msgspec.ValidationError`, which the lifts report as a typed
`MalformedResponseError` naming the field. Responses output items are decoded one by one, so an item of a type
these structs do not know is reported as a warning and the rest is still lifted.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import orjson

from modelir.logprobs import build as lp
from modelir.logprobs import native
from modelir.transports.openai import _wire as wire
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
    refusal: list[LogprobEntry] | None = None  # the tokens of `message.refusal`


class FunctionCall(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class ToolCall(msgspec.Struct):
    id: str | None = None
    function: FunctionCall | None = None


class Message(msgspec.Struct):
    content: str | None = None
    reasoning_details: list[msgspec.Raw] | None = None  # OpenRouter's reasoning entries, with their signatures
    refusal: str | None = None
    annotations: list[msgspec.Raw] | None = None  # `url_citation`s of the content (search models)
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
    service_tier: str | None = None
    choices: list[Choice] | None = None
    usage: dict | None = None
    x_groq: dict | None = None  # Groq's extensions (`usage` where the top level has none)
    prompt_logprobs: list | None = None  # vLLM
    prompt_token_ids: list[int] | None = None  # vLLM


# The Responses API: output items are tagged by `type`. A body with an item of another type is decoded again with
# its items left raw, and each is decoded on its own (`output_item`): the other types are kept as `RawItem`s.
class SummaryText(msgspec.Struct):
    text: str = ""


class ReasoningText(msgspec.Struct):
    text: str = ""


class ReasoningItem(msgspec.Struct, tag_field="type", tag="reasoning"):
    id: str | None = None
    summary: list[SummaryText] | None = None
    encrypted_content: str | None = None
    content: list[ReasoningText] | None = None  # raw reasoning text (gpt-oss servers: `reasoning_text` entries)


class OutputText(msgspec.Struct, tag_field="type", tag="output_text"):
    text: str = ""
    logprobs: list[LogprobEntry] | None = None
    annotations: list[msgspec.Raw] | None = None  # kept raw: a citation the IR does not model travels verbatim


class Refusal(msgspec.Struct, tag_field="type", tag="refusal"):
    refusal: str = ""


class MessageItem(msgspec.Struct, tag_field="type", tag="message"):
    id: str | None = None
    content: list[OutputText | Refusal] | None = None
    phase: str | None = None  # `commentary` or `final_answer`


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
    service_tier: str | None = None


class _ItemByItem(ResponseObject):
    """The same object with its output items left raw, for a body with an item type the structs do not know."""

    output: list[msgspec.Raw] | None = None  # type: ignore[assignment]


class _ItemType(msgspec.Struct):
    type: str | None = None


class RawItem(msgspec.Struct):
    """An output item of a type the structs above do not know (hosted tools, compaction, anything newer): its type,
    its JSON as a value, and that value as compact JSON text (the same text whether it came in a unary body or a
    stream event, however the sender spaced it)."""

    type: str
    value: dict
    text: str


CHAT_DECODER = msgspec.json.Decoder(ChatCompletion)
_ITEM_TYPE = msgspec.json.Decoder(_ItemType)
_ITEM = msgspec.json.Decoder(ReasoningItem | MessageItem | FunctionCallItem)
_OBJECT_VALUE = msgspec.json.Decoder(dict)
KNOWN_ITEM_TYPES = frozenset({"reasoning", "message", "function_call"})
Item = ReasoningItem | MessageItem | FunctionCallItem | RawItem


def output_item(raw: ReasoningItem | MessageItem | FunctionCallItem | msgspec.Raw) -> Item:
    """One output item, typed; or, for a type these structs do not know, the item as a `RawItem`."""
    if not isinstance(raw, msgspec.Raw):
        return raw
    kind = _ITEM_TYPE.decode(raw).type
    if kind not in KNOWN_ITEM_TYPES:
        return raw_item(_OBJECT_VALUE.decode(raw))
    return _ITEM.decode(raw)


def raw_item(value: dict) -> RawItem:
    return RawItem(type=str(value.get("type")), value=value, text=orjson.dumps(value).decode())


def raw_json(raw: msgspec.Raw) -> tuple[dict, str]:
    """A raw JSON object as (value, compact JSON text)."""
    value = _OBJECT_VALUE.decode(raw)
    return value, orjson.dumps(value).decode()


def columns(
    entries: Sequence[LogprobEntry] | bytes, out: logprobs_pb2.TokenLogprobs | None = None
) -> logprobs_pb2.TokenLogprobs:
    """Typed entries -> columnar logprobs; the same result as `logprobs.from_openai_content` on the dicts.

    `bytes` are the columns the native fast path already built (see `chat_completion`): merged as they are.
    """
    if isinstance(entries, bytes):
        out = logprobs_pb2.TokenLogprobs() if out is None else out
        out.MergeFromString(entries)
        return out
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
    if native.wanted(body):
        try:
            return _native_response_object(body, event=event)
        except (msgspec.DecodeError, RecursionError, native.Unsupported):
            pass  # the typed structs below are the reference: they lift it, or raise the typed error
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


# ---- the native fast path (modelir.logprobs.native) ------------------------------------------------------------------
# The same structs with the logprob sections left raw (msgspec skips them without building objects); the native
# builder turns each into packed `TokenLogprobs` bytes, which stand where the entries would (`columns` merges them:
# None, b"" and non-empty bytes follow the same branches as None, [] and a list). A body either declines goes to
# the structs above, whole.
_NULL = msgspec.Raw(b"null")


class _RawChoiceLogprobs(msgspec.Struct):
    """A choice's `logprobs` with `content` left raw for the native builder; `refusal` is decoded (and checked) by
    msgspec as the typed structs do, in the same single pass over the body."""

    content: msgspec.Raw = _NULL
    refusal: list[LogprobEntry] | None = None


class _RawLogprobsChoice(Choice):
    logprobs: _RawChoiceLogprobs | None = None  # type: ignore[assignment]


class _RawLogprobsCompletion(ChatCompletion):
    choices: list[_RawLogprobsChoice] | None = None  # type: ignore[assignment]


class _RawOutputText(OutputText, tag="output_text"):
    logprobs: msgspec.Raw = _NULL  # type: ignore[assignment]


class _RawMessageItem(MessageItem, tag="message"):
    content: list[_RawOutputText | Refusal] | None = None  # type: ignore[assignment]


class _RawResponseObject(ResponseObject):
    output: list[ReasoningItem | _RawMessageItem | FunctionCallItem] | None = None  # type: ignore[assignment]


class _RawResponseEvent(msgspec.Struct):
    response: _RawResponseObject | None = None


_RAW_CHAT = msgspec.json.Decoder(_RawLogprobsCompletion)
NativeChatCompletion = _RawLogprobsCompletion  # what `native_chat` takes (`accounting_typed` closes it too)
_RAW_OBJECT = msgspec.json.Decoder(_RawResponseObject)
_RAW_EVENT = msgspec.json.Decoder(_RawResponseEvent)


def chat_completion(body: bytes, transport: str, *, unclamp: bool = False) -> ChatCompletion:
    """A chat completion body, typed; each choice's `logprobs.content` is the native builder's bytes when the
    extension is there and takes the body (`unclamp`: vLLM's -9999.0 already read as -inf), else the typed entries
    (the reference)."""
    if native.wanted(body):
        try:
            return native_chat(_RAW_CHAT.decode(body), unclamp=unclamp)
        except (msgspec.DecodeError, RecursionError, native.Unsupported):
            pass  # the typed structs are the reference: they lift it, or raise the typed error
    return wire.decode(CHAT_DECODER, body, transport)


def native_chat(parsed: _RawLogprobsCompletion, *, unclamp: bool = False) -> ChatCompletion:
    """A chat completion decoded with its logprob sections raw (`NativeChatCompletion`), each built by the native
    builder in place (`unclamp`: vLLM's -9999.0 read as -inf). Raises `native.Unsupported` (or a decode error) for
    what the builder declines."""
    for choice in parsed.choices or ():
        section = choice.logprobs
        if section is None:
            continue  # no logprobs: as the typed structs give it
        if section.refusal is not None:
            raise native.Unsupported("refusal logprobs")  # the builder reads `content` only
        built = native.entries(section.content, unclamp=unclamp)
        choice.logprobs = ChoiceLogprobs(content=built)  # type: ignore[arg-type,assignment]
    return parsed


def _native_response_object(body: bytes, *, event: bool) -> ResponseObject:
    parsed = (_RAW_EVENT.decode(body).response or _RawResponseObject()) if event else _RAW_OBJECT.decode(body)
    for item in parsed.output or ():
        if isinstance(item, _RawMessageItem):
            for content in item.content or ():
                if isinstance(content, _RawOutputText):
                    content.logprobs = native.entries(content.logprobs)  # type: ignore[assignment]
    return parsed
