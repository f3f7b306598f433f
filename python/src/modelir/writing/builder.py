"""Building requests from keywords: `build_request`, `message`, and the message shorthands the sugar accepts.

`build_request` sets the common fields only; anything else is set on the returned message itself, so the
keywords never grow into a second, partial copy of the spec.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from modelir import writing
from modelir.v1 import content_pb2, request_pb2

# What `achat` and `build_request(messages=...)` accept for one message.
MessageLike = content_pb2.Message | tuple[str, str] | dict


_ROLES = {
    "system": content_pb2.ROLE_SYSTEM,
    "developer": content_pb2.ROLE_DEVELOPER,
    "user": content_pb2.ROLE_USER,
    "assistant": content_pb2.ROLE_ASSISTANT,
    "tool": content_pb2.ROLE_TOOL,
}


def message(role: str, text: str) -> content_pb2.Message:
    """A message with one text part: `message("user", "hi")`."""
    try:
        role_value = _ROLES[role]
    except KeyError:
        raise ValueError(f"unknown role {role!r}; one of {', '.join(_ROLES)}") from None
    return content_pb2.Message(role=role_value, parts=[content_pb2.Part(text=text)])


def _as_message(item: MessageLike) -> content_pb2.Message:
    if isinstance(item, content_pb2.Message):
        return item
    if isinstance(item, tuple):
        return message(*item)
    return message(item["role"], item["content"])


def build_request(
    model: str,
    *,
    prompt: str | None = None,
    messages: Iterable[MessageLike] | None = None,
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
    **more: Any,
) -> request_pb2.Request:
    """Build a `Request` from keywords; `more` takes `writing.EXTRA_KEYWORDS` (tools, reasoning, system...)."""
    request = request_pb2.Request(model=model)
    if prompt is not None:
        request.prompt = prompt
    elif messages is not None:
        request.conversation.messages.extend(_as_message(m) for m in messages)
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


def with_model(request: request_pb2.Request, name: str) -> request_pb2.Request:
    named = request_pb2.Request()
    named.CopyFrom(request)
    named.model = name
    return named
