"""The seam between the core and the transports.

An `HttpTransport` is pure: `lower` turns a `Request` into an `HttpRequest` description, `lift` turns an
`HttpResponse` back into a `Response`, and a `StreamLifter` turns raw stream events into IR stream events. None of
them touches a socket or a clock; the executor owns all I/O. A `LocalTransport` runs in-process (the reference
model) and needs no executor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

import msgspec

from modelir import errors
from modelir.pipeline import content_kinds
from modelir.pipeline.survey import Survey, place, survey
from modelir.transports import manifests, token_prompt
from modelir.transports.exchange import HttpRequest as HttpRequest
from modelir.transports.exchange import HttpResponse as HttpResponse
from modelir.transports.exchange import RawEvent as RawEvent
from modelir.transports.exchange import utf8_repaired as utf8_repaired
from modelir.transports.http_status import error_for_status as error_for_status
from modelir.transports.http_status import json_error as json_error
from modelir.transports.http_status import retry_after_seconds as retry_after_seconds
from modelir.transports.token_prompt import Plan
from modelir.v1 import capabilities_pb2, content_pb2, embedding_pb2, request_pb2, response_pb2, service_pb2, stream_pb2

# An answer's top level (an object, or an array of them) with every value left unparsed, for `check_answer_shape`.
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw] | list[msgspec.Raw])
_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])


if TYPE_CHECKING:
    from modelir.transports.accounting import Schema

# A stream lifter's lane for its plainest events, one choice's text and nothing else: (choice, text) of such an
# event, or None for "not one of mine" (`StreamLifter.plain_lane`).
PlainLane = Callable[[RawEvent], tuple[int, str] | None]

# The rounds of engine calls behind a token-in prompt: yields a round's requests, is sent their answers, returns the
# ids of the renders and of the sentinels (`HttpTransport.token_prompt_steps`).
TokenPromptSteps = Generator[list[HttpRequest], list[HttpResponse], tuple[list[list[int]], list[list[int]]]]


class StreamLifter(ABC):
    """Turns the raw events of one stream into IR stream events. Holds only per-stream state."""

    @abstractmethod
    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]: ...

    @abstractmethod
    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        """The stream ended. Emits the final `StreamEnd`, with a soft error when it ended early."""

    def feed_batch(self, events: list[RawEvent], out: list[stream_pb2.StreamEvent], *, merge: bool = False) -> None:
        """`feed` of each of `events` (what one read brought), in order, into `out`: when one fails, `out` holds
        what the events before it gave (the caller keeps them). With `merge`, a lifter may lift a run of plain
        text events of one choice as one delta, as `streams.coalesce` would merge their deltas."""
        for event in events:
            out += self.feed(event)

    def plain_lane(self, section: Schema) -> PlainLane | None:
        """A cheaper `feed` for the commonest events, which `AccountedStream` takes instead of `feed` plus the
        accounting: (choice, text) of an event that holds one choice's text and nothing else (`plain_text` makes
        its delta), only when it has proven that `section` finds nothing in it to account; else None, and the
        event takes `feed` and the accounting. None: this lifter has no lane."""
        return None

    def plain_text(self, choice: int, text: str) -> stream_pb2.StreamEvent:
        """The text delta of a plain event (or of a run of them) that `plain_lane` read, as `feed` would lift it."""
        raise NotImplementedError(f"{type(self).__name__} has no plain lane")


class Transport(ABC):
    """What every transport has: a name, a version and a manifest, declared as class-level data."""

    name: ClassVar[str]
    version: ClassVar[str] = "1.0.0"
    # The manifest: capabilities (see `manifests.capability_set`), limits, grammar dialects and logprob bases (enum
    # names without their prefix) and the provider option keys the escape hatch accepts.
    capabilities: ClassVar[frozenset[capabilities_pb2.Capability.ValueType]] = frozenset()
    limits: ClassVar[capabilities_pb2.ModelLimits] = capabilities_pb2.ModelLimits()
    grammar_dialects: ClassVar[tuple[str, ...]] = ()
    logprob_bases: ClassVar[tuple[str, ...]] = ()
    provider_option_keys: ClassVar[tuple[str, ...]] = ()
    # Media types accepted in input blobs (exact, or `type/*`), provider tool types, and output modalities besides
    # text (`Modality` names without `MODALITY_`): `CapabilityManifest.input_media_types` and the rest.
    input_media_types: ClassVar[tuple[str, ...]] = ()
    provider_tool_types: ClassVar[tuple[str, ...]] = ()
    output_modalities: ClassVar[tuple[str, ...]] = ()
    # For every kind of `content_kinds.KINDS`: `CARRIED`, or the sentence that rejects a part of that kind.
    part_kinds: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # The seeds the provider accepts, inclusive. Non-negative by default: several engines read a negative seed as
    # "pick one at random" (llama.cpp, Ollama) and numpy refuses one, so none may pass unnoticed.
    seed_range: ClassVar[tuple[int, int]] = (0, 2**63 - 1)
    # Whether one call scores every `InputScoringOptions.continuations` entry. When False (the safe default), the
    # pipeline sends one call per continuation and merges the answers (`pipeline.split_continuations`).
    scores_continuations_at_once: ClassVar[bool] = False
    # Whether the lowering reads provider options on messages and parts (`Message.provider_options`,
    # `Part.provider_options`); a transport that reads them only on the request refuses nested ones for itself,
    # since they would otherwise be ignored.
    reads_nested_provider_options: ClassVar[bool] = False
    # The options that name a file: a relative path is read from the configuration file's (or the fixture's)
    # directory, not the process's working directory (`registry.TransportEntry.build`).
    path_options: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        """The manifest: `manifests.build(self)` from the class data above (an HTTP transport's is just that)."""

    @property
    def provider_model(self) -> str:
        """The model id this transport's provider reports, used as the issuer of reasoning artifacts."""
        return ""

    def issuer_model(self, request: request_pb2.Request) -> str:
        """The model id artifacts issued for `request` carry; replayed artifacts must name the same."""
        return self.provider_model

    def scores_continuations_together(self, request: request_pb2.Request) -> bool:
        """Whether `request`'s several continuations go in one call (else the pipeline splits them, one call
        each, and merges the scores in order)."""
        return self.scores_continuations_at_once

    def tokenizer_info(self) -> capabilities_pb2.TokenizerInfo | None:
        """The model's tokenizer facts (vocabulary size, BOS and EOS ids) where this transport knows them, for
        `ListModels`; None (the default) when it does not."""
        return None

    def extra_unsupported(
        self, request: request_pb2.Request, *, streaming: bool = False, seen: Survey | None = None
    ) -> list[str]:
        """Reasons this transport cannot run `request` that the capability catalog cannot express: the parts of
        kinds it does not carry (fail closed: a kind it has not decided on is refused too), then its wire's own.
        `seen` is the request's `survey`, when the pipeline has made it already."""
        reasons = []
        if request.WhichOneof("input") == "conversation" and capabilities_pb2.CAPABILITY_CHAT in self.capabilities:
            if seen is None:
                seen = survey(request)
            reasons = content_kinds.rejections(self.name, self.part_kinds, seen)
            if not self.reads_nested_provider_options:
                reasons += self._nested_option_rejections(seen)
            return reasons + self.wire_unsupported_surveyed(request, seen, streaming=streaming)
        return reasons + self.wire_unsupported(request, streaming=streaming)

    def _nested_option_rejections(self, seen: Survey) -> list[str]:
        found = [
            f"{place(i, j, k)}.provider_options"
            for i, j, k, entries in seen.provider_options
            if any(o.transport == self.name for o in entries)
        ]
        return [
            f"{self.name} reads provider options on the request only, not on messages or parts ({w})." for w in found
        ]

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        """What this wire cannot carry beyond the catalog and the content kinds (transports override it)."""
        return []

    def wire_unsupported_surveyed(
        self, request: request_pb2.Request, seen: Survey, *, streaming: bool = False
    ) -> list[str]:
        """`wire_unsupported`, reading the pipeline's `survey` of the conversation instead of walking it again. A
        transport whose wire checks look at parts overrides this (and has `wire_unsupported` survey first); the
        default is the transport's own `wire_unsupported`."""
        return self.wire_unsupported(request, streaming=streaming)

    def field_problems(self, request: request_pb2.Request) -> list[tuple[str, str]]:
        """Fields whose value this provider refuses although the IR allows it, as (field, description) pairs: the
        seed outside `seed_range`, then the wire's own (transports extend it). The pipeline raises them as field
        violations before any I/O."""
        low, high = self.seed_range
        s = request.sampling
        if s.HasField("seed") and not low <= s.seed <= high:
            return [("sampling.seed", f"{self.name} takes a seed in [{low}, {high}], not {s.seed}.")]
        return []

    # The provider option keys an `EmbedRequest` may carry for this transport (IR 1.1): its embedding endpoint's
    # own fields, which differ from its generation endpoint's (`provider_option_keys`).
    embed_option_keys: ClassVar[tuple[str, ...]] = ()

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        """The fields of an `EmbedRequest` this wire cannot honour, as (field, why) pairs (an `EmbedSupport`
        says which, for the transports that claim EMBEDDINGS): refused before any I/O."""
        return []

    def not_carried(self, kind: str | None) -> content_kinds.NotCarriedError:
        """The typed error a lowering raises for a kind it has no lowering for (`extra_unsupported` says first)."""
        return content_kinds.NotCarriedError(self.name, kind)


class HttpTransport(Transport):
    """A transport for an HTTP API. `provider_model` is the provider's model id (the configuration's
    `provider_model`); when empty, the request's model name is sent."""

    def __init__(self, *, provider_model: str = "") -> None:
        self._provider_model = provider_model

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        return manifests.build(self)

    @property
    def provider_model(self) -> str:
        return self._provider_model

    def model_for(self, request: request_pb2.Request) -> str:
        """The model id to send: the configured provider model, else the request's model name."""
        return self._provider_model or request.model

    def issuer(self, request: request_pb2.Request) -> content_pb2.Issuer:
        """Who issued a reasoning artifact received now: this transport and the model id it was sent to. The
        provider's reported id can be a dated variant of what was asked for, so it is not used here; the
        foreign-artifact check compares against the same `issuer_model`."""
        return content_pb2.Issuer(transport=self.name, model=self.model_for(request))

    def issuer_model(self, request: request_pb2.Request) -> str:
        return self.model_for(request)

    # The top-level keys a successful unary answer has at least one of (`{"choices": ...}` for OpenAI chat). An
    # answer that is a JSON object (or a list of them) with none of them is not this wire's answer but something
    # else that parsed (`{}`, `{"id": "x"}`, a proxy's JSON): `check_answer_shape` makes it MALFORMED_RESPONSE
    # instead of an empty success. Empty: no check.
    answer_keys: ClassVar[tuple[str, ...]] = ()

    def check_answer_shape(self, response: HttpResponse) -> None:
        """Raise `MalformedResponseError` when a 2xx JSON answer has none of `answer_keys` (see there)."""
        if not self.answer_keys:
            return
        try:  # only the top-level keys are read: no value is built (an `orjson.loads` would parse the body twice)
            top = _TOP_LEVEL.decode(response.body)
            if isinstance(top, list) and not top:  # `[]`: an answer for no input at all (sglang's for one prompt)
                raise errors.MalformedResponseError(
                    f"{self.name}: the provider answered an empty list, with no answer in it",
                    http_status=response.status,
                )
            if isinstance(top, dict):
                answers = [top]
            else:  # mypy holds a memoryview never equals bytes; it does, by content
                answers = [_OBJECT.decode(a) for a in top if memoryview(a)[:1] == b"{"]  # type: ignore[comparison-overlap]
        except msgspec.DecodeError:
            return  # not JSON at all: the lift says so, with its own message
        except RecursionError:  # msgspec's depth limit: no provider's answer nests that deep
            raise errors.MalformedResponseError(
                f"{self.name}: the provider's answer nests deeper than any answer of its wire does",
                http_status=response.status,
            ) from None
        for answer in answers:
            if not any(key in answer for key in self.answer_keys):
                keys = ", ".join(sorted(answer)[:8]) or "no keys"
                raise errors.MalformedResponseError(
                    f"{self.name}: the provider's answer has none of the keys its answer must have "
                    f"({', '.join(self.answer_keys)}); it has {keys}",
                    http_status=response.status,
                )

    @abstractmethod
    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest: ...

    def lower_surveyed(self, request: request_pb2.Request, seen: Survey, *, stream: bool) -> HttpRequest:
        """`lower`, reading the pipeline's `survey` of `request` (the parts and their kinds, the media) instead of
        walking the conversation again: what `Pipeline.prepare` calls. A transport whose lowering reads the survey
        overrides this (and has `lower` survey first); the default is the transport's own `lower`."""
        return self.lower(request, stream=stream)

    @abstractmethod
    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response: ...

    @abstractmethod
    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter: ...

    def native_fields(self, request: request_pb2.Request | None, kind: str) -> str:
        """The `native_fields` section that accounts this wire's answers of `kind` (`unary`, `stream`, `error`,
        `tokenize`): `<name>.<kind>`; a transport with several endpoints names the one `request` goes to."""
        return f"{self.name}.{kind}"

    def lift_accounted(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        """`lift`, then every native member it did not read accounted for (`accounting`): where lifts run."""
        from modelir.transports import accounting  # it builds on this module's `StreamLifter`

        out = self.lift(request, response)
        section = accounting.schema(self.native_fields(request, "unary"))
        accounting.account_response(section, response.body, out, self.name, self.issuer(request))
        return out

    def stream_lifter_accounted(self, request: request_pb2.Request) -> StreamLifter:
        """`stream_lifter`, with every event's native members accounted for (`accounted_stream.AccountedStream`)."""
        from modelir.transports import accounted_stream, accounting

        lifter = self.stream_lifter(request)
        section = accounting.schema(self.native_fields(request, "stream"))
        if section is None:
            return lifter
        return accounted_stream.AccountedStream(lifter, section, self.name, self.issuer(request))

    def auth_headers(self, credential: str) -> dict[str, str]:
        """Headers that carry the credential. Bearer by default; transports with other schemes override."""
        return {"Authorization": f"Bearer {credential}"} if credential else {}

    def lower_tokenize(self, request: service_pb2.TokenizeRequest) -> list[HttpRequest]:
        """The native requests that tokenize `request` (transports that claim TOKENIZE implement this)."""
        raise NotImplementedError(f"{self.name} has no tokenize endpoint")

    def lift_tokenize(
        self, request: service_pb2.TokenizeRequest, responses: list[HttpResponse]
    ) -> service_pb2.TokenizeResponse:
        raise NotImplementedError(f"{self.name} has no tokenize endpoint")

    def lower_detokenize(self, token_ids: list[int]) -> HttpRequest:
        """The native request that turns token ids back into text (with TOKENIZE)."""
        raise NotImplementedError(f"{self.name} has no detokenize endpoint")

    def lift_detokenize(self, response: HttpResponse) -> str:
        raise NotImplementedError(f"{self.name} has no detokenize endpoint")

    # Whether the engine states its tokenizer facts in a refusal (vLLM names its vocabulary size only in the 400
    # for an out-of-vocabulary id): then a 4xx answer to `lower_tokenizer_info` goes to `lift_tokenizer_info`.
    tokenizer_info_from_refusal: ClassVar[bool] = False

    def runs_as_token_prompt(self, request: request_pb2.Request) -> bool:
        """Whether `request` runs as a token-id prompt that `token_prompt` builds (after the engine's renders) rather
        than being lowered as it stands. By default a conversation with token turns; a transport widens it where its
        own route cannot give what the request needs (e.g. the prompt's ids of a first turn)."""
        return token_prompt.is_token_in(request)

    def token_prompt_steps(self, plan: Plan) -> TokenPromptSteps:
        """The engine calls that render and tokenize `plan` (multi-turn token-in, `token_prompt`), as a generator:
        it yields the native requests of one round, is sent their answers in order, and returns the ids of
        `plan.renders` and of `plan.sentinels` (transports that claim MULTI_TURN_TOKEN_INPUT implement it)."""
        raise NotImplementedError(f"{self.name} cannot render a conversation as token ids")

    def lower_tokenizer_info(self, model: str) -> list[HttpRequest]:
        """The native requests that report the model's tokenizer facts (`ModelInfo.tokenizer`), in order; none (the
        default) when the engine reports none beyond what `tokenizer_info` knows without a call."""
        return []

    def lift_tokenizer_info(self, responses: list[HttpResponse]) -> capabilities_pb2.TokenizerInfo:
        raise NotImplementedError(f"{self.name} reports no tokenizer facts")

    # ---- embed (IR 1.1): transports that claim EMBEDDINGS implement these, each through its `embed` module ----

    def lower_embed(self, request: embedding_pb2.EmbedRequest) -> HttpRequest:
        raise NotImplementedError(f"{self.name} has no embedding endpoint")

    def lift_embed(self, request: embedding_pb2.EmbedRequest, response: HttpResponse) -> embedding_pb2.EmbedResponse:
        raise NotImplementedError(f"{self.name} has no embedding endpoint")

    def lift_embed_accounted(
        self, request: embedding_pb2.EmbedRequest, response: HttpResponse
    ) -> embedding_pb2.EmbedResponse:
        """`lift_embed`, then every native member it did not read named in a warning with its JSON (an embedding
        answer has no message to keep it in): `native_fields` section `<wire>.embed`."""
        from modelir.transports import accounting

        out = self.lift_embed(request, response)
        section = accounting.schema(self.native_fields(None, "embed"))
        out.warnings.extend(accounting.account_embed(section, response.body))
        return out

    def error(self, response: HttpResponse) -> errors.ModelError:
        """The typed error for a non-2xx answer. The default reads the de facto standard error body that OpenAI,
        Anthropic, Ollama and the OpenAI-compatible engines send: `{"error": {"message", "type", "param",
        "code"}}` or `{"error": "message"}`; transports with other bodies override it."""
        return json_error(response)


class LocalTransport(Transport):
    """A transport that runs in-process, with no network."""

    @abstractmethod
    async def run(self, request: request_pb2.Request) -> response_pb2.Response: ...

    @abstractmethod
    def stream(self, request: request_pb2.Request) -> AsyncIterator[stream_pb2.StreamEvent]: ...

    @abstractmethod
    async def tokenize(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse: ...

    async def detokenize(self, token_ids: list[int]) -> str:
        raise NotImplementedError(f"{self.name} has no detokenize")

    async def embed(self, request: embedding_pb2.EmbedRequest) -> embedding_pb2.EmbedResponse:
        raise NotImplementedError(f"{self.name} has no embeddings")


# What a lift raises when a body parses as JSON but does not have the shape the transport expects.
# RecursionError: JSON nested deeper than the decoder (or a lift walking it) will go; OverflowError: a number too
# large for what it becomes (1e308 seconds as nanoseconds, 2**63 as an int64 field).
SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError, OverflowError)


def guarded_error(transport: HttpTransport, response: HttpResponse) -> errors.ModelError:
    """`transport.error(response)`, and when the error body itself has an unexpected shape (a Gemini `details`
    entry of the wrong type), the status's typed error with the body as its message: never an untyped escape."""
    try:
        error = transport.error(response)
    except SHAPE_ERRORS:
        return error_for_status(response, response.body.decode("utf-8", "replace")[:2000])
    from modelir.transports import accounting

    if suffix := accounting.error_suffix(accounting.schema(transport.native_fields(None, "error")), response.body):
        error.message += suffix  # what the body holds beyond what the error lift read, kept in its words
        error.args = (error.message,)
    return error


def shape_error(transport: Transport, exc: Exception) -> errors.MalformedResponseError:
    return errors.MalformedResponseError(
        f"{transport.name} could not lift the provider's answer, which does not have the documented shape: {exc!r}"
    )
