"""The interface every model offers, local (`Model`) or remote (`RemoteModel`): primitives, sugar and sync twins.

Subclasses implement the primitives (`arun`, `astream`, `avalidate`, `atokenize_request`, `capabilities`); the
sugar and the sync twins are written once, here, so code written against one runs unchanged against the other.
Requests are built in `writing.builder`; the sync twins run on the loop in `sync`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Unpack

from modelir.logprobs import build as lp
from modelir.streams.fold import closing_stream, fold_stream
from modelir.sync import iterate_sync, run_sync
from modelir.v1 import capabilities_pb2, logprobs_pb2, request_pb2, response_pb2, service_pb2, stream_pb2
from modelir.writing.arguments import ArgumentError, require_request
from modelir.writing.builder import MessageLike, MessagesLike, RequestOptions, build_request, message, with_model

# Re-exported: these names were first defined here, and modules and users import them from here.
__all__ = ["MessageLike", "MessagesLike", "ModelInterface", "RequestOptions", "Score", "build_request", "message"]
__all__ += ["with_model"]


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

    def astream_batches(
        self, request: request_pb2.Request, *, deadline: float | None = None, merge: bool = False
    ) -> AsyncIterator[list[stream_pb2.StreamEvent]]:
        """`astream`'s events in the batches they arrive in (never empty; here one event each, a model that reads
        an upstream in pieces gives what each read brought). With `merge`, a run of text deltas may arrive as
        one, as `streams.coalesce` would merge them."""
        return _one_each(self.astream(request, deadline=deadline))

    @abstractmethod
    async def avalidate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        """Check `request` against this model without running it."""

    @abstractmethod
    async def atokenize_request(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse: ...

    async def atokenizer_info(self) -> capabilities_pb2.TokenizerInfo | None:
        """The model's tokenizer facts (vocabulary size, BOS and EOS ids) where they are known; None otherwise."""
        return None

    async def arender_prompt(self, request: request_pb2.Request) -> str | None:
        """The request's conversation as the model's chat template renders it, for models that can say
        (llama.cpp's `/apply-template`); None for the others. Nothing is generated."""
        return None

    async def arun_streamed(self, request: request_pb2.Request) -> response_pb2.Response:
        """Run through `astream` and fold the events: the response `arun` would give."""
        return await fold_stream(self.astream(request))  # closes the stream on any failure

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

    async def atokenize_messages(
        self,
        messages: MessagesLike,
        *,
        add_generation_prompt: bool = True,
        add_special_tokens: bool = False,
    ) -> service_pb2.TokenizeResponse:
        """The tokens of a conversation through the model's chat template, with the generation prompt (the start
        of the assistant's reply, as for generation) unless told not to. Needs `TOKENIZE_CONVERSATION`."""
        request = service_pb2.TokenizeRequest(
            model=self.name, add_generation_prompt=add_generation_prompt, add_special_tokens=add_special_tokens
        )
        request.conversation.CopyFrom(build_request(self.name, messages=messages).conversation)
        return await self.atokenize_request(request)

    # ---- sugar ---------------------------------------------------------------------------------------

    async def agenerate(self, prompt: str, **options: Unpack[RequestOptions]) -> response_pb2.Response:
        """Complete a raw prompt (needs `COMPLETION`; a chat-only model is refused up front: use `achat`).

        `options` are `build_request`'s keywords (`RequestOptions`): `max_output_tokens`, `temperature`, `stop`,
        `logprobs`, `top_logprobs`, `seed`, `choices`, `json_schema`, `reasoning`, `tools`, ... A keyword it does
        not take raises `ArgumentError` naming the nearest one (`max_tokens` -> `max_output_tokens`).
        """
        if not isinstance(prompt, str):
            raise ArgumentError("prompt", "the prompt text (for a conversation: achat)", prompt)
        return await self.arun(build_request(self.name, prompt=prompt, **options))

    async def achat(self, messages: MessagesLike, **options: Unpack[RequestOptions]) -> response_pb2.Response:
        """Continue a conversation (needs `CHAT`).

        `messages` is one string (a user message) or a list of `Message`s, `(role, text)` pairs and `{role,
        content}` dicts (content as text, or OpenAI-style `text` / `image_url` parts). `options` are
        `build_request`'s keywords (`RequestOptions`), as for `agenerate`.
        """
        return await self.arun(build_request(self.name, messages=messages, **options))

    async def ascore(self, context: str, continuation: str, *, top_k: int = 0) -> Score:
        """Score `continuation` after `context`; `.bits_per_byte` and `.perplexity` come with the result."""
        request = build_request(self.name, prompt=context, max_output_tokens=0)
        request.input_scoring.continuations.add(text=continuation)
        request.input_scoring.top_logprob_count = top_k
        response = await self.arun(request)
        s = response.input_scores[0]
        return Score(s.logprob_sum, s.scored_token_count, s.scored_byte_count, s.scored_char_count, s)

    # ---- sync twins for scripts ----------------------------------------------------------------------

    def run(self, request: request_pb2.Request) -> response_pb2.Response:
        """Run one request (`arun` from sync code). Hard failures raise `ModelError`; soft ones come back in
        `response.errors`."""
        return run_sync(self.arun(require_request(request, "run")))

    def stream(self, request: request_pb2.Request) -> Iterator[stream_pb2.StreamEvent]:
        """The events of one request, each as it arrives (not after the whole answer)."""
        return iterate_sync(self.astream(require_request(request, "stream")))

    def generate(self, prompt: str, **options: Unpack[RequestOptions]) -> response_pb2.Response:
        """Complete a raw prompt (`agenerate` from sync code; the same keywords, `RequestOptions`)."""
        return run_sync(self.agenerate(prompt, **options))

    def chat(self, messages: MessagesLike, **options: Unpack[RequestOptions]) -> response_pb2.Response:
        """Continue a conversation (`achat` from sync code): `model.chat("Hello")`, `model.chat([("system",
        "Be brief."), ("user", "Hello")], max_output_tokens=50)`; the keywords are `RequestOptions`."""
        return run_sync(self.achat(messages, **options))

    def score(self, context: str, continuation: str, *, top_k: int = 0) -> Score:
        """Score `continuation` after `context` (`ascore` from sync code)."""
        return run_sync(self.ascore(context, continuation, top_k=top_k))

    def tokenize(
        self, text: str, context: str | None = None, *, add_special_tokens: bool = False
    ) -> service_pb2.TokenizeResponse:
        """The tokens of `text` as they come out when it follows `context` (`atokenize` from sync code)."""
        return run_sync(self.atokenize(text, context, add_special_tokens=add_special_tokens))

    def tokenize_messages(
        self, messages: MessagesLike, *, add_generation_prompt: bool = True, add_special_tokens: bool = False
    ) -> service_pb2.TokenizeResponse:
        """The tokens of a conversation through the model's chat template (`atokenize_messages` from sync code)."""
        return run_sync(
            self.atokenize_messages(
                messages, add_generation_prompt=add_generation_prompt, add_special_tokens=add_special_tokens
            )
        )

    def validate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        """Check `request` against this model without running it (`avalidate` from sync code)."""
        return run_sync(self.avalidate(require_request(request, "validate")))


async def _one_each(events: AsyncIterator[stream_pb2.StreamEvent]) -> AsyncIterator[list[stream_pb2.StreamEvent]]:
    async with closing_stream(events):
        async for event in events:
            yield [event]
