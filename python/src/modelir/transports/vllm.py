"""vLLM's OpenAI-compatible server: the completions and chat wires plus vLLM's extensions.

Raw prompts and token ids go to `/completions`, conversations to `/chat/completions`; the extensions
(vLLM's OpenAI-compatible server documentation, https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html)
are: `top_k`, `min_p`, `repetition_penalty`, `stop_token_ids`; structured outputs
(`structured_outputs`: choice, regex, json, grammar); `echo` scoring on completions and `prompt_logprobs` on chat
(top-level there; element 0 is null; keys are token ids as strings); `return_tokens_as_token_ids` (tokens spelled
`token_id:N`) and `return_token_ids` (`prompt_token_ids`) for RL; `stop_reason` beside `finish_reason`; -9999.0
as the clamp for minus infinity (read back as -inf); `/tokenize` and `/detokenize`.

Also: `return_token_ids` on every request (the sampled ids are `Choice.sampled_tokens`, see `_engine_output`);
`logit_bias` (token ids as strings) and `min_tokens`; several scored continuations as a list of prompts; a scored
continuation after a conversation as a final assistant message with `continue_final_message`; `/tokenize` with
`messages` and `add_generation_prompt` for a conversation.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import orjson

from modelir.errors.soft import Facts
from modelir.logprobs import build as lp
from modelir.pipeline import continuations
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, RawEvent, StreamLifter
from modelir.transports.manifests import capability_set
from modelir.transports.openai import _typed as typed
from modelir.transports.openai import _wire as wire
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.openai.completions import OpenAICompletions
from modelir.v1 import capabilities_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2, service_pb2, stream_pb2

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
PROVIDER_OPTION_KEYS = (
    "bad_words",
    "ignore_eos",
    "include_stop_str_in_output",
    "priority",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "truncate_prompt_tokens",
)
_TOKEN_ID_PREFIX = "token_id:"


def _token_id(token: str) -> int | None:
    if token.startswith(_TOKEN_ID_PREFIX):
        try:
            return int(token[len(_TOKEN_ID_PREFIX) :])
        except ValueError:
            return None
    return None


def _unclamp(value: float | None) -> float:
    """vLLM clamps -inf to -9999.0 (`max(logprob, -9999.0)`); the IR stores -inf."""
    if value is None:
        return float("nan")
    return -math.inf if value <= common.VLLM_MINUS_INFINITY else float(value)


def _extras(request: request_pb2.Request, body: dict[str, Any]) -> None:
    """The vLLM sampling and structured-output fields, shared by both endpoints."""
    common.copy_sampling(
        request.sampling, body, "top_k min_p repetition_penalty stop_token_ids min_output_tokens:min_tokens"
    )
    kind = request.constraint.WhichOneof("kind")
    if kind == "choice":
        body["structured_outputs"] = {"choice": list(request.constraint.choice.labels)}
    elif kind == "regex":
        body["structured_outputs"] = {"regex": request.constraint.regex}
    elif kind == "grammar":
        body["structured_outputs"] = {"grammar": request.constraint.grammar.text}
    elif kind == "json_schema":
        body.pop("response_format", None)
        body["structured_outputs"] = {"json": orjson.loads(request.constraint.json_schema.schema_json)}
    elif kind == "json_object":
        body["structured_outputs"] = {"json_object": True}
    if request.logprob_options.require_token_ids:
        body["return_tokens_as_token_ids"] = True
    # The sampled ids (and the prompt's), whether or not logprobs were asked for: RL needs them always.
    body["return_token_ids"] = True
    if request.sampling.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in sorted(request.sampling.logit_bias.items())}


def _trimmed(request: request_pb2.Request, raw: Any, token_ids: list[int]) -> int:
    """How many of a choice's trailing ids had their text trimmed: the stop token id or the EOS (`stop_reason`
    null) that ended it, which vLLM's detokenizer skips unless `include_stop_str_in_output`."""
    if not token_ids or _get(raw, "finish_reason") != "stop":
        return 0
    if common.provider_options(request, "vllm").get("include_stop_str_in_output"):
        return 0
    stop = _get(raw, "stop_reason")
    if stop is None:
        return 1
    return tokens.trailing_stop(token_ids, stop)


