"""The interface every model offers, local (`Model`) or remote (`RemoteModel`), and request building.

Subclasses implement the primitives (`arun`, `astream`, `avalidate`, `atokenize_request`, `capabilities`); the
sugar and the sync twins are written once, here, so code written against one runs unchanged against the other.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from modelir import logprobs as lp
from modelir import writing
from modelir.accumulate import StreamAccumulator
from modelir.v1 import (
    capabilities_pb2,
    content_pb2,
    logprobs_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    stream_pb2,
)

MessageLike = content_pb2.Message | tuple[str, str] | dict


@dataclass(frozen=True, slots=True)
class Score:
    """The result of `ascore`: the continuation's logprob sum and the accounting bits-per-byte needs."""

    logprob_sum: float
    token_count: int
    byte_count: int
    char_count: int
    scores: logprobs_pb2.InputScores

    @property
    def bits_per_byte(self) -> float:
        return lp.bits_per_byte(self.logprob_sum, self.byte_count)

    @property
    def perplexity(self) -> float:
        return math.exp(-self.logprob_sum / self.token_count)


class ModelInterface(ABC):
    """What a model offers. `name` is the name requests use."""

    name: str

    @property
    @abstractmethod
    def capabilities(self) -> capabilities_pb2.CapabilityManifest: ...

    async def acapabilities(self) -> capabilities_pb2.CapabilityManifest:
        """The manifest, from async code (a remote model fetches it without blocking the loop)."""
        return self.capabilities

    @abstractmethod
    async def arun(self, request: request_pb2.Request, *, deadline: float | None = None) -> response_pb2.Response:
        """Run one request. Hard failures raise `ModelError`; soft ones come back in `response.error`."""

    @abstractmethod
    def astream(
        self, request: request_pb2.Request, *, deadline: float | None = None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        """Stream the events of one request. Folding them gives what `arun` returns."""

    @abstractmethod
    async def avalidate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        """Check `request` against this model without running it."""

    @abstractmethod
    async def atokenize_request(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse: ...

    async def arun_streamed(self, request: request_pb2.Request) -> response_pb2.Response:
        """Run through `astream` and fold the events: the response `arun` would give."""
        accumulator = StreamAccumulator()
        async for event in self.astream(request):
            accumulator.add(event)
        return accumulator.response()

    # ---- tokenize ------------------------------------------------------------------------------------

    async def atokenize(
        self, text: str, context: str | None = None, *, add_special_tokens: bool = False
    ) -> service_pb2.TokenizeResponse:
        """The tokens of `text` as they come out when it follows `context`."""
        return await self.atokenize_request(
            service_pb2.TokenizeRequest(
                model=self.name, text=text, context=context or "", add_special_tokens=add_special_tokens
            )
        )

    # ---- sugar ---------------------------------------------------------------------------------------

    async def agenerate(self, prompt: str, **options) -> response_pb2.Response:
        """Complete a raw prompt. `options` are `build_request` keywords (max_output_tokens, logprobs, ...)."""
        return await self.arun(build_request(self.name, prompt=prompt, **options))

    async def achat(self, messages: Iterable[MessageLike], **options) -> response_pb2.Response:
        """Continue a conversation. Messages are `Message`s, `(role, text)` pairs or `{role, content}` dicts."""
        return await self.arun(build_request(self.name, messages=messages, **options))

    async def ascore(self, context: str, continuation: str, *, top_k: int = 0) -> Score:
        """Score `continuation` after `context`; `.bits_per_byte` and `.perplexity` come with the result."""
        request = build_request(self.name, prompt=context, max_output_tokens=0)
        request.input_scoring.continuation_text = continuation
        request.input_scoring.top_k = top_k
        response = await self.arun(request)
        s = response.input_scores
        return Score(s.logprob_sum, s.token_count, s.byte_count, s.char_count, s)

    # ---- sync twins for scripts ----------------------------------------------------------------------

    def run(self, request: request_pb2.Request) -> response_pb2.Response:
        return _sync(self.arun(request))

    def stream(self, request: request_pb2.Request) -> Iterator[stream_pb2.StreamEvent]:
        return iter(_sync(_collect(self.astream(request))))

    def generate(self, prompt: str, **options) -> response_pb2.Response:
        return _sync(self.agenerate(prompt, **options))

    def chat(self, messages: Iterable[MessageLike], **options) -> response_pb2.Response:
        return _sync(self.achat(messages, **options))

    def score(self, context: str, continuation: str, *, top_k: int = 0) -> Score:
        return _sync(self.ascore(context, continuation, top_k=top_k))

    def tokenize(self, text: str, context: str | None = None, **options) -> service_pb2.TokenizeResponse:
        return _sync(self.atokenize(text, context, **options))

    def validate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        return _sync(self.avalidate(request))


# ---- request building ------------------------------------------------------------------------------

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
        request.logprobs.top_k = top_logprobs
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


# ---- sync plumbing ---------------------------------------------------------------------------------

_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    """One private loop in a daemon thread, so sync calls work inside and outside running loops."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="modelir-sync", daemon=True).start()
        return _loop


def _sync(coro):
    return asyncio.run_coroutine_threadsafe(coro, _background_loop()).result()


async def _collect(events: AsyncIterator[stream_pb2.StreamEvent]) -> list[stream_pb2.StreamEvent]:
    return [event async for event in events]
