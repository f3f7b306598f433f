"""sglang's native `POST /generate`: text or token ids in, sampled tokens with ids and logprobs out, prompt
scoring, and regex / JSON-schema / EBNF constraints; conversations (with multi-turn token-in) when the model's chat
template is configured.

Facts this follows (sglang's native API documentation, https://docs.sglang.ai/basic_usage/native_api.html):
sampling and constraints go in `sampling_params`;
`return_logprob` with `logprob_start_len` 0 scores the prompt from its first token (whose logprob is null);
logprobs are `[logprob, token_id, text|null]` triples (text only with `return_text_in_logprobs`), top
alternatives a list of such triples per position; `meta_info.finish_reason` is an object (`{"type": "stop",
"matched": ...}`, `{"type": "length", "length": N}`, `{"type": "abort", ...}`); with `n` > 1 the answer is a
list; streams are `data: {...}` lines ending with `[DONE]`, and `text`, `output_ids` and the output logprob lists
in them may be cumulative (older servers) or incremental (`--incremental-streaming-output`, which current servers
apply to the logprob lists too): both are handled, the mode read from the ids where the events carry them.

A choice among labels lowers to a regex alternation of the escaped labels (the text is then the label itself:
`Choice.constrained_label`). Input scoring takes logprobs from the first token (`logprob_start_len: 0`); a
continuation after a text context is located by the scored tokens' text offsets (cumulative token texts), never by
re-tokenizing, and after token input it starts at its first id; several continuations are one batch (`text` or
`input_ids` a list), answered in order (`sglang_scores`). `output_ids` are the sampled ids (`Choice.sampled_tokens`).

Conversations: `/generate` has no chat route, so a conversation is rendered with the model's own chat template,
given as the option `tokenizer_config` (the path of the model's `tokenizer_config.json`) or `chat_template` (the
template's text, which wins over the file's). With one, the manifest adds CHAT, SYSTEM_MESSAGES and
MULTI_TURN_TOKEN_INPUT and every conversation runs as a token-id prompt: rendered here, tokenized by `/tokenize`,
sent as `input_ids` (`sglang_chat`, `token_prompt`). Without one, conversations are refused up front, saying how
to configure it.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from modelir.errors import soft as soft_errors
from modelir.pipeline import content_kinds, continuations
from modelir.pipeline.survey import Survey, survey
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports import chat_template as chat_template_module
from modelir.transports import sglang_chat, sglang_scores, token_prompt
from modelir.transports.base import (
    HttpRequest,
    HttpResponse,
    HttpTransport,
    RawEvent,
    StreamLifter,
    TokenPromptSteps,
)
from modelir.transports.manifests import COMMON, ENGINE_SAMPLING, LOGPROBS, capability_set
from modelir.transports.stream_parts import StreamParts
from modelir.v1 import capabilities_pb2, content_pb2, request_pb2, response_pb2, stream_pb2

JSON_HEADERS = (("content-type", "application/json"),)
PROVIDER_OPTION_KEYS = ("ignore_eos", "no_stop_trim", "skip_special_tokens", "lora_path")
_SAMPLING_OPTION_KEYS = {"ignore_eos", "no_stop_trim", "skip_special_tokens"}


def choice_regex(labels: list[str]) -> str:
    return "(" + "|".join(re.escape(label) for label in labels) + ")"


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = (
    "temperature top_p top_k min_p presence_penalty frequency_penalty repetition_penalty "
    "max_output_tokens:max_new_tokens stop stop_token_ids choice_count:n min_output_tokens:min_new_tokens"
)


class SGLang(HttpTransport):
    name = "sglang"
    answer_keys = ("text",)  # see HttpTransport.answer_keys
    version = "1.0.0"

    capabilities = capability_set(
        COMMON | LOGPROBS | ENGINE_SAMPLING,
        "COMPLETION TOKEN_INPUT INPUT_SCORING SAMPLED_TOKEN_IDS CONSTRAINT_CHOICE CONSTRAINT_REGEX "
        "CONSTRAINT_JSON_SCHEMA CONSTRAINT_GRAMMAR MULTIPLE_CHOICES STOP_SEQUENCES STOP_TOKEN_IDS "
        "PRESENCE_FREQUENCY_PENALTIES LOGIT_BIAS MIN_OUTPUT_TOKENS",
    )
    limits = capabilities_pb2.ModelLimits(max_top_logprobs=20, max_choices=64)
    grammar_dialects = ("EBNF",)
    provider_option_keys = PROVIDER_OPTION_KEYS
    scores_continuations_at_once = True  # several continuations are one batch (`text` or `input_ids` lists)
    # Without a template no part is carried (the manifest lacks CHAT); with one, `sglang_chat.unsupported` decides.
    part_kinds = content_kinds.none_carried("sglang /generate")
    path_options = ("tokenizer_config",)  # see Transport.path_options

    def __init__(
        self, *, provider_model: str = "", tokenizer_config: str | None = None, chat_template: str | None = None
    ) -> None:
        super().__init__(provider_model=provider_model)
        # The model's chat template, for conversations (`sglang_chat`); None: conversations are refused.
        self.template = chat_template_module.load(tokenizer_config, chat_template)

    def manifest(self) -> capabilities_pb2.CapabilityManifest:
        manifest = super().manifest()
        if self.template is not None:
            claimed = sorted({*manifest.capabilities, *sglang_chat.CAPABILITIES})
            del manifest.capabilities[:]
            manifest.capabilities.extend(claimed)
        return manifest

    def extra_unsupported(
        self, request: request_pb2.Request, *, streaming: bool = False, seen: Survey | None = None
    ) -> list[str]:
        if request.WhichOneof("input") == "conversation" and self.template is not None:
            # The template renders the conversation: the parts are decided by `sglang_chat.unsupported`, not by
            # `part_kinds`, and provider options on messages and parts would be ignored.
            return self._nested_option_rejections(seen or survey(request)) + self.wire_unsupported(
                request, streaming=streaming
            )
        return super().extra_unsupported(request, streaming=streaming, seen=seen)

    def runs_as_token_prompt(self, request: request_pb2.Request) -> bool:
        """Every conversation: rendered by the template and tokenized by the engine (`sglang_chat`)."""
        return request.WhichOneof("input") == "conversation"

    def token_prompt_steps(self, plan: token_prompt.Plan) -> TokenPromptSteps:
        assert self.template is not None, "conversations are refused up front without a template"
        return sglang_chat.token_prompt_steps(self.template, plan)

    def wire_unsupported(self, request: request_pb2.Request, *, streaming: bool = False) -> list[str]:
        reasons = sglang_chat.unsupported(request, self.template)
        if request.HasField("input_scoring") and streaming:
            reasons.append("sglang input scores are taken from the unary answer; score without streaming.")
        if request.HasField("input_scoring") and request.sampling.choice_count > 1:
            reasons.append("Input scoring with several choices would score the same prompt several times.")
        generates = not request.sampling.HasField("max_output_tokens") or request.sampling.max_output_tokens > 0
        if len(continuations.of(request)) > 1 and generates:
            reasons.append(
                "Several continuations are scored as a batch of inputs, each of which would also generate; "
                "set sampling.max_output_tokens to 0."
            )
        return reasons

    # ---- lower -------------------------------------------------------------------------------------

    def lower(self, request: request_pb2.Request, *, stream: bool) -> HttpRequest:
        body: dict[str, Any] = {}
        inputs = [_full_input(request, span) for span in _spans(request)]
        # Several continuations are one batch (a list of inputs), answered in order.
        body["input_ids" if request.WhichOneof("input") == "token_ids" else "text"] = (
            inputs[0] if len(inputs) == 1 else inputs
        )
        params: dict[str, Any] = {}
        common.copy_sampling(request.sampling, params, _SAMPLING)
        if request.sampling.logit_bias:  # `SamplingParams.logit_bias`: token ids as strings
            params["logit_bias"] = {str(k): v for k, v in sorted(request.sampling.logit_bias.items())}
        kind = request.constraint.WhichOneof("kind")
        if kind == "choice":
            params["regex"] = choice_regex(list(request.constraint.choice.labels))
        elif kind == "regex":
            params["regex"] = request.constraint.regex
        elif kind == "json_schema":
            params["json_schema"] = request.constraint.json_schema.schema_json
        elif kind == "grammar":
            params["ebnf"] = request.constraint.grammar.text
        options = common.provider_options(request, self.name)
        params.update({k: v for k, v in options.items() if k in _SAMPLING_OPTION_KEYS})
        body["sampling_params"] = params
        if request.HasField("logprob_options") or request.HasField("input_scoring"):
            body["return_logprob"] = True
            body["return_text_in_logprobs"] = True
            top_k = max(request.logprob_options.top_logprob_count, request.input_scoring.top_logprob_count)
            if top_k:
                body["top_logprobs_num"] = top_k
        if request.HasField("input_scoring"):
            # From the first token: the context's tokens locate the span and give its start in bytes.
            body["logprob_start_len"] = 0
        if stream:
            body["stream"] = True
        body.update({k: v for k, v in options.items() if k not in _SAMPLING_OPTION_KEYS})
        return HttpRequest("POST", "/generate", orjson.dumps(body), JSON_HEADERS, "sse" if stream else None)

    # ---- lift --------------------------------------------------------------------------------------

    def lift(self, request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
        body = common.parse_json(response.body, "response body")
        answers = body if isinstance(body, list) else [body]
        out = response_pb2.Response(model=self.provider_model)  # /generate does not name the model
        facts = soft_errors.Facts()
        spans = _spans(request)
        if request.HasField("input_scoring"):
            if len(answers) != len(spans):
                facts.missing_input_scores = f"sglang answered {len(answers)} inputs for {len(spans)} continuations"
            else:
                for span, answer in zip(spans, answers, strict=True):
                    if not sglang_scores.input_scores(request, span, answer.get("meta_info") or {}, out):
                        facts.missing_input_scores = "sglang returned no input_token_logprobs"
            if len(spans) > 1:  # a batch of scored inputs, generating nothing: one (empty) choice
                answers = answers[:1]
        for index, answer in enumerate(answers):
            meta = answer.get("meta_info") or {}
            if index == 0:
                out.id = meta.get("id") or ""
            choice = out.choices.add(index=index)
            choice.message.role = content_pb2.ROLE_ASSISTANT
            choice.message.parts.add(text=answer.get("text") or "")
            _finish(choice, meta.get("finish_reason"), request)
            ids = answer.get("output_ids")
            if isinstance(ids, list):
                tokens.fill(choice, ids, trimmed=_trimmed(request, meta, ids))
            choice.constrained_label = tokens.constrained_label(request, answer.get("text") or "")
            if request.HasField("logprob_options"):
                if meta.get("output_token_logprobs") is None:
                    facts.lack_logprobs(index)
                else:
                    sglang_scores.columns(
                        meta["output_token_logprobs"],
                        meta.get("output_top_logprobs"),
                        request.logprob_options.top_logprob_count,
                        choice.logprobs,
                    )
        _usage(answers, out)
        soft_errors.settle(request, out, facts)
        return out

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _GenerateStreamLifter(self, request)


_Span = sglang_scores.Span


def _spans(request: request_pb2.Request) -> list[_Span]:
    """What each scored input adds after the request's input: one None when nothing or the whole input is scored."""
    spans = continuations.of(request)
    if not spans:
        return [None]
    return [list(c.token_ids.ids) if c.WhichOneof("content") == "token_ids" else c.text for c in spans]


