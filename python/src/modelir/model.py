"""`Model`: a transport, an executor and a limiter behind one primitive, `arun(Request) -> Response`.

Every call goes the same way: the request pipeline (`pipeline.prepare`: validate the fields, check the
capabilities, naming every gap, apply the foreign-artifact policy, lower), then the limiter, then the transport
(in-process, or executor -> lift) under one deadline, which the executor sees too. The sugar lives in
`ModelInterface`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import gc
import time
from collections.abc import AsyncIterator, Callable

from modelir import errors, telemetry
from modelir.calls import embedding as embedding_calls
from modelir.calls import engine_facts, streaming
from modelir.calls import token_prompt as token_calls
from modelir.calls import tokenizer as tokenizer_calls
from modelir.calls.timing import stamp_timing
from modelir.errors.soft import received
from modelir.http.executor import Executor
from modelir.http.redaction import redact
from modelir.http.retry import timeout_for
from modelir.interface import ModelInterface
from modelir.limiter import BaseLimiter, Limiter
from modelir.limiter.budget import estimate_tokens, settle_tokens
from modelir.pipeline import media_policy
from modelir.pipeline import prepare as pipeline
from modelir.records import raw_exchange
from modelir.streams.fold import closing_stream, keeping_partial, keeping_partial_batches
from modelir.transports.base import (
    SHAPE_ERRORS,
    HttpResponse,
    HttpTransport,
    LocalTransport,
    Transport,
    guarded_error,
    shape_error,
    utf8_repaired,
)
from modelir.v1 import (
    capabilities_pb2,
    embedding_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    stream_pb2,
)
from modelir.writing.arguments import require_request
from modelir.writing.builder import with_model

# Seconds a call may take when neither the caller, the request nor the operator says: long enough for a long
# generation, short enough that an endless stream with no deadline cannot hold a connection and a limiter slot
# forever. `default_timeout=None` lifts it (the caller then owns every deadline).
DEFAULT_TIMEOUT = 600.0


class Model(ModelInterface):
    """One configured model. `limiter` may be shared with other models (e.g. one per API key).

    `default_timeout` (seconds, `DEFAULT_TIMEOUT` unless given) is the operator's bound on every call: a request's
    own `timeout` and a caller's deadline can only shorten it."""

    def __init__(
        self,
        transport: Transport,
        *,
        name: str | None = None,
        executor: Executor | None = None,
        limiter: BaseLimiter | None = None,
        manifest: capabilities_pb2.CapabilityManifest | None = None,
        default_timeout: float | None = DEFAULT_TIMEOUT,
        media: media_policy.MediaPolicy = media_policy.DEFAULT_POLICY,
    ) -> None:
        if isinstance(transport, HttpTransport) and executor is None:
            raise ValueError(f"transport {transport.name!r} speaks HTTP and needs an executor")
        self.transport = transport
        self.name = name or transport.name
        self.executor = executor
        self.limiter: BaseLimiter = limiter or Limiter()
        self._manifest = manifest or transport.manifest()
        self._pipeline = pipeline.Pipeline(transport, self._manifest, model=self.name)
        self.default_timeout = default_timeout
        self.media_policy = media  # which media URIs requests may carry to the provider (`media_policy`)
        self._tokenizer_info: capabilities_pb2.TokenizerInfo | None = None
        self._model_facts: dict[tuple[str, str, bytes], object] = {}  # what the transport learned (`engine_facts`)
        # Made once: a `functools.partial` per call is measurable on the hot path.
        self._error_from = _error_from(transport) if isinstance(transport, HttpTransport) else None

    @property
    def capabilities(self) -> capabilities_pb2.CapabilityManifest:
        return self._manifest

    @property
    def _error_mapping(self) -> Callable[[HttpResponse], errors.ModelError]:
        """The transport's error mapping for an answer that is not a success (HTTP transports only)."""
        assert self._error_from is not None, f"{self.transport.name} is not an HTTP transport"
        return self._error_from

    # ---- checks --------------------------------------------------------------------------------------

    def _prepare(self, request: request_pb2.Request, *, streaming: bool) -> pipeline.Prepared:
        """The request pipeline, under this model's name and (possibly narrowed) manifest."""
        if not request.model:
            request = with_model(request, self.name)
        return self._pipeline.prepare(request, streaming=streaming, media=self.media_policy)

    def _loop(self) -> asyncio.AbstractEventLoop | None:
        """The running loop when this model's executor knows it (it made its session there), else None."""
        return self.executor.loop if self.executor is not None else None

    def _redacted(self, exc: errors.ModelError) -> errors.ModelError:
        """`exc` without the configured credentials (a lift error can quote an answer that reflects one)."""
        return redact(exc, self.executor.secrets) if self.executor is not None else exc

    def _deadline(self, request: request_pb2.Request | None, deadline: float | None) -> float | None:
        """The earliest of the caller's deadline, the request's timeout and the operator's (monotonic): a request
        cannot ask for more time than the model is configured to give."""
        seconds = self.default_timeout
        if request is not None and request.HasField("timeout"):
            asked = request.timeout.seconds + request.timeout.nanos / 1e9
            seconds = asked if seconds is None else min(asked, seconds)
        if seconds is None:
            return deadline
        own = time.monotonic() + seconds
        return own if deadline is None or own < deadline else deadline

    # ---- the primitive -------------------------------------------------------------------------------

    async def arun(self, request: request_pb2.Request, *, deadline: float | None = None) -> response_pb2.Response:
        """Run one request. Hard failures raise `ModelError`; soft ones come back in `response.error`."""
        request = require_request(request, "arun")
        with telemetry.model_call(self, request) as call:
            return call.finish(await self._arun(request, deadline))

    async def _arun(self, request: request_pb2.Request, deadline: float | None) -> response_pb2.Response:
        prepared = self._prepare(request, streaming=False)
        if (split := pipeline.split_continuations(prepared.request, self.transport)) is not None:
            deadline = self._deadline(request, deadline)  # one deadline for all the calls
            calls = [self._arun(one, deadline) for one in split]
            return pipeline.merge_continuations(await asyncio.gather(*calls))
        request = prepared.request
        started = time.time()
        start_mono = time.monotonic()
        deadline = self._deadline(request, deadline)
        if engine_facts.learns_model_facts(type(self.transport)):  # (decided per class: no coroutine otherwise)
            await engine_facts.check(self, prepared, deadline)  # what the engine must say first (once per model)
        try:
            async with timeout_for(deadline, self._loop()):  # the one timeout of the call: limiter, HTTP and lift
                async with self.limiter.acquire(estimate := estimate_tokens(request), deadline=deadline):
                    queued = time.monotonic() - start_mono
                    token_in = token_calls.needs_resolving(self, prepared)
                    if token_in:
                        prepared = await token_calls.resolve(self, prepared, deadline)
                    response, attempts = await self._run_transport(prepared, deadline)
                    if token_in and not response.prompt_token_ids:
                        # a token-in conversation's prompt is the ids it was sent as: the engine saw exactly those
                        response.prompt_token_ids.extend(prepared.request.token_ids.ids)
        except TimeoutError:
            raise errors.DeadlineExceededError("the request's deadline expired") from None
        settle_tokens(self.limiter, estimate, response.usage)
        response.warnings.extend(prepared.warnings)
        stamp_timing(response.timing, started, queued, attempts)
        return response

    async def _run_transport(
        self, prepared: pipeline.Prepared, deadline: float | None
    ) -> tuple[response_pb2.Response, int]:
        transport, request = self.transport, prepared.request
        if isinstance(transport, LocalTransport):
            return await transport.run(request), 1
        assert isinstance(transport, HttpTransport) and self.executor is not None and prepared.native is not None
        assert self._error_from is not None
        # The deadline goes down too: the executor does not start a retry that would pass it (and does not arm a
        # second timeout for it: `_arun` runs the whole call under one).
        sent = await self.executor.send(
            prepared.native,
            error_from=self._error_from,
            deadline=deadline,
            observe=self.limiter.observe,
            deadline_enforced=True,
        )
        answer = sent.response
        body, damage = utf8_repaired(answer.body)
        if damage:
            answer = dataclasses.replace(answer, body=body)
        with paused_gc():
            try:
                transport.check_answer_shape(answer)
                response = transport.lift_accounted(request, answer)
            except errors.MalformedResponseError as exc:
                raise self._redacted(exc) from None
            except SHAPE_ERRORS as exc:  # the shape check's too: whatever the bytes, the caller sees a typed error
                raise self._redacted(shape_error(transport, exc)) from exc
        received(response, damage, self.executor.secrets)  # before anything else sees it
        if request.include_raw:  # kept here, once, so that any lift can be re-run from a stored response
            response.raw.CopyFrom(
                raw_exchange.exchange(
                    request,
                    prepared.native,
                    secrets=self.executor.secrets,
                    transport=transport.name,
                    status=sent.response.status,
                    answer_headers=sent.response.headers,
                    body=sent.response.body,
                )
            )
        return response, sent.attempts

    def astream(
        self, request: request_pb2.Request, *, deadline: float | None = None
    ) -> AsyncIterator[stream_pb2.StreamEvent]:
        """Stream the events of one request. Folding them gives what `arun` returns."""
        request = require_request(request, "astream")
        events = _unbatched(streaming.stream_batches(self, request, deadline))
        return telemetry.stream_call(self, request, keeping_partial(events))

    def astream_batches(
        self, request: request_pb2.Request, *, deadline: float | None = None, merge: bool = False
    ) -> AsyncIterator[list[stream_pb2.StreamEvent]]:
        """`astream`'s events in the batches they arrive in (what one read of the answer brought; never empty):
        a consumer that takes a batch at once pays per read what `astream` pays per event. With `merge`, a run of
        plain text chunks may arrive as one delta, as `streams.coalesce` merges them (the server's stream)."""
        request = require_request(request, "astream")
        batches = streaming.stream_batches(self, request, deadline, merge=merge)
        return telemetry.stream_call(self, request, keeping_partial_batches(batches))

    async def avalidate(self, request: request_pb2.Request) -> service_pb2.ValidateResponse:
        """Check `request` against this model without running it."""
        request = require_request(request, "avalidate")
        if not request.model:
            request = with_model(request, self.name)
        # `Validate` answers what a call would: a media URI the policy refuses is a field violation too, and what
        # the engine must say first (Ollama's vision) is asked as the call would ask it
        verdict = self._pipeline.report(request, media=self.media_policy)
        await engine_facts.validate(self, request, verdict)
        return verdict

    # ---- the tokenizer (calls/tokenizer.py) ---------------------------------------------------------------

    async def acapabilities(self) -> capabilities_pb2.CapabilityManifest:
        """`capabilities` as the engine's facts narrow it (an Ollama model without vision does not claim
        IMAGE_INPUT), asked as a call would ask, once, and kept (`calls/engine_facts`); as configured when the
        transport learns nothing or the facts cannot be learned."""
        return await engine_facts.manifest(self)

    async def atokenizer_info(self) -> capabilities_pb2.TokenizerInfo | None:
        """The model's tokenizer facts (`ModelInfo.tokenizer`): what the transport knows, or what the engine reports
        (asked once, then kept); None when neither says."""
        if self._tokenizer_info is None:
            self._tokenizer_info = await tokenizer_calls.tokenizer_info(self)
        return self._tokenizer_info

    @telemetry.tokenize_span("detokenize")
    async def adetokenize(self, token_ids: list[int]) -> str:
        """Token ids back to text, with the model's own tokenizer."""
        return await tokenizer_calls.detokenize(self, list(token_ids))

    async def arender_prompt(self, request: request_pb2.Request) -> str | None:
        """The conversation through the model's chat template, when its transport can render it (sdk-15)."""
        return await tokenizer_calls.render_prompt(self, request)

    async def around_trip(self, text: str) -> bool:
        """Whether detokenize(tokenize(text)) gives `text` back: a check of the tokenizer path, per model."""
        tokens = await self.atokenize(text)
        return await self.adetokenize(list(tokens.token_ids)) == text

    @telemetry.tokenize_span("tokenize")
    async def atokenize_request(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse:
        return await tokenizer_calls.tokenize(self, request)

    # ---- embed (IR 1.1) ----------------------------------------------------------------------------------

    async def aembed(
        self, request: embedding_pb2.EmbedRequest, *, deadline: float | None = None
    ) -> embedding_pb2.EmbedResponse:
        """Turn the request's inputs into vectors (`CAPABILITY_EMBEDDINGS`), one call to the transport's embedding
        endpoint (`calls/embedding.py`). Everything is checked before any call: a model whose transport does not
        claim embeddings refuses naming the capability, and a field its wire cannot honour is refused by name."""
        return await embedding_calls.embed(self, request, deadline)


def _error_from(transport: HttpTransport) -> Callable[[HttpResponse], errors.ModelError]:
    """The transport's error mapping, guarded: an error body of an unexpected shape still gives a typed error."""
    return functools.partial(guarded_error, transport)


class paused_gc:  # lower case: used like the contextlib context managers
    """The cyclic garbage collector paused for a lift (synchronous code, no other task runs meanwhile).

    Lifting a logprob-heavy answer allocates some 100,000 dicts and lists that live only until the lift returns;
    under the default thresholds the collector runs over them again and again, which made such a call about 1.8x
    slower in-process than under the thresholds `modelir serve` sets (`server.app.tune_gc`). Paused, they are
    freed by reference counting as the lift drops them; nothing a lift builds forms a cycle. A collector the
    caller disabled stays disabled. (A class, not `contextlib.contextmanager`: it runs on every call.)
    """

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        if self._was_enabled:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()


async def _unbatched(batches: AsyncIterator[list[stream_pb2.StreamEvent]]) -> AsyncIterator[stream_pb2.StreamEvent]:
    """The events of `batches`, one at a time (closing this closes `batches`)."""
    async with closing_stream(batches):
        async for batch in batches:
            for event in batch:
                yield event
