"""llama-server's chat wire (`/v1/chat/completions`, for conversations): the OpenAI chat dialect with the native
sampling fields, its pre-sampling logprobs trimmed to what was asked for, and a `stop` told apart into an end of
sequence or a stop string from the `__verbose` fields."""

from __future__ import annotations

from typing import Any

import msgspec

from modelir.errors.soft import Facts
from modelir.reading import stops
from modelir.transports import _engine_output as tokens
from modelir.transports import token_prompt
from modelir.transports.base import HttpResponse, RawEvent, StreamLifter
from modelir.transports.llamacpp.sampling import lower_sampling
from modelir.transports.openai import _typed as typed
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import errors_pb2, logprobs_pb2, request_pb2, response_pb2, stream_pb2


class LlamaCppChat(OpenAIChat):
    name = "llamacpp"
    path = "/v1/chat/completions"
    emulates_zero_output = False  # the transport decides what 0 means on this route (see its module)

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        body.pop("response_format", None)  # llama.cpp takes the schema itself, like the native endpoint
        lower_sampling(request, body)
        if request.sampling.logit_bias:  # the OpenAI object form, which the chat endpoint also takes
            body["logit_bias"] = {str(k): v for k, v in sorted(request.sampling.logit_bias.items())}
        if request.sampling.stop:
            # The chat answer says `stop` for an end of sequence and for a stop string alike; the native fields
            # that tell them apart come in `__verbose`, cut down to those two by `response_fields`.
            body["verbose"] = True
            body["response_fields"] = list(_VERBOSE_FIELDS)
        return body

    def lift_typed(
        self, request: request_pb2.Request, response: HttpResponse, body: typed.ChatCompletion
    ) -> response_pb2.Response:
        out = super().lift_typed(request, response, body)
        if out.choices and out.choices[0].HasField("logprobs"):
            choice = out.choices[0]
            _flag_unscored_tokens(out, choice.finish_reason, len(choice.logprobs.token_logprobs), out.usage)
        if request.sampling.stop and out.choices:
            if unknown := _chat_stop(out.choices[0], _verbose(response.body)):
                out.warnings.add(code="stop_sequence_unknown", message=unknown)
        if missing := prompt_ids_unavailable(request):
            out.warnings.add(code=PROMPT_IDS_UNAVAILABLE, message=missing)
        return out

    def lift_extras(
        self, request: request_pb2.Request, body: typed.ChatCompletion, out: response_pb2.Response, facts: Facts
    ) -> None:
        tokens.label_choices(request, out)
        for choice in out.choices:
            if choice.HasField("logprobs"):
                _chat_logprobs(request, choice.logprobs)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return _ChatStream(super().stream_lifter(request), request)


_VERBOSE_FIELDS = ("stop_type", "stopping_word")
PROMPT_IDS_UNAVAILABLE = "prompt_token_ids_unavailable"


def asks_for_token_ids(request: request_pb2.Request) -> bool:
    """Whether `request` is a conversation that asks for token ids (a rollout's turn: its prompt's and its sampled
    ones), which this route cannot give (see `LlamaCpp.runs_as_token_prompt`)."""
    return request.WhichOneof("input") == "conversation" and request.logprob_options.require_token_ids


def prompt_ids_unavailable(request: request_pb2.Request) -> str:
    """Why the answer to `request`, sent to this route, lacks the prompt's token ids that it asks for; "" when it
    does not ask. Only a conversation that cannot run as a token-id prompt is sent here asking for them."""
    if not asks_for_token_ids(request):
        return ""
    why = " ".join(token_prompt.cannot_carry(request)) or "It was lowered for this route, not as a token-id prompt."
    return (
        "llama-server's chat route does not report the prompt's token ids (Response.prompt_token_ids stays empty), "
        f"and this conversation cannot run as a token-id prompt, which would report them. {why}"
    )


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


def _flag_unscored_tokens(
    out: response_pb2.Response | stream_pb2.StreamEnd, finish: int, scored: int, usage: response_pb2.Usage
) -> None:
    """llama-server's chat logprobs have no entry for a token that ends inside a UTF-8 character (the completion
    route's `tokens` let that lift put NaN in its place; the chat answer has no ids to align to): when the limit
    ended the answer, every generated token should have one, so fewer entries are flagged, not passed on silently."""
    generated = usage.output_token_count
    if finish == response_pb2.FINISH_REASON_LENGTH and usage.HasField("output_token_count") and scored < generated:
        out.errors.add(
            reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
            choice_index=0,
            message=f"llama-server's chat answer has logprobs for {scored} of the {generated} tokens it generated "
            "(it sends none for a token that ends inside a UTF-8 character)",
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
        self.scored = 0  # logprob entries seen
        self.with_logprobs = False

    def feed(self, event: RawEvent) -> list[stream_pb2.StreamEvent]:
        out = self.inner.feed(event)
        if self.request.sampling.stop and b'"__verbose"' in event.data:  # on the first chunk of the final result
            self.verbose = _verbose(event.data) or self.verbose
        for item in out:
            if item.WhichOneof("event") == "delta" and item.delta.HasField("logprobs"):
                _chat_logprobs(self.request, item.delta.logprobs)
                self.scored += len(item.delta.logprobs.token_logprobs)
                self.with_logprobs = True
        return out

    def close(self, *, interrupted: bool = False) -> list[stream_pb2.StreamEvent]:
        out = super().close(interrupted=interrupted)
        for item in out:
            if self.with_logprobs and item.WhichOneof("event") == "end":
                reason = next((f.finish_reason for f in item.end.finishes if f.choice_index == 0), 0)
                _flag_unscored_tokens(item.end, reason, self.scored, item.end.usage)
        if self.request.sampling.stop:
            for item in out:
                if item.WhichOneof("event") != "end":
                    continue
                for finish in item.end.finishes:
                    if finish.choice_index == 0 and (unknown := _chat_stop(finish, self.verbose)):
                        item.end.warnings.add(code="stop_sequence_unknown", message=unknown)
        if missing := prompt_ids_unavailable(self.request):
            for item in out:
                if item.WhichOneof("event") == "end":
                    item.end.warnings.add(code=PROMPT_IDS_UNAVAILABLE, message=missing)
        return out