def _get(raw: Any, key: str) -> Any:
    return raw.get(key) if isinstance(raw, dict) else getattr(raw, key, None)


def _finish(raw_reason: str | None, stop: Any) -> tuple[response_pb2.FinishReason.ValueType, str, stops.Stop]:
    """`stop_reason` names the stop string (a JSON string) or the stop token id (an integer) that ended a choice
    (null for EOS)."""
    if stop is not None and raw_reason == "stop" and isinstance(stop, str | int):
        return response_pb2.FINISH_REASON_STOP_SEQUENCE, raw_reason, stop
    return wire.finish_reason(raw_reason), raw_reason or "", None


class _Completions(OpenAICompletions):
    name = "vllm"
    path = "/v1/completions"
    native_dialect: ClassVar[dict[str, bool]] = {"unclamp": True, "token_ids": True}

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        _extras(request, body)
        spans = continuations.of(request)
        if len(spans) > 1:  # one prompt per continuation, answered in order (choice i is prompt i)
            body["prompt"] = [request.prompt + span.text for span in spans]
        return body

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        spans = continuations.of(request)
        if len(spans) <= 1:
            return super().lift(request, response)
        # A batch of echoed prompts, generating nothing: the first is lifted as usual (one empty choice), the
        # others only add their input scores, in the continuations' order.
        body = common.parse_json(response.body, "response body")
        raws = sorted(body.get("choices") or (), key=lambda c: c.get("index", 0))
        first = _with_continuations(request, spans[:1])
        single = HttpResponse(response.status, response.headers, orjson.dumps({**body, "choices": raws[:1]}))
        out = super().lift(first, single)
        del out.prompt_token_ids[:]  # each prompt has its own ids; no one list is "the input's"
        for span, raw in zip(spans[1:], raws[1:], strict=False):
            prompt_ids = raw.get("prompt_token_ids")
            count = len(prompt_ids) if isinstance(prompt_ids, list) else None
            text, logprobs = raw.get("text") or "", raw.get("logprobs")
            self._split_echo(_with_continuations(request, [span]), out, text, logprobs, count)
        if len(out.input_scores) < len(spans) and not out.errors:
            out.errors.add(
                reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
                message=f"input scores were requested but vLLM scored {len(out.input_scores)} of {len(spans)} "
                "continuations",
            )
        return out

    def token_id(self, token: str) -> int | None:
        return _token_id(token)

    def logprob_values(self, values: list[float | None]) -> list[float | None]:
        try:  # min() runs in C; the per-value rewrite happens only when a clamp or a None is present
            rewrite = bool(values) and min(values) <= common.VLLM_MINUS_INFINITY  # type: ignore[type-var,operator]
        except TypeError:  # a None: a position without a logprob
            rewrite = True
        return [_unclamp(v) for v in values] if rewrite else values

    def spells_token_ids(self, tokens: list[str]) -> bool:
        return bool(tokens) and tokens[0].startswith(_TOKEN_ID_PREFIX) and all(_token_id(t) is not None for t in tokens)

    def finish(
        self, raw_reason: str | None, stop_reason: Any = None
    ) -> tuple[response_pb2.FinishReason.ValueType, str, stops.Stop]:
        return _finish(raw_reason, stop_reason)

    def lift_extras(self, request, body, out) -> None:
        raws = body.get("choices") or ()
        if request.HasField("input_scoring") and not out.input_scores and raws and not continuations.of(request):
            # A server that answers with `prompt_logprobs` (and `prompt_token_ids`) instead of echoed logprobs: the
            # same scores as the chat route's.
            first = raws[0]
            scores = _prompt_logprob_scores(
                first.get("prompt_logprobs"), first.get("prompt_token_ids"), request.input_scoring.top_logprob_count
            )
            if scores is not None:
                scores.span_byte_count, scores.span_char_count = len(request.prompt.encode()), len(request.prompt)
                scores.span_start_byte = max(0, scores.span_byte_count - scores.scored_byte_count)
                out.input_scores.append(scores)
        choices = {c.index: c for c in out.choices}
        for raw in body.get("choices") or ():
            if raw.get("prompt_token_ids") and not out.prompt_token_ids:
                out.prompt_token_ids.extend(raw["prompt_token_ids"])
            ids = raw.get("token_ids")
            if ids and (choice := choices.get(raw.get("index", 0))) is not None:
                tokens.fill(choice, ids, trimmed=_trimmed(request, raw, ids))
        tokens.label_choices(request, out)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _TokenIdStream(super().stream_lifter(request), request)


