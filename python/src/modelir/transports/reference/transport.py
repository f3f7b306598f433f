"""`ReferenceModel`: the reference model as a transport (its manifest, its own limits, run, stream, tokenize, embed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.pipeline.survey import Survey
from modelir.streams.fold import events_from_response
from modelir.transports.base import LocalTransport
from modelir.transports.reference import embedding
from modelir.transports.reference.generation import generate, may_call_tools
from modelir.transports.reference.json_emitter import schema_gaps
from modelir.transports.reference.sealing import Sealer
from modelir.transports.reference.template import render
from modelir.transports.reference.vocabulary import (
    BOS,
    EOS,
    MAX_TOP_LOGPROBS,
    PIECE_BYTES,
    PIECES,
    VOCAB,
    token_ids,
)
from modelir.v1 import capabilities_pb2, content_pb2, embedding_pb2, request_pb2, response_pb2, service_pb2, stream_pb2

MAX_CHOICES = 16
_CAPABILITIES = sorted(
    [
        capabilities_pb2.CAPABILITY_COMPLETION,
        capabilities_pb2.CAPABILITY_CHAT,
        capabilities_pb2.CAPABILITY_TOKEN_INPUT,
        capabilities_pb2.CAPABILITY_SYSTEM_MESSAGES,
        capabilities_pb2.CAPABILITY_TOOLS,
        capabilities_pb2.CAPABILITY_TOOL_CHOICE,
        capabilities_pb2.CAPABILITY_REASONING,
        capabilities_pb2.CAPABILITY_REASONING_EFFORT,
        capabilities_pb2.CAPABILITY_REASONING_BUDGET,
        capabilities_pb2.CAPABILITY_REASONING_SUMMARY,
        capabilities_pb2.CAPABILITY_PREFILL,
        capabilities_pb2.CAPABILITY_INPUT_SCORING,
        capabilities_pb2.CAPABILITY_SAMPLED_LOGPROBS,
        capabilities_pb2.CAPABILITY_SAMPLED_TOKEN_IDS,
        capabilities_pb2.CAPABILITY_TOP_K_LOGPROBS,
        capabilities_pb2.CAPABILITY_CONSTRAINT_CHOICE,
        capabilities_pb2.CAPABILITY_CONSTRAINT_JSON_SCHEMA,
        capabilities_pb2.CAPABILITY_TOKENIZE,
        capabilities_pb2.CAPABILITY_STREAMING,
        capabilities_pb2.CAPABILITY_MULTIPLE_CHOICES,
        capabilities_pb2.CAPABILITY_TEMPERATURE,
        capabilities_pb2.CAPABILITY_TOP_P,
        capabilities_pb2.CAPABILITY_TOP_K_SAMPLING,
        capabilities_pb2.CAPABILITY_MIN_P,
        capabilities_pb2.CAPABILITY_MAX_OUTPUT_TOKENS,
        capabilities_pb2.CAPABILITY_STOP_SEQUENCES,
        capabilities_pb2.CAPABILITY_STOP_TOKEN_IDS,
        capabilities_pb2.CAPABILITY_SEED,
        capabilities_pb2.CAPABILITY_CONSTRAINT_JSON_OBJECT,
        capabilities_pb2.CAPABILITY_LOGIT_BIAS,
        capabilities_pb2.CAPABILITY_MIN_OUTPUT_TOKENS,
        capabilities_pb2.CAPABILITY_MULTI_TURN_TOKEN_INPUT,
        capabilities_pb2.CAPABILITY_TOKENIZE_CONVERSATION,
        capabilities_pb2.CAPABILITY_EMBEDDINGS,  # IR 1.1: `reference.embedding`
    ]
)


def _request_token_ids(request: request_pb2.Request) -> list[int]:
    """Every token id the request gives: its token input, its turns' token ids, its scored continuations' ids, its
    stop ids and its logit-bias keys."""
    ids = list(request.token_ids.ids) if request.WhichOneof("input") == "token_ids" else []
    for message in request.conversation.messages:
        ids.extend(message.token_ids)
    for span in request.input_scoring.continuations:
        ids.extend(span.token_ids.ids)
    ids.extend(request.sampling.stop_token_ids)
    ids.extend(request.sampling.logit_bias)
    return ids


class ReferenceModel(LocalTransport):
    """The deterministic reference model. `provider_model` is the model id its responses and artifacts name, as
    for every transport; `secret` keys the signatures of its reasoning artifacts. `delay_seconds` makes it slow on
    purpose, for tests of deadlines and cancellation (the service conformance suite's `limited` server): a call
    waits that long before its answer, and a stream before each of its events (default 0: no wait)."""

    name = "reference"
    version = "1.0.0"
    scores_continuations_at_once = True

    def __init__(
        self,
        *,
        provider_model: str = "modelir-reference-1",
        secret: bytes = b"modelir-reference",
        delay_seconds: float = 0.0,
    ) -> None:
        if delay_seconds < 0:
            raise ValueError("delay_seconds must not be negative")
        self.model_id = provider_model
        self.delay_seconds = delay_seconds
        self._sealer = Sealer(secret, provider_model)
        self._issuer = content_pb2.Issuer(transport=self.name, model=provider_model)

    @property
    def provider_model(self) -> str:
        return self.model_id

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        return capabilities_pb2.CapabilityManifest(
            transport=self.name,
            transport_version=self.version,
            capabilities=_CAPABILITIES,
            limits=capabilities_pb2.ModelLimits(
                max_top_logprobs=MAX_TOP_LOGPROBS, max_choices=MAX_CHOICES, max_output_tokens=1 << 16
            ),
        )

    def extra_unsupported(
        self, request: request_pb2.Request, *, streaming: bool = False, seen: Survey | None = None
    ) -> list[str]:
        """What the catalog cannot express: JSON-schema features, and token ids outside the vocabulary (it carries
        every content kind, so the pipeline's `survey` is not needed)."""
        reasons = []
        if request.constraint.WhichOneof("kind") == "json_schema":
            reasons += schema_gaps(request.constraint.json_schema.schema_json, "the JSON schema constraint")
        if may_call_tools(request):
            for tool in request.tools:
                if tool.function.parameters_json_schema:
                    reasons += schema_gaps(
                        tool.function.parameters_json_schema, f"the parameters of tool {tool.function.name!r}"
                    )
        outside = [t for t in _request_token_ids(request) if not 0 <= t < VOCAB]
        if outside:
            reasons.append(
                f"The reference model's vocabulary has {VOCAB} tokens (ids 0 to {VOCAB - 1}); the request uses "
                f"{sorted(set(outside))[:5]}."
            )
        return reasons

    def generate(self, request: request_pb2.Request) -> response_pb2.Response:
        """The response to a checked request, synchronously (what `run` returns). Its soft errors follow the one
        policy every transport follows (`errors.soft`): a constrained choice cut short by its length limit is
        partial output that breaks the constraint, `CONSTRAINT_VIOLATED` for that choice."""
        response = generate(request, self._sealer, self._issuer)
        soft_errors.settle(request, response, soft_errors.Facts())
        return response

    async def run(self, request: request_pb2.Request) -> response_pb2.Response:
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        return self.generate(request)

    async def stream(self, request: request_pb2.Request) -> AsyncIterator[stream_pb2.StreamEvent]:
        for event in events_from_response(self.generate(request)):
            if self.delay_seconds:
                await asyncio.sleep(self.delay_seconds)
            yield event

    def embed_problems(self, request: embedding_pb2.EmbedRequest) -> list[tuple[str, str]]:
        return embedding.problems(request)

    async def embed(self, request: embedding_pb2.EmbedRequest) -> embedding_pb2.EmbedResponse:
        return embedding.embed(request, self.model_id)

    def tokenizer_info(self) -> capabilities_pb2.TokenizerInfo:
        """The bytewise vocabulary: 256 byte tokens, then BOS and EOS."""
        return capabilities_pb2.TokenizerInfo(vocabulary_size=VOCAB, bos_token_id=BOS, eos_token_ids=[EOS])

    async def tokenize(self, request: service_pb2.TokenizeRequest) -> service_pb2.TokenizeResponse:
        if request.WhichOneof("input") == "conversation":
            ids = render(request.conversation, (), self._sealer.unseal, generation_prompt=request.add_generation_prompt)
        else:
            ids = token_ids(request.text)
        if request.add_special_tokens and not request.context:
            ids = [BOS, *ids]
        out = service_pb2.TokenizeResponse(token_ids=ids, tokens=[PIECES[i] for i in ids])
        pieces = [PIECE_BYTES[i] for i in ids]
        out.token_bytes = b"".join(pieces)
        out.token_byte_offsets.extend(lp.offsets_of(pieces))
        return out

    async def detokenize(self, token_ids: list[int]) -> str:
        """Bytes back to text; special tokens have no text."""
        return bytes(t for t in token_ids if t < 256).decode("utf-8", "replace")
