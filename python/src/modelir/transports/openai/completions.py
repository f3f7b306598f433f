"""OpenAI legacy Completions (`POST /completions`): raw prompts, `logprobs: int`, `suffix` for FIM.

From OpenAI's reference (https://platform.openai.com/docs/api-reference/completions): the
logprob object is four parallel arrays (`tokens`,
`token_logprobs`, `top_logprobs` as dicts keyed by token string, which collapse duplicates, and `text_offset` in
characters from the start of the prompt); the last stream chunk carries empty arrays; there are no token bytes.
Input scoring by `echo` is a manifest choice: OpenAI rejects echo with logprobs on current models, so this
manifest does not claim it; the vLLM transport (which shares this code) does, and so does this one with the option
`echo_scoring: true` (a configuration entry for a server that echoes prompt logprobs, such as llama-cpp-python's).
A server that cannot generate zero tokens (llama-cpp-python's reads `max_tokens: 0` as "fill the context") takes
`zero_output_emulated: true`: `max_output_tokens = 0` is then sent as 1 and the output dropped
(`transports.zero_output`).
"""

from __future__ import annotations

from itertools import chain
from typing import Any, ClassVar

from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.logprobs import continuation as prompt_split
from modelir.logprobs import native
from modelir.pipeline import content_kinds, continuations
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import zero_output
from modelir.transports.base import HttpResponse, RawEvent, StreamLifter
from modelir.transports.manifests import COMMON, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.transports.openai import _wire as wire
from modelir.transports.openai.embed import OpenAIEmbeddings
from modelir.v1 import capabilities_pb2, content_pb2, logprobs_pb2, request_pb2, response_pb2, stream_pb2

PROVIDER_OPTION_KEYS = ("best_of", "logit_bias", "user")


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = "temperature top_p seed presence_penalty frequency_penalty max_output_tokens:max_tokens stop choice_count:n"


# What every server speaking this wire honours; OpenAI adds logit biases and `/embeddings`. A dialect (a subclass)
# inherits only the first and claims what its own server honours.
_WIRE_CAPABILITIES = capability_set(COMMON | LOGPROBS | OPENAI_SAMPLING, "COMPLETION TOKEN_INPUT FIM MULTIPLE_CHOICES")