class _Chat(OpenAIChat):
    name = "vllm"
    path = "/v1/chat/completions"
    returns_reasoning_text = True  # `include_reasoning`

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        _extras(request, body)
        if request.HasField("input_scoring"):
            body["prompt_logprobs"] = request.input_scoring.top_logprob_count
            if continuation := continuations.first_text(request):
                # The continuation is the start of the assistant's reply: rendered after the generation prompt
                # and left open (`continue_final_message`), so its tokens are the rendered prompt's last ones.
                body["messages"].append({"role": "assistant", "content": continuation})
                body["continue_final_message"] = True
                body["add_generation_prompt"] = False
        if request.HasField("reasoning_controls"):
            body["include_reasoning"] = request.reasoning_controls.include_thoughts
        return body

    def finish(
        self, raw_reason: str | None, stop_reason: Any = None
    ) -> tuple[response_pb2.FinishReason.ValueType, str, stops.Stop]:
        return _finish(raw_reason, stop_reason)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _TokenIdStream(super().stream_lifter(request), request)

    def adjust_logprobs(self, logprobs: logprobs_pb2.TokenLogprobs) -> logprobs_pb2.TokenLogprobs:
        if logprobs.tokens and logprobs.tokens[0].startswith(_TOKEN_ID_PREFIX):
            _chat_token_ids(logprobs)
        _unclamp_columns(logprobs)
        return logprobs

    def lift_extras(
        self, request: request_pb2.Request, body: typed.ChatCompletion, out: response_pb2.Response, facts: Facts
    ) -> None:
        if body.prompt_token_ids:
            out.prompt_token_ids.extend(body.prompt_token_ids)
        choices = {c.index: c for c in out.choices}
        for raw in body.choices or ():
            ids = raw.token_ids
            if ids and (choice := choices.get(raw.index)) is not None:
                tokens.fill(choice, ids, trimmed=_trimmed(request, raw, ids))
        tokens.label_choices(request, out)
        if request.HasField("input_scoring"):
            continuation = continuations.first_text(request)
            start = _continuation_start(body.prompt_logprobs, body.prompt_token_ids, continuation)
            scores = (
                _prompt_logprob_scores(
                    body.prompt_logprobs, body.prompt_token_ids, request.input_scoring.top_logprob_count, start or 0
                )
                if start is not None
                else None
            )
            if scores is None:
                facts.missing_input_scores = (
                    "vLLM returned no usable prompt_logprobs"
                    if start is not None
                    else "the rendered prompt does not end with the continuation's tokens"
                )
            elif continuation:
                covered = scores.scored_char_count
                scores.span_byte_count, scores.span_char_count = len(continuation.encode()), len(continuation)
                scores.first_token_straddles_context = covered > len(continuation)
                if scores.first_token_straddles_context:
                    out.warnings.add(
                        code="scoring_token_straddles_boundary",
                        message="the first scored token also covers the end of the rendered conversation",
                    )
                out.input_scores.append(scores)
            else:
                # The first prompt token's text is not reported (its entry is null): the span is the scored tokens.
                scores.span_byte_count, scores.span_char_count = scores.scored_byte_count, scores.scored_char_count
                out.input_scores.append(scores)


