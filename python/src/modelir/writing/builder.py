"""Building requests from keywords: `build_request`, `message`, and the message shorthands the sugar accepts.

`build_request` sets the common fields only; anything else is set on the returned message itself, so the
keywords never grow into a second, partial copy of the spec.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any, Unpack

from modelir import writing
from modelir.v1 import content_pb2, request_pb2
from modelir.writing.arguments import ArgumentError, unknown_keyword
from modelir.writing.content import image
from modelir.writing.options import EXTRA_KEYWORDS, ExtraOptions

# What `achat` and `build_request(messages=...)` accept for one message: a `Message`, a `(role, text)` pair, or a
# `{"role", "content"}` dict whose content is text or a list of OpenAI-style parts (`text`, `image_url`).
MessageLike = content_pb2.Message | tuple[str, str] | dict[str, Any]
# ... and for the whole conversation: those, or one string (a single user message).
MessagesLike = str | Iterable[MessageLike]

_ROLES = {
    "system": content_pb2.ROLE_SYSTEM,
    "developer": content_pb2.ROLE_DEVELOPER,
    "user": content_pb2.ROLE_USER,
    "assistant": content_pb2.ROLE_ASSISTANT,
    "tool": content_pb2.ROLE_TOOL,
}
_SHORTHANDS = 'a Message, a (role, text) pair or a {"role": ..., "content": ...} dict'
_OPENAI_PARTS = '{"type": "text", "text": ...} or {"type": "image_url", "image_url": {"url": ...}}'


def message(role: str, text: str) -> content_pb2.Message:
    """A message with one text part: `message("user", "hi")`."""
    if role not in _ROLES:
        raise ArgumentError("role", f"one of {', '.join(map(repr, _ROLES))}", role)
    if not isinstance(text, str):
        raise ArgumentError("content", "the message's text (for images and parts: modelir.chat_message)", text)
    return content_pb2.Message(role=_ROLES[role], parts=[content_pb2.Part(text=text)])


def messages_of(messages: MessagesLike, field: str = "messages") -> list[content_pb2.Message]:
    """The conversation from its shorthands; one string is one user message (the only thing it can mean)."""
    if isinstance(messages, str):
        return [message("user", messages)]
    if isinstance(messages, content_pb2.Message | dict) or _is_pair(messages):
        hint = "a conversation is a list of messages: wrap this one in [...]"
        raise ArgumentError(field, f"a list of messages ({_SHORTHANDS}) or one string", messages, hint=hint)
    try:
        items = list(messages)
    except TypeError:
        raise ArgumentError(field, f"a list of messages ({_SHORTHANDS}) or one string", messages) from None
    return [_as_message(item, f"{field}[{i}]") for i, item in enumerate(items)]


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item)


def _as_message(item: MessageLike, field: str) -> content_pb2.Message:
    if isinstance(item, content_pb2.Message):
        return item
    if _is_pair(item):
        return message(*item)
    if isinstance(item, dict):
        return _from_dict(item, field)
    hint = 'e.g. ("user", "Hello") or {"role": "user", "content": "Hello"}'
    raise ArgumentError(field, _SHORTHANDS, item, hint=hint)


def _from_dict(item: dict[str, Any], field: str) -> content_pb2.Message:
    if "role" not in item or "content" not in item:
        raise ArgumentError(field, 'a dict with "role" and "content"', item)
    extra = sorted(k for k, v in item.items() if k not in ("role", "content", "name") and v is not None)
    if extra:
        hint = "tool calls and results: replay view(r).assistant_message and use modelir.tool_result"
        raise ArgumentError(f"{field}.{extra[0]}", 'only "role", "content" and "name"', item[extra[0]], hint=hint)
    content = item["content"]
    if isinstance(content, str):
        out = message(item["role"], content)
    elif isinstance(content, list):
        if item["role"] not in _ROLES:
            raise ArgumentError(f"{field}.role", f"one of {', '.join(map(repr, _ROLES))}", item["role"])
        parts = [_openai_part(part, f"{field}.content[{i}]") for i, part in enumerate(content)]
        out = content_pb2.Message(role=_ROLES[item["role"]], parts=parts)
    else:
        raise ArgumentError(f"{field}.content", f"text, or a list of parts ({_OPENAI_PARTS})", content)
    if item.get("name"):
        out.name = item["name"]
    return out


def _openai_part(part: Any, field: str) -> content_pb2.Part:
    """One part of an OpenAI-style content list (or a plain string or `Part`)."""
    if isinstance(part, content_pb2.Part):
        return part
    if isinstance(part, str):
        return content_pb2.Part(text=part)
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text" and isinstance(part.get("text"), str):
        return content_pb2.Part(text=part["text"])
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if isinstance(url, str):
            return image(url, field=field)
    raise ArgumentError(field, f"text, a Part, or {_OPENAI_PARTS}", part, hint="other media: modelir.image(...)")


def build_request(
    model: str,
    *,
    prompt: str | None = None,
    messages: MessagesLike | None = None,
    token_ids: Sequence[int] | None = None,
    max_output_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    seed: int | None = None,
    stop: str | Sequence[str] = (),
    n: int = 0,
    logprobs: bool = False,
    top_logprobs: int = 0,
    choices: Sequence[str] | None = None,
    json_schema: str | None = None,
    prefill: str = "",
    timeout: float | None = None,
    **more: Unpack[ExtraOptions],
) -> request_pb2.Request:
    """Build a `Request` from keywords; `more` takes `writing.EXTRA_KEYWORDS` (tools, reasoning, system...).

    `messages` is one string (a user message) or a list of `Message`s, `(role, text)` pairs and `{role, content}`
    dicts (content: text, or OpenAI-style `text` and `image_url` parts). A keyword it does not take raises
    `ArgumentError` naming the nearest one it does (`max_tokens` -> `max_output_tokens`).
    """
    unknown = sorted(set(more) - set(EXTRA_KEYWORDS))
    if unknown:
        raise unknown_keyword(unknown[0], REQUEST_KEYWORDS, "build_request")
    request = request_pb2.Request(model=model)
    if prompt is not None:
        request.prompt = prompt
    elif messages is not None:
        request.conversation.messages.extend(messages_of(messages))
    elif token_ids is not None:
        request.token_ids.ids.extend(token_ids)
    s = request.sampling
    for name, value in (
        ("max_output_tokens", max_output_tokens),
        ("temperature", temperature),
        ("top_p", top_p),
        ("top_k", top_k),
        ("seed", seed),
    ):
        if value is not None:
            writing.set_sampling(s, name, value)
    s.stop.extend(writing.stop_sequences(stop))
    s.choice_count = n
    if logprobs or top_logprobs:
        request.logprob_options.top_logprob_count = top_logprobs
    if choices is not None:
        request.constraint.choice.labels.extend(choices)
    if json_schema is not None:
        request.constraint.json_schema.schema_json = json_schema
    request.prefill = prefill
    if timeout is not None:
        request.timeout.FromTimedelta(datetime.timedelta(seconds=timeout))
    return writing.apply(request, **more)


class RequestOptions(ExtraOptions, total=False):
    """Every keyword `chat`, `generate` and their async twins take: `build_request`'s own and `ExtraOptions`."""

    max_output_tokens: int | None
    """The most tokens to generate (0: score or tokenize without generating)."""
    temperature: float | None
    """The sampling temperature (0: greedy)."""
    top_p: float | None
    """Nucleus sampling: the probability mass to sample from, in (0, 1]."""
    top_k: int | None
    """Sample from the k most likely tokens only."""
    seed: int | None
    """The sampling seed, for repeatable answers where the provider honours it."""
    stop: str | Sequence[str]
    """A stop sequence, or several: generation ends at the first one produced."""
    n: int
    """How many choices to generate (0: the provider's default, one)."""
    logprobs: bool
    """Return the sampled tokens' logprobs (`view(r).logprobs`)."""
    top_logprobs: int
    """Return this many top alternatives at each position (implies `logprobs`)."""
    choices: Sequence[str] | None
    """Constrain the answer to one of these labels."""
    json_schema: str | None
    """Constrain the answer to JSON matching this schema (JSON text)."""
    prefill: str
    """Continue the assistant's answer from this text."""
    timeout: float | None
    """The most seconds the call may take."""


#: Every keyword `build_request` takes besides the model and the input.
REQUEST_KEYWORDS: tuple[str, ...] = tuple(RequestOptions.__annotations__)  # ExtraOptions's included


def with_model(request: request_pb2.Request, name: str) -> request_pb2.Request:
    named = request_pb2.Request()
    named.CopyFrom(request)
    named.model = name
    return named
