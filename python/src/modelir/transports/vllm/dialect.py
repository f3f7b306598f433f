"""vLLM's extensions of the OpenAI wires, shared by its completions and chat endpoints: the extra body fields, tokens
spelled `token_id:N`, the -9999.0 clamp of minus infinity, `stop_reason`, and which trailing sampled ids it trimmed."""

from __future__ import annotations

import math
from typing import Any

import orjson

from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.openai import _wire as wire
from modelir.v1 import errors_pb2, request_pb2, response_pb2

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
TOKEN_ID_PREFIX = "token_id:"


def token_id(token: str) -> int | None:
    if token.startswith(TOKEN_ID_PREFIX):
        try:
            return int(token[len(TOKEN_ID_PREFIX) :])
        except ValueError:
            return None
    return None


def unclamp(value: float | None) -> float:
    """vLLM clamps -inf to -9999.0 (`max(logprob, -9999.0)`); the IR stores -inf."""
    if value is None:
        return float("nan")
    return -math.inf if value <= common.VLLM_MINUS_INFINITY else float(value)


def lower_extensions(request: request_pb2.Request, body: dict[str, Any]) -> None:
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


def asks_for_no_tokens(request: request_pb2.Request) -> bool:
    return request.sampling.HasField("max_output_tokens") and request.sampling.max_output_tokens == 0


def lower_no_tokens(request: request_pb2.Request, body: dict[str, Any]) -> None:
    """`max_output_tokens = 0` (score or tokenize without generating): vLLM 0.32 refuses `max_tokens: 0` on chat
    (a 400) and generates one token anyway on completions, so both ask for one and the lift drops it
    (`drop_generated`)."""
    if asks_for_no_tokens(request):
        for key in ("max_tokens", "max_completion_tokens"):
            if key in body:
                body[key] = 1


def drop_generated(request: request_pb2.Request, out: response_pb2.Response) -> None:
    """The token generated for a request of none: its text, ids and logprobs dropped, and said so (an answer that
    generated nothing has nothing to drop)."""
    if not asks_for_no_tokens(request):
        return
    dropped = False
    for choice in out.choices:
        for part in choice.message.parts:
            if part.WhichOneof("content") == "text" and part.text:
                part.text, dropped = "", True
        if choice.HasField("sampled_tokens") or choice.HasField("logprobs"):
            dropped = True
        choice.ClearField("sampled_tokens")
        choice.ClearField("logprobs")
        choice.finish_reason = response_pb2.FINISH_REASON_LENGTH
        choice.ClearField("stop")
    if dropped or out.usage.output_token_count:
        out.warnings.add(
            code="generated_token_dropped",
            message="vLLM generates at least one token: one was generated for max_output_tokens 0 and dropped",
        )


def trimmed(request: request_pb2.Request, raw: Any, token_ids: list[int]) -> int:
    """How many of a choice's trailing ids had their text trimmed: the stop token id or the EOS (`stop_reason`
    null) that ended it, which vLLM's detokenizer skips unless `include_stop_str_in_output`."""
    if not token_ids or member(raw, "finish_reason") != "stop":
        return 0
    if common.provider_options(request, "vllm").get("include_stop_str_in_output"):
        return 0
    stop = member(raw, "stop_reason")
    if stop is None:
        return 1
    return tokens.trailing_stop(token_ids, stop)


def member(raw: Any, key: str) -> Any:
    return raw.get(key) if isinstance(raw, dict) else getattr(raw, key, None)


def finish(raw_reason: str | None, stop: Any) -> tuple[response_pb2.FinishReason.ValueType, str, stops.Stop]:
    """`stop_reason` names the stop string (a JSON string) or the stop token id (an integer) that ended a choice
    (null for EOS)."""
    if stop is not None and raw_reason == "stop" and isinstance(stop, str | int):
        return response_pb2.FINISH_REASON_STOP_SEQUENCE, raw_reason, stop
    return wire.finish_reason(raw_reason), raw_reason or "", None


TRUNCATION_WARNING = "input_truncation_allowed"  # the code Ollama's `truncate: true` warning has too


def truncation_warnings(request: request_pb2.Request, usage: response_pb2.Usage) -> list[errors_pb2.Warning]:
    """vLLM keeps only the last `truncate_prompt_tokens` prompt tokens when the caller allows it (a provider option),
    and its answer does not say whether it cut: when the prompt it read is that long, the caller is told it may have
    been cut."""
    keep = common.provider_options(request, "vllm").get("truncate_prompt_tokens")
    if not isinstance(keep, int) or keep < 0 or usage.input_token_count < keep:
        return []
    return [
        errors_pb2.Warning(
            code=TRUNCATION_WARNING,
            message=f"vLLM may have cut the prompt to its last {keep} tokens (truncate_prompt_tokens) without saying "
            f"so; it read {usage.input_token_count} prompt tokens",
        )
    ]
