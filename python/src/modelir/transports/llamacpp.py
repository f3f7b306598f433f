"""llama.cpp `llama-server`: native `/completion` for raw prompts and token ids, `/v1/chat/completions` for
conversations, `/tokenize` (with pieces) and `/detokenize`.

Facts this follows (llama-server's README, https://github.com/ggml-org/llama.cpp/tree/master/tools/server): native
`n_probs` logprobs are taken *before* sampling (softmax of raw logits; they ignore temperature and grammar, and the
sampled token is often absent from the list), so they are reported with basis PRE_SAMPLING; `post_sampling_probs`
(a provider option) renames them `prob`/`top_probs` (probabilities, possibly fewer than asked) and they are
reported as logs with basis POST_SAMPLING; `token` strings are cut to valid UTF-8 while `bytes` keep the raw
bytes; the native stream ends without `[DONE]` (its last event has `stop: true`); `/tokenize` pieces are strings,
or byte lists when not valid UTF-8. There are no prompt logprobs (`echo` is silently ignored), so this manifest
does not claim input scoring, and such requests are rejected up front.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import orjson

from modelir import errors
from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.base import HttpRequest, HttpResponse, HttpTransport, RawEvent, StreamLifter, json_error
from modelir.transports.manifests import COMMON, ENGINE_SAMPLING, LOGPROBS, OPENAI_SAMPLING, capability_set
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import (
    capabilities_pb2,
    content_pb2,
    errors_pb2,
    logprobs_pb2,
    request_pb2,
    response_pb2,
    service_pb2,
    stream_pb2,
)

STOP_TYPES = {
    "eos": response_pb2.FINISH_REASON_STOP,
    "limit": response_pb2.FINISH_REASON_LENGTH,
    "word": response_pb2.FINISH_REASON_STOP_SEQUENCE,
}
PROVIDER_OPTION_KEYS = (
    "cache_prompt",
    "dry_multiplier",
    "ignore_eos",
    "post_sampling_probs",
    "typical_p",
)
JSON_HEADERS = (("content-type", "application/json"),)


def gbnf_literal(text: str) -> str:
    """A GBNF string literal (backslash, quote and control characters escaped)."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )
    return f'"{escaped}"'


def choice_grammar(labels: list[str]) -> str:
    """A choice among labels as GBNF: the output is exactly one of them."""
    return "root ::= " + " | ".join(gbnf_literal(label) for label in labels)


def _sampling(request: request_pb2.Request, body: dict[str, Any]) -> None:
    """The sampling and constraint fields both endpoints take, under llama.cpp's names."""
    common.copy_sampling(request.sampling, body, _SAMPLING)
    kind = request.constraint.WhichOneof("kind")
    if kind == "choice":
        body["grammar"] = choice_grammar(list(request.constraint.choice.labels))
    elif kind == "grammar":
        body["grammar"] = request.constraint.grammar.text
    elif kind == "json_schema":
        body["json_schema"] = orjson.loads(request.constraint.json_schema.schema_json)
    elif kind == "json_object":  # a schema that admits exactly the JSON objects
        body["json_schema"] = {"type": "object"}


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = (
    "temperature top_p top_k min_p seed presence_penalty frequency_penalty repetition_penalty:repeat_penalty stop"
)


class _Chat(OpenAIChat):
    name = "llamacpp"
    path = "/v1/chat/completions"

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        body.pop("response_format", None)  # llama.cpp takes the schema itself, like the native endpoint
        _sampling(request, body)
        if request.sampling.logit_bias:  # the OpenAI object form, which the chat endpoint also takes
            body["logit_bias"] = {str(k): v for k, v in sorted(request.sampling.logit_bias.items())}
        if request.sampling.stop:
            # The chat answer says `stop` for an end of sequence and for a stop string alike; the native fields
            # that tell them apart come in `__verbose`, cut down to those two by `response_fields`.
            body["verbose"] = True
            body["response_fields"] = list(_VERBOSE_FIELDS)
        return body

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        out = super().lift(request, response)
        if request.sampling.stop and out.choices:
            if unknown := _chat_stop(out.choices[0], _verbose(response.body)):
                out.warnings.add(code="stop_sequence_unknown", message=unknown)
        return out

    def lift_extras(self, request, body, out, facts) -> None:
        tokens.label_choices(request, out)
        for choice in out.choices:
            if choice.HasField("logprobs"):
                _chat_logprobs(request, choice.logprobs)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _ChatStream(super().stream_lifter(request), request)