def _full_input(request: request_pb2.Request, span: _Span) -> Any:
    if request.WhichOneof("input") == "token_ids":
        return [*request.token_ids.ids, *(span if isinstance(span, list) else [])]
    return request.prompt + (span if isinstance(span, str) else "")


def _trimmed(request: request_pb2.Request, meta: dict[str, Any], ids: list[int]) -> int:
    """1 when the last output id is the stop / EOS id that matched (`finish_reason.matched`), whose text sglang
    trims unless `no_stop_trim`."""
    reason = meta.get("finish_reason")
    if not isinstance(reason, dict) or reason.get("type") != "stop":
        return 0
    if common.provider_options(request, "sglang").get("no_stop_trim"):
        return 0
    return tokens.trailing_stop(ids, reason.get("matched"))


def _finish(choice: response_pb2.Choice, reason: Any, request: request_pb2.Request) -> None:
    if not isinstance(reason, dict):
        choice.finish_reason = response_pb2.FINISH_REASON_UNSPECIFIED
        return
    kind = reason.get("type") or ""
    choice.raw_finish_reason = orjson.dumps(reason).decode()
    if kind == "length":
        choice.finish_reason = response_pb2.FINISH_REASON_LENGTH
    elif kind == "abort":
        choice.finish_reason = response_pb2.FINISH_REASON_ERROR
    elif kind == "stop":
        matched = reason.get("matched")
        # sglang names what matched: a stop string, or a token id; EOS is a token id too, so what the request did
        # not list is the natural end of the sequence (the rule every engine transport shares).
        if stops.requested(request, matched):
            choice.finish_reason = response_pb2.FINISH_REASON_STOP_SEQUENCE
            stops.set_stop(choice, matched)
        else:
            choice.finish_reason = response_pb2.FINISH_REASON_STOP
    else:
        choice.finish_reason = response_pb2.FINISH_REASON_OTHER