class _TokenIdStream(StreamLifter):
    """The OpenAI-shaped stream lift, plus each chunk's `token_ids` (vLLM `return_token_ids`) on that chunk's delta.

    A chunk's ids ride on its one content delta (so they belong to that part); a chunk whose content spans two parts
    (the end of reasoning and the start of text) or has none gives its ids on a delta of no part. The finishing
    chunk's trimmed stop / EOS id goes on the choice's finish as an unattributed token.
    """

    def __init__(self, inner: StreamLifter, request: request_pb2.Request) -> None:
        self.inner = inner
        self.request = request
        self.trimmed: dict[int, list[int]] = {}

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        out = self.inner.feed(event)
        if b'"token_ids"' not in event.data:
            return out
        chunk = common.parse_json(event.data, "stream chunk")
        for raw in chunk.get("choices") or () if isinstance(chunk, dict) else ():
            ids = raw.get("token_ids") if isinstance(raw, dict) else None
            if not isinstance(ids, list) or not ids:
                continue
            index = raw.get("index", 0)
            cut = _trimmed(self.request, raw, ids)
            if cut:
                self.trimmed[index] = ids[len(ids) - cut :]
                ids = ids[: len(ids) - cut]
            if ids:
                parts = getattr(self.inner, "parts", None)
                opened = len(parts.labels(index)) if parts is not None else 0
                _attach(out, index, ids, opened - 1)
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = self.inner.close(interrupted=interrupted)
        for event in out:
            if event.WhichOneof("event") == "end":
                for finish in event.end.finishes:
                    tokens.finish_unattributed(finish, self.trimmed.get(finish.choice_index, ()))
        parts = getattr(self.inner, "parts", None)
        tokens.label_finishes(self.request, out, parts.texts() if parts is not None else {})
        return out


def _attach(events: list[stream_pb2.StreamEvent], choice: int, ids: list[int], last_part: int) -> None:
    """The ids on the chunk's one content delta; on a delta of the choice's latest part when the chunk has no
    content (a finishing chunk); on a delta of no part when its content spans two parts."""
    deltas = [
        e.delta
        for e in events
        if e.WhichOneof("event") == "delta" and e.delta.choice_index == choice and e.delta.WhichOneof("content")
    ]
    if len({d.part_index for d in deltas}) == 1:
        deltas[-1].token_ids.extend(ids)
    else:
        part = last_part if not deltas else -1
        delta = stream_pb2.PartDelta(choice_index=choice, part_index=part, token_ids=ids)
        events.append(stream_pb2.StreamEvent(delta=delta))


def _with_continuations(request: request_pb2.Request, spans: list[request_pb2.Continuation]) -> request_pb2.Request:
    single = request_pb2.Request()
    single.CopyFrom(request)
    del single.input_scoring.continuations[:]
    single.input_scoring.continuations.extend(spans)
    return single


def _chat_token_ids(logprobs: logprobs_pb2.TokenLogprobs) -> None:
    """With `return_tokens_as_token_ids`, chat tokens are spelled `token_id:N`: fill the id columns."""
    ids = [i for t in logprobs.tokens if (i := _token_id(t)) is not None]
    if ids and len(ids) == len(logprobs.tokens) and not logprobs.token_ids:
        logprobs.token_ids.extend(ids)
    top_ids = [i for t in logprobs.top_tokens if (i := _token_id(t)) is not None]
    if top_ids and len(top_ids) == len(logprobs.top_tokens) and not logprobs.top_token_ids:
        logprobs.top_token_ids.extend(top_ids)


def _unclamp_columns(logprobs: logprobs_pb2.TokenLogprobs) -> None:
    # min() over the packed column runs in C; the Python rewrite happens only when a clamp is present.
    if logprobs.token_logprobs and min(logprobs.token_logprobs) <= common.VLLM_MINUS_INFINITY:
        values = [_unclamp(v) for v in logprobs.token_logprobs]
        del logprobs.token_logprobs[:]
        logprobs.token_logprobs.extend(values)
    if logprobs.top_logprobs and min(logprobs.top_logprobs) <= common.VLLM_MINUS_INFINITY:
        values = [_unclamp(v) for v in logprobs.top_logprobs]
        del logprobs.top_logprobs[:]
        logprobs.top_logprobs.extend(values)


