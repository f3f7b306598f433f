"""vLLM's OpenAI-compatible server: the completions and chat wires plus vLLM's extensions.

Raw prompts and token ids go to `/completions`, conversations to `/chat/completions`; the extensions
(shared/wire/NOTES.md section 7) are: `top_k`, `min_p`, `repetition_penalty`, `stop_token_ids`; structured outputs
(`structured_outputs`: choice, regex, json, grammar); `echo` scoring on completions and `prompt_logprobs` on chat
(top-level there; element 0 is null; keys are token ids as strings); `return_tokens_as_token_ids` (tokens spelled
`token_id:N`) and `return_token_ids` (`prompt_token_ids`) for RL; `stop_reason` beside `finish_reason`; -9999.0
as the clamp for minus infinity (read back as -inf); `/tokenize` and `/detokenize`.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import orjson

from modelir import errors
from modelir.transports import _common as common
from modelir.transports import _openai_typed as typed
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, StreamLifter
from modelir.transports.openai_chat import OpenAIChat
from modelir.transports.openai_completions import OpenAICompletions
from modelir.v1 import capabilities_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2, service_pb2

C = capabilities_pb2  # Capability values as the module's plain ints: a lookup on the enum wrapper costs ~0.4 us
MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
PROVIDER_OPTION_KEYS = (
    "bad_words",
    "ignore_eos",
    "include_stop_str_in_output",
    "logit_bias",
    "min_tokens",
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
    s = request.sampling
    if s.HasField("top_k"):
        body["top_k"] = s.top_k
    if s.HasField("min_p"):
        body["min_p"] = s.min_p
    if s.HasField("repetition_penalty"):
        body["repetition_penalty"] = s.repetition_penalty
    if s.stop_token_ids:
        body["stop_token_ids"] = list(s.stop_token_ids)
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
    if request.logprobs.require_token_ids:
        body["return_tokens_as_token_ids"] = True
    if request.logprobs.require_token_ids or request.HasField("input_scoring"):
        body["return_token_ids"] = True


def _finish(raw: dict[str, Any]) -> tuple[int, str, str]:
    """`stop_reason` names the stop string or token id that ended a choice (null for EOS)."""
    raw_reason = raw.get("finish_reason")
    stop = raw.get("stop_reason")
    if stop is not None and raw_reason == "stop":
        return response_pb2.FINISH_REASON_STOP_SEQUENCE, raw_reason, str(stop)
    return common.finish_reason(raw_reason), raw_reason or "", ""


class _Completions(OpenAICompletions):
    name = "vllm"
    path = "/v1/completions"
    max_top_logprobs = MAX_LOGPROBS

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        _extras(request, body)
        return body

    def logprob_value(self, value: float | None) -> float:
        return _unclamp(value)

    def token_id(self, token: str) -> int | None:
        return _token_id(token)

    def fill_logprobs(self, column, values: list[float | None]) -> None:
        try:  # min() runs in C; the per-value rewrite happens only when a clamp or a None is present
            rewrite = bool(values) and min(values) <= common.VLLM_MINUS_INFINITY
        except TypeError:  # a None: a position without a logprob
            rewrite = True
        column.extend([_unclamp(v) for v in values] if rewrite else values)

    def spells_token_ids(self, tokens: list[str]) -> bool:
        return bool(tokens) and tokens[0].startswith(_TOKEN_ID_PREFIX) and all(_token_id(t) is not None for t in tokens)

    def lift_finish(self, raw: dict[str, Any], choice: response_pb2.Choice) -> None:
        choice.finish_reason, choice.raw_finish_reason, choice.stop_sequence = _finish(raw)

    def lift_extras(self, request, body, out) -> None:
        for raw in body.get("choices") or ():
            if raw.get("prompt_token_ids") and not out.prompt_token_ids:
                out.prompt_token_ids.extend(raw["prompt_token_ids"])


class _Chat(OpenAIChat):
    name = "vllm"
    path = "/v1/chat/completions"

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        base = super().lower(request, stream=stream)
        body = orjson.loads(base.body)
        _extras(request, body)
        if request.HasField("input_scoring"):
            body["prompt_logprobs"] = request.input_scoring.top_k
        if request.HasField("reasoning"):
            body["include_reasoning"] = request.reasoning.include_thoughts
        return HttpRequest(base.method, base.path, orjson.dumps(body), base.headers, base.stream_format)

    def finish(self, raw: dict[str, Any]) -> tuple[int, str, str]:
        return _finish(raw)

    def adjust_logprobs(self, logprobs: logprobs_pb2.TokenLogprobs) -> logprobs_pb2.TokenLogprobs:
        if logprobs.tokens and logprobs.tokens[0].startswith(_TOKEN_ID_PREFIX):
            _chat_token_ids(logprobs)
        _unclamp_columns(logprobs)
        return logprobs

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        try:
            body = typed.CHAT_DECODER.decode(response.body)
        except msgspec.ValidationError:
            generic = common.parse_json(response.body, "response body")
            out = self.lift_parsed(request, generic, response)
            return self._prompt_extras(request, out, generic.get("prompt_logprobs"), generic.get("prompt_token_ids"))
        except msgspec.DecodeError as exc:
            raise errors.MalformedResponseError(f"the provider's response body is not valid JSON: {exc}") from None
        out = self._lift_typed(request, body, response)
        return self._prompt_extras(request, out, body.prompt_logprobs, body.prompt_token_ids)

    def _prompt_extras(self, request, out: response_pb2.Response, prompt_logprobs, prompt_ids) -> response_pb2.Response:
        if prompt_ids:
            out.prompt_token_ids.extend(prompt_ids)
        if request.HasField("input_scoring"):
            scores = _prompt_logprob_scores(prompt_logprobs, prompt_ids, request.input_scoring.top_k)
            if scores is None:
                out.error.CopyFrom(
                    errors_pb2.ResponseError(
                        reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
                        message="input scores were requested but vLLM returned no usable prompt_logprobs",
                    )
                )
            else:
                out.input_scores.CopyFrom(scores)
        return out


def _chat_token_ids(logprobs: logprobs_pb2.TokenLogprobs) -> None:
    """With `return_tokens_as_token_ids`, chat tokens are spelled `token_id:N`: fill the id columns."""
    ids = [_token_id(t) for t in logprobs.tokens]
    if ids and all(i is not None for i in ids) and not logprobs.token_ids:
        logprobs.token_ids.extend(ids)
    top_ids = [_token_id(t) for t in logprobs.top_tokens]
    if top_ids and all(i is not None for i in top_ids) and not logprobs.top_token_ids:
        logprobs.top_token_ids.extend(top_ids)


def _unclamp_columns(logprobs: logprobs_pb2.TokenLogprobs) -> None:
    # min() over the packed column runs in C; the Python rewrite happens only when a clamp is present.
    if logprobs.logprobs and min(logprobs.logprobs) <= common.VLLM_MINUS_INFINITY:
        values = [_unclamp(v) for v in logprobs.logprobs]
        del logprobs.logprobs[:]
        logprobs.logprobs.extend(values)
    if logprobs.top_logprobs and min(logprobs.top_logprobs) <= common.VLLM_MINUS_INFINITY:
        values = [_unclamp(v) for v in logprobs.top_logprobs]
        del logprobs.top_logprobs[:]
        logprobs.top_logprobs.extend(values)


def _prompt_logprob_scores(entries, prompt_ids, top_k: int) -> logprobs_pb2.InputScores | None:
    """`prompt_logprobs` (null, then `{id: {logprob, rank, decoded_token}}` per position) -> input scores.

    The actual token at each position is `prompt_token_ids[i]`; the other keys are its top-k alternatives.
    """
    if not entries or not prompt_ids or len(entries) != len(prompt_ids):
        return None
    scored = logprobs_pb2.TokenLogprobs()
    unscored = 0
    tops_count, top_ids, top_lps, top_tokens = [], [], [], []
    ids, values, tokens = [], [], []
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
    scored.token_ids.extend(ids)
    scored.logprobs.extend(values)
    scored.tokens.extend(tokens)
    if any(tops_count):
        scored.top_counts.extend(tops_count)
        scored.top_token_ids.extend(top_ids)
        scored.top_logprobs.extend(top_lps)
        scored.top_tokens.extend(top_tokens)
    text = "".join(tokens)
    return logprobs_pb2.InputScores(
        tokens=scored,
        logprob_sum=float(sum(values)),
        token_count=len(ids),
        byte_count=len(text.encode()),
        char_count=len(text),
        unscored_token_count=unscored,
    )


class VLLM(HttpTransport):
    """One transport for a vLLM server: routes by input kind to the completions or chat endpoint."""

    name = "vllm"
    version = "1.0.0"

    def __init__(self, *, provider_model: str = "") -> None:
        super().__init__(provider_model=provider_model)
        self._completions = _Completions(provider_model=provider_model)
        self._chat = _Chat(provider_model=provider_model)

    def _route(self, request: request_pb2.Request) -> HttpTransport:
        return self._chat if request.WhichOneof("input") == "conversation" else self._completions

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        capabilities = set(self._completions.capabilities()) | set(self._chat.manifest().capabilities)
        capabilities |= {
            C.CAPABILITY_INPUT_SCORING,
            C.CAPABILITY_SAMPLED_TOKEN_IDS,
            C.CAPABILITY_TOP_K_SAMPLING,
            C.CAPABILITY_MIN_P,
            C.CAPABILITY_REPETITION_PENALTY,
            C.CAPABILITY_STOP_TOKEN_IDS,
            C.CAPABILITY_CONSTRAINT_CHOICE,
            C.CAPABILITY_CONSTRAINT_REGEX,
            C.CAPABILITY_CONSTRAINT_GRAMMAR,
            C.CAPABILITY_CONSTRAINT_JSON_SCHEMA,
            C.CAPABILITY_TOKENIZE,
        }
        capabilities -= {C.CAPABILITY_FIM}  # vLLM rejects `suffix`
        return capabilities_pb2.CapabilityManifest(
            transport=self.name,
            transport_version=self.version,
            capabilities=sorted(capabilities),
            limits=capabilities_pb2.ModelLimits(max_top_logprobs=MAX_LOGPROBS, max_choices=128),
            grammar_dialects=[request_pb2.GRAMMAR_DIALECT_EBNF],
            provider_option_keys=PROVIDER_OPTION_KEYS,
        )

    def extra_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        route = self._route(request)
        reasons = []
        if route is self._chat:
            reasons += [
                r
                for r in self._chat.extra_unsupported(request, streaming=streaming)
                if "reasoning.include_thoughts" not in r  # vLLM returns reasoning text (include_reasoning)
            ]
            if request.HasField("input_scoring"):
                if request.input_scoring.WhichOneof("continuation"):
                    reasons.append(
                        "vLLM chat scores the whole rendered prompt (prompt_logprobs); to score a continuation, "
                        "send a raw prompt."
                    )
                if streaming:
                    reasons.append("vLLM returns prompt_logprobs on unary calls only, not on streams.")
        else:
            reasons += self._completions.extra_unsupported(request, streaming=streaming)
            if request.HasField("reasoning"):
                reasons.append("vLLM's completions endpoint takes no reasoning controls; send a conversation.")
        return reasons

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        return self._route(request).lower(request, stream=stream)

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        return self._route(request).lift(request, response)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return self._route(request).stream_lifter(request)

    def error(self, response: HttpResponse):
        return common.openai_error(response)

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
            token_ids=ids[start:], pieces=pieces[start:] if pieces else [], straddles_context=straddles
        )