def _usage(answers: list[dict[str, Any]], out: response_pb2.Response) -> None:
    metas = [a.get("meta_info") or {} for a in answers]
    if metas and metas[0].get("prompt_tokens") is not None:
        out.usage.input_token_count = metas[0]["prompt_tokens"]
    if any(m.get("completion_tokens") is not None for m in metas):
        out.usage.output_token_count = sum(m.get("completion_tokens") or 0 for m in metas)
    if metas and metas[0].get("cached_tokens") is not None:
        out.usage.cache_read_token_count = metas[0]["cached_tokens"]


class _GenerateStreamLifter(StreamLifter):
    """`data:` events carrying `text` (cumulative on older servers, incremental with
    --incremental-streaming-output) and `meta_info`; `[DONE]` ends it. Cumulative text is turned into deltas."""

    def __init__(self, transport: SGLang, request: request_pb2.Request) -> None:
        self.transport = transport
        self.request = request
        self.started = False
        self.texts: dict[int, str] = {}  # choice -> the text so far
        self.logprobs_so_far: dict[int, list[Any]] = {}  # choice -> the output logprob entries emitted so far
        self.metas: dict[int, dict[str, Any]] = {}
        self.id_counts: dict[int, int] = {}  # choice -> output ids seen so far
        self.trimmed: dict[int, list[int]] = {}  # choice -> its trimmed stop / EOS id
        self.cumulative: bool | None = None
        self.first_ids: dict[int, list[Any]] = {}  # choice -> its first event's output ids (see `feed`)
        self.done = False
        self.parts = StreamParts()

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        if event.data.strip() == b"[DONE]":
            self.done = True
            return []
        data = common.parse_json(event.data, "stream event")
        out: list[stream_pb2.StreamEvent] = []
        meta = data.get("meta_info") or {}
        index = data.get("index", 0)
        if not self.started:
            self.started = True
            out.append(
                stream_pb2.StreamEvent(
                    start=stream_pb2.StreamStart(id=meta.get("id") or "", model=self.transport.provider_model)
                )
            )
        text = data.get("text") or ""
        so_far = self.texts.get(index, "")
        ids = data.get("output_ids")
        if self.cumulative is None:
            # Decided once, on a choice's second event that says: cumulative servers resend everything so far.
            # The ids say it surely (an incremental token's text may begin with the one before: " a", " and").
            earlier = self.first_ids.get(index)
            if isinstance(ids, list) and ids and earlier:
                self.cumulative = ids[: len(earlier)] == earlier and len(ids) > len(earlier)
            elif so_far and text and not earlier:
                self.cumulative = text.startswith(so_far) and len(text) > len(so_far)
            if isinstance(ids, list) and ids:
                self.first_ids.setdefault(index, ids)
        piece = text[len(so_far) :] if self.cumulative else text
        self.texts[index] = so_far + piece
        event_out = self.parts.delta(index, "text", text=piece)
        delta = event_out.delta
        self._token_ids(index, ids, meta, delta)
        if self.request.HasField("logprob_options") and meta.get("output_token_logprobs") is not None:
            triples = meta["output_token_logprobs"]
            tops = meta.get("output_top_logprobs")
            emitted = self.logprobs_so_far.setdefault(index, [])
            # Older servers resend the whole list on every event (even with incremental text); current ones with
            # --incremental-streaming-output send only the event's positions (sglang slices the output logprob
            # lists to the chunk). A list that begins with every entry emitted so far is the whole list.
            seen = len(emitted) if emitted and triples[: len(emitted)] == emitted else 0
            new = triples[seen:]
            new_tops = tops[seen:] if tops is not None else None
            emitted.extend(new)
            if new:
                sglang_scores.columns(new, new_tops, self.request.logprob_options.top_logprob_count, delta.logprobs)
        out.append(event_out)
        self.metas[index] = meta
        return out

    def _token_ids(self, index: int, ids: Any, meta: dict[str, Any], delta: stream_pb2.PartDelta) -> None:
        """The event's new output ids on its delta; cumulative lists (older servers) give only their new tail."""
        if not isinstance(ids, list) or not ids:
            return
        seen = self.id_counts.get(index, 0)
        cumulative = self.cumulative if self.cumulative is not None else bool(seen) and len(ids) > seen
        new = ids[seen:] if cumulative else ids
        self.id_counts[index] = len(ids) if cumulative else seen + len(ids)
        if cut := _trimmed(self.request, meta, new):
            self.trimmed[index], new = new[-cut:], new[:-cut]
        delta.token_ids.extend(new)

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        end = stream_pb2.StreamEnd()
        for index in sorted(self.metas):
            choice = response_pb2.Choice()
            _finish(choice, self.metas[index].get("finish_reason"), self.request)
            finish = end.finishes.add(
                choice_index=index,
                finish_reason=choice.finish_reason,
                raw_finish_reason=choice.raw_finish_reason,
            )
            stops.copy_stop(choice, finish)
            tokens.finish_unattributed(finish, self.trimmed.get(index, ()))
            finish.constrained_label = tokens.constrained_label(self.request, self.texts.get(index, ""))
        settled = response_pb2.Response()
        _usage([{"meta_info": m} for _, m in sorted(self.metas.items())], settled)
        if settled.HasField("usage"):
            end.usage.CopyFrom(settled.usage)
        facts = soft_errors.Facts()
        if interrupted or not self.done:
            facts.cut_short = "the stream ended before [DONE]; the output is partial"
        soft_errors.settle_stream(self.request, end, facts, self.parts.texts())
        return [stream_pb2.StreamEvent(end=end)]