class OpenAICompletions(wire.BodyTransport, OpenAIEmbeddings):
    name = "openai_completions"
    answer_keys = ("choices",)  # see HttpTransport.answer_keys
    version = "1.0.0"
    path = "/completions"
    capabilities = _WIRE_CAPABILITIES | capability_set("LOGIT_BIAS EMBEDDINGS")  # EMBEDDINGS: `openai.embed`
    limits = capabilities_pb2.ModelLimits(
        max_top_logprobs=5, max_choices=128, max_stop_sequences=4
    )  # OpenAI caps `logprobs` at 5
    provider_option_keys = PROVIDER_OPTION_KEYS
    part_kinds = content_kinds.none_carried("OpenAI completions")
    # How the native fast path reads this wire's logprobs (modelir.logprobs.native.completion_body): dialects that clamp
    # minus infinity or spell tokens as ids say so here, as `logprob_values` and `token_id` do for the Python path.
    native_dialect: ClassVar[dict[str, bool]] = {"unclamp": False, "token_ids": False}

    def __init__(
        self, *, provider_model: str = "", echo_scoring: bool = False, zero_output_emulated: bool = False
    ) -> None:
        super().__init__(provider_model=provider_model)
        self.echo_scoring = echo_scoring  # the server scores prompts by echo: claim INPUT_SCORING
        # The server cannot generate zero tokens (llama-cpp-python reads `max_tokens: 0` as "fill the context"):
        # ask for one and drop it (`transports.zero_output`).
        self.zero_output_emulated = zero_output_emulated

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        manifest = super().manifest()
        if self.echo_scoring and capabilities_pb2.CAPABILITY_INPUT_SCORING not in manifest.capabilities:
            claimed = sorted([*manifest.capabilities, capabilities_pb2.CAPABILITY_INPUT_SCORING])
            del manifest.capabilities[:]
            manifest.capabilities.extend(claimed)
        return manifest

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "capabilities" not in cls.__dict__:
            cls.capabilities = _WIRE_CAPABILITIES

    def field_problems(self, request: request_pb2.Request) -> list[tuple[str, str]]:
        return super().field_problems(request) + wire.logit_bias_problems(request.sampling, self)

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.HasField("input_scoring") and request.WhichOneof("input") == "token_ids":
            reasons.append("Input scoring by echo locates the scored span by text offsets, so it needs text input.")
        if request.HasField("input_scoring") and streaming:
            reasons.append("Input scoring by echo is available on unary calls only, not on streams.")
        if streaming and self._emulates_zero(request):
            reasons.append("This server cannot generate zero tokens, and a stream cannot take back what it sent.")
        return reasons

    def _emulates_zero(self, request: request_pb2.Request) -> bool:
        return getattr(self, "zero_output_emulated", False) and zero_output.asks_for_nothing(request)

    # ---- lower -------------------------------------------------------------------------------------

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        if request.WhichOneof("input") == "token_ids":
            prompt: Any = list(request.token_ids.ids)
        else:
            prompt = request.prompt + _continuation(request)
        body: dict[str, Any] = {"model": self.model_for(request), "prompt": prompt}
        common.copy_sampling(request.sampling, body, _SAMPLING)
        if self._emulates_zero(request):
            body["max_tokens"] = 1
        if request.HasField("fim"):
            body["suffix"] = request.fim.suffix
        if request.sampling.logit_bias:  # token ids as decimal keys, as the API takes them
            body["logit_bias"] = wire.logit_bias(request.sampling)
        top_k = max(request.logprob_options.top_logprob_count, request.input_scoring.top_logprob_count)
        if request.HasField("logprob_options") or request.HasField("input_scoring"):
            body["logprobs"] = top_k
        if request.HasField("input_scoring"):
            body["echo"] = True
        return wire.finish_body(request, body, stream=stream, transport=self.name)

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        # Echo scoring slices the arrays in Python; everything else may take the native fast path.
        body = (
            None if request.HasField("input_scoring") else native.completion_body(response.body, **self.native_dialect)
        )
        if body is None:
            body = common.parse_json(response.body, "response body")
        out = response_pb2.Response(id=body.get("id") or "", model=body.get("model") or "")
        prompt_count = (body.get("usage") or {}).get("prompt_tokens")
        # One choice: everything the usage counts as generated is at the end of its arrays.
        single = len(body.get("choices") or ()) == 1
        generated_count = (body.get("usage") or {}).get("completion_tokens") if single else None
        facts = soft_errors.Facts()
        for raw in common.array(body, "choices"):
            choice = out.choices.add(index=raw.get("index", 0))
            choice.message.role = content_pb2.ROLE_ASSISTANT
            text = raw.get("text") or ""
            logprobs = raw.get("logprobs")
            if request.HasField("input_scoring") and choice.index == 0:
                text, logprobs = self._split_echo(request, out, text, logprobs, prompt_count, generated_count)
            elif request.HasField("input_scoring"):  # every choice echoes the same prompt
                text, logprobs = self._strip_echo(request, text, logprobs, prompt_count)
            choice.message.parts.add(text=text)
            self.lift_finish(raw, choice)
            if isinstance(logprobs, bytes):  # the native builder's columns (b"": a section without tokens)
                if logprobs and request.HasField("logprob_options"):
                    choice.logprobs.MergeFromString(logprobs)
            elif logprobs and logprobs.get("tokens"):
                if request.HasField("logprob_options"):
                    self.columns(logprobs, out=choice.logprobs)
            elif logprobs is None:
                facts.lack_logprobs(choice.index)
        wire.usage_from(body.get("usage"), out.usage, input_key="prompt_tokens", output_key="completion_tokens")
        self.lift_extras(request, body, out)
        if not bool(out.input_scores):
            facts.missing_input_scores = "the provider returned no prompt logprobs"
        if self._emulates_zero(request):
            zero_output.drop_output(out, f"this server ({self.name})")
        soft_errors.settle(request, out, facts)
        return out

    def lift_finish(self, raw: dict[str, Any], choice: response_pb2.Choice) -> None:
        choice.finish_reason, choice.raw_finish_reason, stop = self.finish(
            raw.get("finish_reason"), raw.get("stop_reason")
        )
        stops.set_stop(choice, stop)

    def lift_extras(self, request: request_pb2.Request, body: dict[str, Any], out: response_pb2.Response) -> None:
        """Provider extensions beyond OpenAI's shape (none for OpenAI itself)."""

    def token_id(self, token: str) -> int | None:
        """The token id a token string carries, for servers that can spell tokens as ids (vLLM)."""
        return None

    def spells_token_ids(self, tokens: list[str]) -> bool:
        """Whether every token is spelled as an id (only servers that can do so override this)."""
        return False

    def logprob_values(self, values: list[float | None]) -> list[float | None]:
        """Logprobs as sent (a None, a position without one, becomes NaN in the builder); engines that clamp
        minus infinity rewrite them here."""
        return values

    def columns(
        self, logprobs: dict[str, Any], start: int = 0, out: logprobs_pb2.TokenLogprobs | None = None
    ) -> logprobs_pb2.TokenLogprobs:
        """The parallel arrays -> columnar logprobs. No bytes: this wire has none.

        Columns go to the builder whole; chain/map iterate in C, so there is no Python-level loop over the tens of
        thousands of alternatives.
        """
        tokens = logprobs["tokens"][start:]
        tops = [t or {} for t in (logprobs.get("top_logprobs") or [None] * len(tokens))[start:]]
        keys = list(chain.from_iterable(tops)) if any(tops) else []
        return lp.columns(
            out,
            tokens=tokens,
            logprobs=self.logprob_values(logprobs["token_logprobs"][start:]),
            token_ids=[self.token_id(t) for t in tokens] if self.spells_token_ids(tokens) else None,  # type: ignore[misc]
            top_counts=list(map(len, tops)) if keys else None,
            top_tokens=keys,
            top_logprobs=self.logprob_values(list(chain.from_iterable(map(dict.values, tops)))) if keys else (),
            top_token_ids=[self.token_id(k) for k in keys] if self.spells_token_ids(keys) else None,  # type: ignore[misc]
        )

    # An engine whose echo may leave the prompt's text out (vLLM with `return_token_ids`): its text is then all
    # generated, and the arrays still hold the prompt's tokens.
    echo_text_may_omit_prompt = False

    def _split_echo(
        self,
        request: request_pb2.Request,
        out: response_pb2.Response,
        text: str,
        logprobs: dict[str, Any] | None,
        prompt_count: int | None,
        generated_count: int | None = None,
    ) -> tuple[str, dict[str, Any] | None]:
        """With echo, the text and arrays start with the prompt: score the requested span, keep the rest.

        The prompt's tokens are the arrays' first (all) less the generated ones (`completion_tokens`); the scored
        span is measured back from the prompt's end by the distances between offsets (`logprobs.continuation`),
        never by their absolute values, which engines count differently. A token that straddles the
        context/continuation boundary belongs to the continuation.
        """
        prompt = request.prompt + _continuation(request)
        if text.startswith(prompt):
            generated = text[len(prompt) :]
        elif self.echo_text_may_omit_prompt:
            generated = text
        else:
            out.warnings.add(code="echo_mismatch", message="the echoed text does not start with the prompt")
            generated = text[len(prompt) :]
        if not logprobs or not logprobs.get("tokens"):
            return generated, None
        tokens = logprobs["tokens"]
        offsets = logprobs.get("text_offset") or []
        if generated_count is not None and 0 <= generated_count <= len(tokens):
            n_prompt = len(tokens) - generated_count
        else:  # no count of generated tokens: the offsets place the prompt's end (a BOS's text may shift them)
            in_prompt = sum(1 for o in offsets if o < len(prompt))
            n_prompt = min(prompt_count, in_prompt) if prompt_count is not None else in_prompt
        texts = [t if isinstance(t, str) else "" for t in tokens[:n_prompt]]
        if len(offsets) < n_prompt:
            offsets = prompt_split.offsets_of(texts)
        # The prompt's end in the offsets' own count: where the first generated token starts, else the last
        # prompt token's end.
        if len(offsets) > n_prompt:
            end = offsets[n_prompt]
        else:
            end = offsets[n_prompt - 1] + len(texts[n_prompt - 1]) if n_prompt else 0
        split = prompt_split.continuation_start(offsets[:n_prompt], texts, end, _continuation(request))
        if split is None:
            out.warnings.add(
                code="echo_mismatch", message="the echoed prompt tokens do not reach back to the scored continuation"
            )
            return generated, {k: v[n_prompt:] for k, v in logprobs.items() if isinstance(v, list)}
        first, unscored = split.start, 0
        if not _continuation(request):
            first = 0
            while first < n_prompt and logprobs["token_logprobs"][first] is None:
                first += 1
                unscored += 1
        scored = self.columns(
            {k: v[:n_prompt] for k, v in logprobs.items() if isinstance(v, list)},
            start=first,
        )
        # The span is the end of the prompt, measured back from its end by the offsets' distances (the tokens'
        # own text may drop a split character; a BOS's or control token's text may shift every offset).
        covered = split.chars if _continuation(request) else (end - offsets[first] if first < n_prompt else 0)
        span_text = prompt[len(prompt) - covered :] if 0 < covered <= len(prompt) else ""
        if split.straddles:
            out.warnings.add(
                code="scoring_token_straddles_boundary",
                message="the first scored token also covers the end of the context",
            )
        scores = out.input_scores.add()
        scores.tokens.CopyFrom(scored)
        scores.logprob_sum = float(sum(scored.token_logprobs))
        scores.scored_token_count = len(scored.token_logprobs)
        scores.scored_byte_count = len(span_text.encode())
        scores.scored_char_count = len(span_text)
        scores.unscored_token_count = unscored
        span = _continuation(request) or prompt
        scores.span_byte_count, scores.span_char_count = len(span.encode()), len(span)
        scores.first_token_straddles_context = split.straddles
        scores.span_start_byte = len(prompt.encode()) - len(span_text.encode())
        rest = {k: v[n_prompt:] for k, v in logprobs.items() if isinstance(v, list)}
        return generated, rest

    def _strip_echo(
        self, request: request_pb2.Request, text: str, logprobs: dict[str, Any] | None, prompt_count: int | None
    ) -> tuple[str, dict[str, Any] | None]:
        prompt = request.prompt + _continuation(request)
        n_prompt = prompt_count or 0
        rest = {k: v[n_prompt:] for k, v in logprobs.items() if isinstance(v, list)} if logprobs else None
        return text[len(prompt) :], rest

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _CompletionsStreamLifter(self, request)


def _continuation(request: request_pb2.Request) -> str:
    return continuations.first_text(request)


class _CompletionsStreamLifter(wire.ChunkStream):
    transport: OpenAICompletions

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        choices, out = self.chunk(event)
        for index, raw in choices:
            event_out = self.parts.delta(index, "text", text=raw.get("text") or "")
            logprobs = raw.get("logprobs")
            if logprobs is not None:
                self.has_logprobs.add(index)
                if logprobs.get("tokens"):
                    self.transport.columns(logprobs, out=event_out.delta.logprobs)
            out.append(event_out)
        return out
