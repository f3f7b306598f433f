"""vLLM's completions endpoint (`/v1/completions`, for raw prompts and token ids): the OpenAI completions wire plus
vLLM's extensions, several scored continuations as a list of prompts, and `prompt_logprobs` read as input scores."""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from modelir.pipeline import continuations
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.base import HttpResponse, StreamLifter
from modelir.transports.openai.completions import OpenAICompletions
from modelir.transports.vllm import dialect, prompt_scores
from modelir.transports.vllm.token_ids import TokenIdStream
from modelir.v1 import errors_pb2, request_pb2, response_pb2


class VLLMCompletions(OpenAICompletions):
    name = "vllm"
    path = "/v1/completions"
    native_dialect: ClassVar[dict[str, bool]] = {"unclamp": True, "token_ids": True}
    echo_text_may_omit_prompt = True  # 0.32 leaves the echoed prompt out of `text` under `return_token_ids`

    def body(self, request: request_pb2.Request, *, stream: bool) -> dict[str, Any]:
        body = super().body(request, stream=stream)
        dialect.lower_extensions(request, body)
        dialect.lower_no_tokens(request, body)
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
        raws = sorted(common.array(body, "choices"), key=lambda c: c.get("index", 0))
        first = _with_continuations(request, spans[:1])
        single = HttpResponse(response.status, response.headers, orjson.dumps({**body, "choices": raws[:1]}))
        out = super().lift(first, single)
        del out.prompt_token_ids[:]  # each prompt has its own ids; no one list is "the input's"
        for span, raw in zip(spans[1:], raws[1:], strict=False):
            prompt_ids = raw.get("prompt_token_ids")
            count = len(prompt_ids) if isinstance(prompt_ids, list) else None
            text, logprobs = raw.get("text") or "", raw.get("logprobs")
            generated = raw.get("token_ids")
            self._split_echo(
                _with_continuations(request, [span]), out, text, logprobs, count,
                len(generated) if isinstance(generated, list) else None,
            )  # fmt: skip
        if len(out.input_scores) < len(spans) and not out.errors:
            out.errors.add(
                reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
                message=f"input scores were requested but vLLM scored {len(out.input_scores)} of {len(spans)} "
                "continuations",
            )
        return out

    def token_id(self, token: str) -> int | None:
        return dialect.token_id(token)

    def logprob_values(self, values: list[float | None]) -> list[float | None]:
        try:  # min() runs in C; the per-value rewrite happens only when a clamp or a None is present
            rewrite = bool(values) and min(values) <= common.VLLM_MINUS_INFINITY  # type: ignore[type-var,operator]
        except TypeError:  # a None: a position without a logprob
            rewrite = True
        return [dialect.unclamp(v) for v in values] if rewrite else values

    def spells_token_ids(self, tokens: list[str]) -> bool:
        return (
            bool(tokens)
            and tokens[0].startswith(dialect.TOKEN_ID_PREFIX)
            and all(dialect.token_id(t) is not None for t in tokens)
        )

    def finish(
        self, raw_reason: str | None, stop_reason: Any = None
    ) -> tuple[response_pb2.FinishReason.ValueType, str, stops.Stop]:
        return dialect.finish(raw_reason, stop_reason)

    def lift_extras(self, request: request_pb2.Request, body: dict[str, Any], out: response_pb2.Response) -> None:
        raws = common.array(body, "choices")
        if request.HasField("input_scoring") and not out.input_scores and raws and not continuations.of(request):
            # A server that answers with `prompt_logprobs` (and `prompt_token_ids`) instead of echoed logprobs: the
            # same scores as the chat route's.
            first = raws[0]
            scores = prompt_scores.of_prompt_logprobs(
                first.get("prompt_logprobs"), first.get("prompt_token_ids"), request.input_scoring.top_logprob_count
            )
            if scores is not None:
                scores.span_byte_count, scores.span_char_count = len(request.prompt.encode()), len(request.prompt)
                scores.span_start_byte = max(0, scores.span_byte_count - scores.scored_byte_count)
                out.input_scores.append(scores)
        choices = {c.index: c for c in out.choices}
        for raw in common.array(body, "choices"):
            if raw.get("prompt_token_ids") and not out.prompt_token_ids:
                out.prompt_token_ids.extend(raw["prompt_token_ids"])
            ids = raw.get("token_ids")
            if ids and (choice := choices.get(raw.get("index", 0))) is not None:
                tokens.fill(choice, ids, trimmed=dialect.trimmed(request, raw, ids))
        for choice in out.choices:
            stops.settle_natural_end(request, choice)
        dialect.drop_generated(request, out)
        tokens.label_choices(request, out)

    def stream_lifter(self, request: request_pb2.Request) -> StreamLifter:
        return TokenIdStream(super().stream_lifter(request), request)


def _with_continuations(request: request_pb2.Request, spans: list[request_pb2.Continuation]) -> request_pb2.Request:
    single = request_pb2.Request()
    single.CopyFrom(request)
    del single.input_scoring.continuations[:]
    single.input_scoring.continuations.extend(spans)
    return single