_VERBOSE_FIELDS = ("stop_type", "stopping_word")


class _Verbose(msgspec.Struct):
    stop_type: Any = None
    stopping_word: Any = None


class _WithVerbose(msgspec.Struct):
    verbose: _Verbose | None = msgspec.field(name="__verbose", default=None)


def _verbose(body: bytes) -> _Verbose | None:
    """The `__verbose` member of a chat answer or chunk (None when absent or not an object)."""
    try:
        return msgspec.json.decode(body, type=_WithVerbose).verbose
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _chat_stop(target: response_pb2.Choice | stream_pb2.ChoiceFinish, verbose: _Verbose | None) -> str:
    """A chat `stop` made precise by the native `stop_type` (a stop string is `STOP_SEQUENCE` with the string, as
    on the raw-prompt route). Returns why it stays unknown when the answer does not say, else ""."""
    if target.finish_reason != response_pb2.FINISH_REASON_STOP:
        return ""
    stop_type = verbose.stop_type if verbose is not None else None
    if stop_type == "word":
        target.finish_reason = response_pb2.FINISH_REASON_STOP_SEQUENCE
        word = verbose.stopping_word if verbose is not None else None
        stops.set_stop(target, word if isinstance(word, str) else None)
        return ""
    if stop_type == "eos":
        return ""
    return (
        "llama-server's chat answer says `stop` for an end of sequence and for a stop string alike, and did not say "
        "which (no `__verbose.stop_type`): a stop string may have ended it"
    )


def _chat_logprobs(request: request_pb2.Request, logprobs: logprobs_pb2.TokenLogprobs) -> None:
    """The chat endpoint's logprobs are the native `n_probs` ones (pre-sampling), and without `top_logprobs` it
    still sends its default 20 alternatives (sending 0 turns logprobs off): keep only what was asked for."""
    logprobs.basis = logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING
    if not request.logprob_options.top_logprob_count:
        for column in (
            "top_counts",
            "top_token_ids",
            "top_logprobs",
            "top_tokens",
            "top_token_bytes",
            "top_token_byte_offsets",
        ):
            logprobs.ClearField(column)


class _ChatStream(tokens.LabelledStream):
    """The chat stream, with its logprobs labelled and trimmed, and its stop told, as in the unary answer."""

    def __init__(self, inner: StreamLifter, request: request_pb2.Request) -> None:
        super().__init__(inner, request)
        self.verbose: _Verbose | None = None

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        out = self.inner.feed(event)
        if self.request.sampling.stop and b'"__verbose"' in event.data:  # on the first chunk of the final result
            self.verbose = _verbose(event.data) or self.verbose
        for item in out:
            if item.WhichOneof("event") == "delta" and item.delta.HasField("logprobs"):
                _chat_logprobs(self.request, item.delta.logprobs)
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = super().close(interrupted=interrupted)
        if self.request.sampling.stop:
            for item in out:
                if item.WhichOneof("event") != "end":
                    continue
                for finish in item.end.finishes:
                    if finish.choice_index == 0 and (unknown := _chat_stop(finish, self.verbose)):
                        item.end.warnings.add(code="stop_sequence_unknown", message=unknown)
        return out


