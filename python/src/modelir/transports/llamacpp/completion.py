"""llama-server's raw-prompt wire (native `/completion`, for a prompt or token ids): the request body, and the
unary answer lifted, its logprobs aligned to the sampled ids and the entries a stop string dropped accounted for."""

from __future__ import annotations

import math
from typing import Any

import orjson

from modelir.errors import soft as soft_errors
from modelir.logprobs import build as lp
from modelir.reading import stops
from modelir.transports import _common as common
from modelir.transports import _engine_output as tokens
from modelir.transports.base import HttpRequest, HttpResponse
from modelir.transports.llamacpp.sampling import JSON_HEADERS, lower_sampling
from modelir.v1 import content_pb2, errors_pb2, logprobs_pb2, request_pb2, response_pb2

STOP_TYPES = {
    "eos": response_pb2.FINISH_REASON_STOP,
    "limit": response_pb2.FINISH_REASON_LENGTH,
    "word": response_pb2.FINISH_REASON_STOP_SEQUENCE,
}


def lower(request: request_pb2.Request, *, stream: bool, transport: str) -> HttpRequest:
    """The `/completion` request; `transport` names the provider options' entry."""
    prompt: Any = list(request.token_ids.ids) if request.WhichOneof("input") == "token_ids" else request.prompt
    body: dict[str, Any] = {"prompt": prompt, "return_tokens": True}
    if request.sampling.HasField("max_output_tokens"):
        body["n_predict"] = request.sampling.max_output_tokens
    lower_sampling(request, body)
    if request.sampling.logit_bias:  # the documented `[[token id, bias], ...]` form
        body["logit_bias"] = [[k, v] for k, v in sorted(request.sampling.logit_bias.items())]
    if request.HasField("logprob_options"):
        body["n_probs"] = max(request.logprob_options.top_logprob_count, 1)
        if request.logprob_options.basis == logprobs_pb2.LOGPROB_BASIS_POST_SAMPLING:
            body["post_sampling_probs"] = True
    if stream:
        body["stream"] = True
    body.update(common.provider_options(request, transport))
    return HttpRequest("POST", "/completion", orjson.dumps(body), JSON_HEADERS, "sse" if stream else None)


def lift(request: request_pb2.Request, response: HttpResponse) -> response_pb2.Response:
    body = common.parse_json(response.body, "response body")
    out = response_pb2.Response(model=body.get("model") or "")
    choice = out.choices.add(index=0)
    choice.message.role = content_pb2.ROLE_ASSISTANT
    choice.message.parts.add(text=body.get("content") or "")
    finish(choice, body)
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
            columns(probabilities, request.logprob_options.top_logprob_count, choice.logprobs)
    usage_and_timing(body, out)
    soft_errors.settle(request, out, facts)
    if request.HasField("logprob_options") and probabilities is not None and missing:
        out.errors.add(
            reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
            choice_index=0,
            message=_missing_message(missing, dropped),
        )
    return out


def finish(choice: response_pb2.Choice, body: dict[str, Any]) -> None:
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


def columns(entries: list[dict[str, Any]], top_k: int, out: logprobs_pb2.TokenLogprobs) -> None:
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


def usage_and_timing(body: dict[str, Any], out: response_pb2.Response) -> None:
    if body.get("tokens_evaluated") is not None:
        out.usage.input_token_count = body["tokens_evaluated"]
    if body.get("tokens_predicted") is not None:
        out.usage.output_token_count = body["tokens_predicted"]
    timings = body.get("timings") or {}
    if timings.get("prompt_ms") is not None:
        out.timing.provider_input_duration.FromNanoseconds(int(timings["prompt_ms"] * 1e6))
    if timings.get("predicted_ms") is not None:
        out.timing.provider_output_duration.FromNanoseconds(int(timings["predicted_ms"] * 1e6))
