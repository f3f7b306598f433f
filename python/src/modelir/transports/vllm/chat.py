"""vLLM's chat endpoint (`/v1/chat/completions`, for conversations): the OpenAI chat wire plus vLLM's extensions,
reasoning text, and one scored continuation after the conversation (`prompt_logprobs`, `continue_final_message`)."""

from __future__ import annotations

from typing import Any

from modelir.errors.soft import Facts
from modelir.pipeline import continuations
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.base import StreamLifter
from modelir.transports.openai import _typed as typed
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.vllm import dialect, prompt_scores
from modelir.transports.vllm.token_ids import TokenIdStream
from modelir.v1 import logprobs_pb2, request_pb2, response_pb2


class VLLMChat(OpenAIChat):
    name = "vllm"
    path = "/v1/chat/completions"
    returns_reasoning_text = True  # `include_reasoning`
    emulates_zero_output = False  # the transport decides what 0 means on this route (see its module)
    native_unclamp = True  # the native builder reads -9999.0 as -inf: no Python pass over the float columns

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        dialect.lower_extensions(request, body)
        dialect.lower_no_tokens(request, body)
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
        return dialect.finish(raw_reason, stop_reason)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return TokenIdStream(super().stream_lifter(request), request)

    def adjust_logprobs(self, logprobs: logprobs_pb2.TokenLogprobs) -> logprobs_pb2.TokenLogprobs:
        if logprobs.tokens and logprobs.tokens[0].startswith(dialect.TOKEN_ID_PREFIX):
            _chat_token_ids(logprobs)
        _unclamp_columns(logprobs)
        return logprobs

    def adjust_native_logprobs(self, logprobs: logprobs_pb2.TokenLogprobs) -> logprobs_pb2.TokenLogprobs:
        if logprobs.tokens and logprobs.tokens[0].startswith(dialect.TOKEN_ID_PREFIX):
            _chat_token_ids(logprobs)
        return logprobs  # the -9999.0 clamp already read as -inf (`native_unclamp`)

    def lift_extras(
        self, request: request_pb2.Request, body: typed.ChatCompletion, out: response_pb2.Response, facts: Facts
    ) -> None:
        if body.prompt_token_ids:
            out.prompt_token_ids.extend(body.prompt_token_ids)
        choices = {c.index: c for c in out.choices}
        for raw in body.choices or ():
            ids = raw.token_ids
            if ids and (choice := choices.get(raw.index)) is not None:
                tokens.fill(choice, ids, trimmed=dialect.trimmed(request, raw, ids))
        for choice in out.choices:
            stops.settle_natural_end(request, choice)
        dialect.drop_generated(request, out)
        tokens.label_choices(request, out)
        if request.HasField("input_scoring"):
            continuation = continuations.first_text(request)
            start = prompt_scores.continuation_start(body.prompt_logprobs, body.prompt_token_ids, continuation)
            scores = (
                prompt_scores.of_prompt_logprobs(
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


def _chat_token_ids(logprobs: logprobs_pb2.TokenLogprobs) -> None:
    """With `return_tokens_as_token_ids`, chat tokens are spelled `token_id:N`: fill the id columns."""
    ids = [i for t in logprobs.tokens if (i := dialect.token_id(t)) is not None]
    if ids and len(ids) == len(logprobs.tokens) and not logprobs.token_ids:
        logprobs.token_ids.extend(ids)
    top_ids = [i for t in logprobs.top_tokens if (i := dialect.token_id(t)) is not None]
    if top_ids and len(top_ids) == len(logprobs.top_tokens) and not logprobs.top_token_ids:
        logprobs.top_token_ids.extend(top_ids)


def _unclamp_columns(logprobs: logprobs_pb2.TokenLogprobs) -> None:
    # min() over the packed column runs in C; the Python rewrite happens only when a clamp is present.
    if logprobs.token_logprobs and min(logprobs.token_logprobs) <= common.VLLM_MINUS_INFINITY:
        values = [dialect.unclamp(v) for v in logprobs.token_logprobs]
        del logprobs.token_logprobs[:]
        logprobs.token_logprobs.extend(values)
    if logprobs.top_logprobs and min(logprobs.top_logprobs) <= common.VLLM_MINUS_INFINITY:
        values = [dialect.unclamp(v) for v in logprobs.top_logprobs]
        del logprobs.top_logprobs[:]
        logprobs.top_logprobs.extend(values)