class LlamaCpp(HttpTransport):
    name = "llamacpp"
    answer_keys = ("choices", "content")  # see HttpTransport.answer_keys
    version = "1.0.0"

    def __init__(self, *, provider_model: str = "") -> None:
        super().__init__(provider_model=provider_model)
        self._chat = _Chat(provider_model=provider_model)

    capabilities = capability_set(
        COMMON | LOGPROBS | OPENAI_SAMPLING | ENGINE_SAMPLING,
        "COMPLETION CHAT TOKEN_INPUT SYSTEM_MESSAGES SAMPLED_TOKEN_IDS CONSTRAINT_CHOICE "
        "CONSTRAINT_JSON_SCHEMA CONSTRAINT_JSON_OBJECT CONSTRAINT_GRAMMAR TOKENIZE LOGIT_BIAS",
    )
    # llama-server clamps larger n_probs silently; the manifest says where the honest limit is.
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=1)
    seed_range = (0, 2**32 - 2)  # a uint32, whose last value (LLAMA_DEFAULT_SEED) means "random"
    grammar_dialects = ("GBNF",)
    provider_option_keys = PROVIDER_OPTION_KEYS
    logprob_bases = ("PRE_SAMPLING", "POST_SAMPLING")
    part_kinds = OpenAIChat.part_kinds  # conversations go to the chat endpoint

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = []
        if request.WhichOneof("input") == "conversation":
            if request.logprob_options.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING:
                reasons.append("Post-sampling logprobs come from the native /completion endpoint; send a raw prompt.")
            if request.sampling.HasField("max_output_tokens") and request.sampling.max_output_tokens == 0:
                reasons.append("llama-server still generates a token when asked for none (max_output_tokens 0).")
        elif request.sampling.HasField("max_output_tokens") and request.sampling.max_output_tokens == 0:
            reasons.append("llama-server still generates a token when asked for none (n_predict 0).")
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        if request.WhichOneof("input") == "conversation":
            return self._chat.lower(request, stream=stream)
        prompt: Any = list(request.token_ids.ids) if request.WhichOneof("input") == "token_ids" else request.prompt
        body: dict[str, Any] = {"prompt": prompt, "return_tokens": True}
        if request.sampling.HasField("max_output_tokens"):
            body["n_predict"] = request.sampling.max_output_tokens
        _sampling(request, body)
        if request.sampling.logit_bias:  # the documented `[[token id, bias], ...]` form
            body["logit_bias"] = [[k, v] for k, v in sorted(request.sampling.logit_bias.items())]
        if request.HasField("logprob_options"):
            body["n_probs"] = max(request.logprob_options.top_logprob_count, 1)
            if request.logprob_options.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING:
                body["post_sampling_probs"] = True
        if stream:
            body["stream"] = True
        body.update(common.provider_options(request, self.name))
        return HttpRequest("POST", "/completion", orjson.dumps(body), JSON_HEADERS, "sse" if stream else None)

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        if request.WhichOneof("input") == "conversation":
            return self._chat.lift(request, response)
        body = common.parse_json(response.body, "response body")
        out = response_pb2.Response(model=body.get("model") or "")
        choice = out.choices.add(index=0)
        choice.message.role = content_pb2.ROLE_ASSISTANT
        choice.message.parts.add(text=body.get("content") or "")
        _finish(choice, body)
        ids = body.get("tokens")
        if isinstance(ids, list):  # `return_tokens`: every sampled id, the EOS that ended it included
            tokens.fill(choice, ids, trimmed=int(body.get("stop_type") == "eos"))
        choice.constrained_label = tokens.constrained_label(request, body.get("content") or "")
        probabilities = body.get("completion_probabilities")
        if probabilities is None and body.get("stop_type") == "word" and isinstance(ids, list) and ids:
            probabilities = []  # the stop string's trim dropped every entry, and the server then leaves the key out
        missing: list[int] = []
        dropped: list[int] = []
        facts = soft_errors.Facts()
        if request.HasField("logprob_options"):
            if probabilities is None:
                facts.lack_logprobs(0)
            else:
                post = request.logprob_options.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING
                probabilities, missing = _aligned(probabilities, ids, post=post)
                dropped = _dropped_with_the_stop(probabilities, missing, body)
                _columns(probabilities, request.logprob_options.top_logprob_count, choice.logprobs)
        _usage_and_timing(body, out)
        soft_errors.settle(request, out, facts)
        if request.HasField("logprob_options") and probabilities is not None and missing:
            out.errors.add(
                reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
                choice_index=0,
                message=_missing_message(missing, dropped),
            )
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        if request.WhichOneof("input") == "conversation":
            return self._chat.stream_lifter(request)
        return _CompletionStreamLifter(self, request)

    def error(self, response: HttpResponse) -> errors.ModelError:
        """As the OpenAI-style error body says, except that a token id outside the vocabulary (detokenize, token
        input) is a request error: llama-server answers it with a 500 carrying the C++ range check's message,
        which retrying cannot fix."""
        exc = json_error(response)
        if response.status == 500 and "_M_range_check" in exc.message:
            return errors.ProviderRejectedError(
                f"a token id is outside the model's vocabulary: {exc.message}",
                http_status=response.status,
                provider_code=exc.provider_code,
            )
        return exc

    # ---- tokenize ----------------------------------------------------------------------------------

    def lower_tokenize(self, request: service_pb2.TokenizeRequest) -> list[HttpRequest]:
        """`/tokenize` with pieces of context + text, and of the context alone when there is one."""

        def tokenize(content: str, add_special: bool) -> HttpRequest:
            body = {"content": content, "add_special": add_special, "with_pieces": True}
            return HttpRequest("POST", "/tokenize", orjson.dumps(body), JSON_HEADERS)

        natives = [tokenize(request.context + request.text, request.add_special_tokens)]
        if request.context:
            natives.append(tokenize(request.context, request.add_special_tokens))
        return natives

    def lift_tokenize(
        self, request: service_pb2.TokenizeRequest, responses: list[HttpResponse]
    ) -> service_pb2.TokenizeResponse:
        whole = common.parse_json(responses[0].body, "tokenize body")["tokens"]
        start, straddles = 0, False
        if len(responses) > 1:
            context = common.parse_json(responses[1].body, "tokenize body")["tokens"]
            while start < min(len(whole), len(context)) and whole[start]["id"] == context[start]["id"]:
                start += 1
            straddles = start < len(context)
        pieces = whole[start:]
        raw = [bytes(p["piece"]) if isinstance(p["piece"], list) else p["piece"].encode() for p in pieces]
        out = service_pb2.TokenizeResponse(
            token_ids=[p["id"] for p in pieces],
            tokens=[
                p["piece"] if isinstance(p["piece"], str) else b.decode("utf-8", "replace")
                for p, b in zip(pieces, raw, strict=True)
            ],
            token_bytes=b"".join(raw),
            straddles_context=straddles,
        )
        out.token_byte_offsets.extend(lp.joined(raw)[1])
        return out

    def lower_detokenize(self, token_ids: list[int]) -> HttpRequest:
        return HttpRequest("POST", "/detokenize", orjson.dumps({"tokens": token_ids}), JSON_HEADERS)

    def lift_detokenize(self, response: HttpResponse) -> str:
        return common.parse_json(response.body, "detokenize body")["content"]

    def lower_tokenizer_info(self, model: str) -> list[HttpRequest]:
        """`GET /v1/models`, whose `meta.n_vocab` is the vocabulary size (`ModelInfo.tokenizer`)."""
        return [HttpRequest("GET", "/v1/models")]

    def lift_tokenizer_info(self, responses: list[HttpResponse]) -> capabilities_pb2.TokenizerInfo:
        """The vocabulary size. `/props` names BOS and EOS only as text (`bos_token`, `eos_token`), not as ids,
        so they are left unset rather than guessed."""
        body = common.parse_json(responses[0].body, "models body")
        models = body.get("data") if isinstance(body, dict) else None
        meta = models[0].get("meta") if isinstance(models, list) and models and isinstance(models[0], dict) else None
        size = meta.get("n_vocab") if isinstance(meta, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size < 2**31:
            raise errors.MalformedResponseError(f"{self.name}: /v1/models has no vocabulary size (meta.n_vocab)")
        return capabilities_pb2.TokenizerInfo(vocabulary_size=size)

    def lower_render_prompt(self, request: request_pb2.Request) -> HttpRequest:
        """`/apply-template`: the conversation through the server's chat template, without generating."""
        body = {"messages": self._chat.body(request, stream=False)["messages"]}
        return HttpRequest("POST", "/apply-template", orjson.dumps(body), JSON_HEADERS)

    def lift_render_prompt(self, response: HttpResponse) -> str:
        prompt = common.parse_json(response.body, "apply-template body").get("prompt")
        if not isinstance(prompt, str):
            raise errors.MalformedResponseError(f"{self.name}: the /apply-template answer has no string `prompt`")
        return prompt


def _finish(choice: response_pb2.Choice, body: dict[str, Any]) -> None:
    stop_type = body.get("stop_type") or ""
    choice.raw_finish_reason = stop_type
    choice.finish_reason = STOP_TYPES.get(
        stop_type, response_pb2.FINISH_REASON_OTHER if stop_type else response_pb2.FINISH_REASON_UNSPECIFIED
    )
    if stop_type == "word":
        stops.set_stop(choice, body.get("stopping_word"))


def _probability_log(value: float | None) -> float | None:
    if value is None:  # a position without a logprob (see `_aligned`)
        return None
    return math.log(value) if value > 0 else -math.inf


def _aligned(entries: list[dict[str, Any]], ids: Any, *, post: bool) -> tuple[list[dict[str, Any]], list[int]]:
    """`completion_probabilities` aligned to the sampled ids (`tokens`, the truth): llama-server leaves out the entry
    of a token that ends inside a UTF-8 sequence (the next entry carries its bytes), so each missing position gets
    a placeholder without a logprob instead of shifting the rest. Unchanged when the entries are not a subsequence
    of the ids (or there are no ids). `post`: the dialect asked for, for when there are no entries to tell."""
    if not isinstance(ids, list) or len(ids) <= len(entries):
        return entries, []
    post = "prob" in entries[0] if entries else post  # the entries' dialect (post- or pre-sampling)
    value = "prob" if post else "logprob"
    out: list[dict[str, Any]] = []
    missing: list[int] = []
    j = 0
    for position, token in enumerate(ids):
        if j < len(entries) and entries[j].get("id") == token:
            out.append(entries[j])
            j += 1
        else:
            missing.append(position)
            out.append({"id": token, "token": "", "bytes": [], value: None})
    return (out, missing) if j == len(entries) else (entries, [])


def _dropped_with_the_stop(entries: list[dict[str, Any]], missing: list[int], body: dict[str, Any]) -> list[int]:
    """The positions at the end whose entries llama-server dropped because a stop string ended generation.

    Its unary answer (never its stream) drops as many trailing entries as the stop string has tokens, whichever
    tokens spelled it. Each entry's bytes are the text that token added (`text_to_send`), so the text after the
    kept entries' bytes is the dropped tokens' text. It goes on the last of them, where the stream has it whenever
    the others were held back as a possible start of the stop string (a stop string spanning tokens; how it splits
    otherwise is not said), so that the bytes still give the text. Left without bytes when that text is not exact
    (it has U+FFFD standing for raw bytes)."""
    if body.get("stop_type") != "word" or not missing:
        return []
    gaps = set(missing)
    first = len(entries)
    while first > 0 and first - 1 in gaps:
        first -= 1
    dropped = list(range(first, len(entries)))
    content = body.get("content")
    if dropped and isinstance(content, str):
        kept = b"".join(bytes(e.get("bytes") or []) for e in entries[:first])
        text = content.encode()
        rest = text[len(kept) :]
        if text.startswith(kept) and rest and _REPLACEMENT not in rest:
            try:
                entries[-1]["token"] = rest.decode()
            except UnicodeDecodeError:  # the kept bytes end inside a character: the split is not the text's
                return dropped
            entries[-1]["bytes"] = list(rest)
    return dropped


_REPLACEMENT = "\ufffd".encode()  # what the server's JSON writes for bytes that are not UTF-8


def _missing_message(missing: list[int], dropped: list[int]) -> str:
    inside = [p for p in missing if p not in dropped]
    reasons = []
    if inside:
        reasons.append(f"{inside} (tokens that end inside a UTF-8 sequence; their bytes are in the next entry's)")
    if dropped:
        reasons.append(
            f"{dropped} (the last tokens before a stop string ended generation: llama-server's unary answer drops as "
            "many entries as the stop string has tokens; their text is on the last of them)"
        )
    return f"llama-server gave no logprob for the sampled tokens at positions {' and '.join(reasons)}; they are NaN"


def _columns(entries: list[dict[str, Any]], top_k: int, out: logprobs_pb2.TokenLogprobs) -> None:
    """`completion_probabilities` -> columnar logprobs. Pre-sampling `logprob`s, or post-sampling `prob`s."""
    if not entries:
        return
    post = "prob" in entries[0]
    tops = [e.get("top_probs" if post else "top_logprobs") or [] for e in entries] if top_k else None
    flat = [t for top in tops for t in top] if tops is not None else []
    lp.columns(
        out,
        tokens=[e["token"] for e in entries],
        logprobs=[_probability_log(e["prob"]) for e in entries] if post else [e["logprob"] for e in entries],
        token_ids=[e["id"] for e in entries],
        token_bytes=lp.joined([bytes(e.get("bytes") or []) for e in entries]),
        top_counts=list(map(len, tops)) if tops is not None else None,
        top_tokens=[t["token"] for t in flat],
        top_logprobs=[_probability_log(t["prob"]) for t in flat] if post else [t["logprob"] for t in flat],
        top_token_ids=[t["id"] for t in flat],
        top_token_bytes=lp.joined([bytes(t.get("bytes") or []) for t in flat]) if tops is not None else None,
        basis=logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING if post else logprobs_pb2.LOGPROB_BASIS_PRE_SAMPLING,
    )


def _usage_and_timing(body: dict[str, Any], out: response_pb2.Response) -> None:
    if body.get("tokens_evaluated") is not None:
        out.usage.input_token_count = body["tokens_evaluated"]
    if body.get("tokens_predicted") is not None:
        out.usage.output_token_count = body["tokens_predicted"]
    timings = body.get("timings") or {}
    if timings.get("prompt_ms") is not None:
        out.timing.provider_input_duration.FromNanoseconds(int(timings["prompt_ms"] * 1e6))
    if timings.get("predicted_ms") is not None:
        out.timing.provider_output_duration.FromNanoseconds(int(timings["predicted_ms"] * 1e6))


class _CompletionStreamLifter(StreamLifter):
    """Native `/completion` events: one token each, then a final `stop: true` event with the totals."""

    def __init__(self, transport: LlamaCpp, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.final: dict[str, Any] | None = None
        self.saw_probabilities = False
        self.parts = StreamParts()
        # Each event's sampled id is held until the next event says whether it was the EOS that ended the stream
        # (a token of no part); llama-server sends one id per event.
        self.pending: list[int] = []
        self.id_count = 0
        # `tokens_predicted` as of the last token event (None once an event lacks it or its id), and whether that
        # event's text was empty: llama-server holds text back while it might still change (`_held_back`).
        self.predicted_so_far: int | None = 0
        self.last_text_empty = False

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        data = common.parse_json(event.data, "stream event")
        out: list[stream_pb2.StreamEvent] = []
        if not self.started:
            self.started = True
            out.append(stream_pb2.StreamEvent(start=stream_pb2.StreamStart(model=data.get("model") or "")))
        delta = self.parts.delta(0, "text", text=data.get("content") or "")
        probabilities = data.get("completion_probabilities")
        if probabilities is not None:
            self.saw_probabilities = True
            if self.request.HasField("logprob_options") and probabilities:
                _columns(probabilities, self.request.logprob_options.top_logprob_count, delta.delta.logprobs)
        ids = data.get("tokens")
        ids = [i for i in ids if isinstance(i, int)] if isinstance(ids, list) else []
        self.id_count += len(ids)
        if not data.get("stop") and (ids or data.get("content")):  # a token event (text without an id says nothing)
            predicted = data.get("tokens_predicted")
            known = bool(ids) and isinstance(predicted, int) and self.predicted_so_far is not None
            self.predicted_so_far = predicted if known else None
            self.last_text_empty = not data.get("content")
        if data.get("stop"):
            self.final = data
            if data.get("stop_type") == "eos" and not self._unsent():  # else the EOS never had an event either
                delta.delta.token_ids.extend(self.pending[:-1] + ids[:-1])
                self.pending = (self.pending + ids)[-1:]
            else:
                delta.delta.token_ids.extend(self.pending + ids)
                self.pending = []
        else:
            delta.delta.token_ids.extend(self.pending)
            self.pending = ids
        out.append(delta)
        return out

    def _unsent(self) -> int:
        """How many sampled tokens at the end had no event (0 when the events do not say)."""
        predicted = self.final.get("tokens_predicted") if self.final is not None else None
        if not isinstance(predicted, int) or self.predicted_so_far is None:
            return 0  # an event without its id or count: the events do not say
        return max(predicted - self.predicted_so_far, 0)

    def _held_back(self) -> str:
        """Why the streamed text lacks the end of the answer, or "" when it does not.

        llama-server sends a token's text only once it cannot change: while the text ends inside a UTF-8 character
        the token gets no event at all, and while it ends in what may begin a stop string the event's text is
        empty. Its final stream event carries no text, so whatever is still held back when generation ends is
        never sent (the unary answer has it). The first case is certain (the last events' `tokens_predicted`
        falls short of the final one); the second is likely when the limit ends an answer whose last event had a
        token but no text."""
        if unsent := self._unsent():
            return (
                f"llama-server never sent the text of the last {unsent} sampled token(s): it ended inside a UTF-8 "
                "character, which its stream holds back; the unary answer has it (U+FFFD for the cut bytes)"
            )
        if (
            self.request.sampling.stop
            and self.final
            and self.final.get("stop_type") == "limit"
            and self.last_text_empty
        ):
            return (
                "llama-server may have held back the end of the text as a possible start of a stop string when the "
                "token limit ended generation; its stream never sends such text (the unary answer has it)"
            )
        return ""

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        facts = soft_errors.Facts()
        if self.final is not None:
            settled = response_pb2.Response()
            choice = settled.choices.add()
            _finish(choice, self.final)
            _usage_and_timing(self.final, settled)
            finish = end.finishes.add(
                choice_index=0, finish_reason=choice.finish_reason, raw_finish_reason=choice.raw_finish_reason
            )
            stops.copy_stop(choice, finish)
            tokens.finish_unattributed(finish, self.pending)
            finish.constrained_label = tokens.constrained_label(self.request, self.parts.texts().get(0, ""))
            predicted = self.final.get("tokens_predicted")
            if isinstance(predicted, int) and self.predicted_so_far is not None and self.id_count < predicted:
                # llama-server sends no event for a token that ends inside a UTF-8 sequence, so its id is lost.
                end.warnings.add(
                    code="sampled_tokens_incomplete",
                    message=f"the stream carried {self.id_count} of {predicted} sampled token ids",
                )
            if unsent_text := self._held_back():
                end.warnings.add(code="stream_text_incomplete", message=unsent_text)
            end.usage.CopyFrom(settled.usage)
            end.model = self.final.get("model") or ""  # only the last event names the model
            if settled.HasField("timing"):
                end.timing.CopyFrom(settled.timing)
            if not self.saw_probabilities:
                facts.lack_logprobs(0)
        else:
            end.finishes.add(choice_index=0)
            facts.cut_short = "the stream ended before its final (stop) event; the output is partial"
        events = []
        if self.final is None and self.pending:  # cut short: the held id was not a final EOS
            held = stream_pb2.PartDelta(choice_index=0, part_index=0, token_ids=self.pending)
            events.append(stream_pb2.StreamEvent(delta=held))
        soft_errors.settle_stream(self.request, end, facts, self.parts.texts())
        return [*events, stream_pb2.StreamEvent(end=end)]