def _continuation_start(entries, prompt_ids, continuation: str) -> int | None:
    """Where a continuation's tokens start in the rendered prompt: walking back from its end over the tokens'
    decoded text until the continuation is covered (a token that covers more straddles the boundary). 0 without a
    continuation; None when the rendered prompt does not end with it."""
    if not continuation:
        return 0
    if not entries or not prompt_ids or len(entries) != len(prompt_ids):
        return None
    tail, start = "", len(prompt_ids)
    while start > 0 and len(tail) < len(continuation):
        start -= 1
        entry = entries[start]
        actual = entry.get(str(prompt_ids[start])) if isinstance(entry, dict) else None
        if actual is None:
            return None
        tail = (actual.get("decoded_token") or "") + tail
    return start if tail.endswith(continuation) else None


def _prompt_logprob_scores(entries, prompt_ids, top_k: int, start: int = 0) -> logprobs_pb2.InputScores | None:
    """`prompt_logprobs` (null, then `{id: {logprob, rank, decoded_token}}` per position) -> input scores of the
    positions from `start` on.

    The actual token at each position is `prompt_token_ids[i]`; the other keys are its top-k alternatives.
    """
    if not entries or not prompt_ids or len(entries) != len(prompt_ids):
        return None
    entries, prompt_ids = entries[start:], prompt_ids[start:]
    scored = logprobs_pb2.TokenLogprobs()
    unscored = 0
    tops_count: list[int] = []
    top_ids: list[int] = []
    top_lps: list[float] = []
    top_tokens: list[str] = []
    ids: list[int] = []
    values: list[float] = []
    tokens: list[str] = []
    for token_id, entry in zip(prompt_ids, entries, strict=True):
        if entry is None:
            unscored += 1
            continue
        actual = entry.get(str(token_id))
        if actual is None:
            return None
        ids.append(token_id)
        values.append(_unclamp(actual["logprob"]))
        tokens.append(actual.get("decoded_token") or "")
        # The dict holds the actual token plus the top-k; the top-k are the entries ranked 1..k.
        alternatives = sorted(
            ((int(k), v) for k, v in entry.items() if 1 <= v.get("rank", 0) <= top_k),
            key=lambda kv: kv[1]["rank"],
        )
        tops_count.append(len(alternatives))
        top_ids.extend(k for k, _ in alternatives)
        top_lps.extend(_unclamp(v["logprob"]) for _, v in alternatives)
        top_tokens.extend(v.get("decoded_token") or "" for _, v in alternatives)
    lp.columns(
        scored,
        tokens=tokens,
        logprobs=values,
        token_ids=ids,
        top_counts=tops_count if any(tops_count) else None,
        top_tokens=top_tokens,
        top_logprobs=top_lps,
        top_token_ids=top_ids,
    )
    text = "".join(tokens)
    return logprobs_pb2.InputScores(
        tokens=scored,
        logprob_sum=float(sum(values)),
        scored_token_count=len(ids),
        scored_byte_count=len(text.encode()),
        scored_char_count=len(text),
        unscored_token_count=unscored,
    )


class VLLM(HttpTransport):
    """One transport for a vLLM server: routes by input kind to the completions or chat endpoint."""

    name = "vllm"
    answer_keys = ("choices",)  # see HttpTransport.answer_keys
    version = "1.0.0"

    def __init__(self, *, provider_model: str = "") -> None:
        super().__init__(provider_model=provider_model)
        self._completions = _Completions(provider_model=provider_model)
        self._chat = _Chat(provider_model=provider_model)

    def _route(self, request: request_pb2.Request) -> HttpTransport:
        return self._chat if request.WhichOneof("input") == "conversation" else self._completions

    capabilities = (
        _Completions.capabilities
        | _Chat.capabilities
        | capability_set(
            "INPUT_SCORING SAMPLED_TOKEN_IDS TOP_K_SAMPLING MIN_P REPETITION_PENALTY STOP_TOKEN_IDS TOKENIZE "
            "LOGIT_BIAS MIN_OUTPUT_TOKENS CONSTRAINT_JSON_OBJECT TOKENIZE_CONVERSATION "
            "CONSTRAINT_CHOICE CONSTRAINT_REGEX CONSTRAINT_GRAMMAR CONSTRAINT_JSON_SCHEMA"
        )
    ) - capability_set("FIM")  # vLLM rejects `suffix`
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=MAX_LOGPROBS, max_choices=128)
    grammar_dialects = ("EBNF",)
    provider_option_keys = PROVIDER_OPTION_KEYS

    def scores_continuations_together(self, request: request_pb2.Request) -> bool:
        # The completions route sends several continuations as a list of prompts; the chat route renders one
        # conversation per call, so the pipeline splits them (one call each, scores merged in order).
        return self._route(request) is self._completions

    part_kinds = _Chat.part_kinds

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        route = self._route(request)
        reasons = []
        if route is self._chat:
            reasons += self._chat.wire_unsupported(request, streaming=streaming)
            if request.HasField("input_scoring"):
                if request.input_scoring.continuations and request.prefill:
                    reasons.append("A scored continuation is the start of the assistant's reply: drop the prefill.")
                if streaming:
                    reasons.append("vLLM returns prompt_logprobs on unary calls only, not on streams.")
        else:
            reasons += self._completions.wire_unsupported(request, streaming=streaming)
            if request.HasField("reasoning_controls"):
                reasons.append("vLLM's completions endpoint takes no reasoning controls; send a conversation.")
            generates = not request.sampling.HasField("max_output_tokens") or request.sampling.max_output_tokens > 0
            if len(continuations.of(request)) > 1 and (generates or request.sampling.choice_count > 1):
                reasons.append(
                    "Several continuations are scored as a batch of prompts, each of which would also generate; "
                    "set sampling.max_output_tokens to 0 (and one choice)."
                )
        return reasons

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        return self._route(request).lower(request, stream=stream)

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        return self._route(request).lift(request, response)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return self._route(request).stream_lifter(request)

    def lower_tokenize(self, request: service_pb2.TokenizeRequest) -> list[HttpRequest]:
        """`/tokenize` of context + text, and of the context alone when there is one (to find the boundary)."""
        model = self.provider_model or request.model

        def tokenize(prompt: str) -> HttpRequest:
            body = {
                "model": model,
                "prompt": prompt,
                "add_special_tokens": request.add_special_tokens,
                "return_token_strs": True,
            }
            return HttpRequest("POST", "/tokenize", orjson.dumps(body), (("content-type", "application/json"),))

        if request.WhichOneof("input") == "conversation":
            # vLLM's `/tokenize` renders messages through the model's chat template itself.
            conversation = request_pb2.Request(conversation=request.conversation)
            body = {
                "model": model,
                "messages": self._chat.body(conversation, stream=False)["messages"],
                "add_generation_prompt": request.add_generation_prompt,
                "add_special_tokens": request.add_special_tokens,
                "return_token_strs": True,
            }
            return [HttpRequest("POST", "/tokenize", orjson.dumps(body), (("content-type", "application/json"),))]
        natives = [tokenize(request.context + request.text)]
        if request.context:
            natives.append(tokenize(request.context))
        return natives

    def lower_detokenize(self, token_ids: list[int]) -> HttpRequest:
        body = {"model": self.provider_model, "tokens": token_ids}
        return HttpRequest("POST", "/detokenize", orjson.dumps(body), (("content-type", "application/json"),))

    def lift_detokenize(self, response: HttpResponse) -> str:
        return common.parse_json(response.body, "detokenize body")["prompt"]

    def lift_tokenize(
        self, request: service_pb2.TokenizeRequest, responses: list[HttpResponse]
    ) -> service_pb2.TokenizeResponse:
        whole = common.parse_json(responses[0].body, "tokenize body")
        ids, pieces = whole["tokens"], whole.get("token_strs") or []
        start = 0
        straddles = False
        if len(responses) > 1:
            context_ids = common.parse_json(responses[1].body, "tokenize body")["tokens"]
            # The text's tokens start where the two tokenizations part; if they part inside the context's
            # tokens, the first returned token covers the end of the context as well.
            while start < min(len(ids), len(context_ids)) and ids[start] == context_ids[start]:
                start += 1
            straddles = start < len(context_ids)
        return service_pb2.TokenizeResponse(
            token_ids=ids[start:], tokens=pieces[start:] if pieces else [], straddles_context=straddles
        )
