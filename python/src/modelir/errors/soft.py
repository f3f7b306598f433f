"""The one soft-error policy: the facts a lift reports about a response become its `errors`, in one precedence.

A soft error keeps the partial output and says what is wrong with it. Lifts only report facts (`Facts`); this
module decides. Every applicable one is reported, first to last, in `Response.errors`:

1. `provider_error`: the provider said the response failed (in the body, or as a mid-stream error event);
2. `malformed`: part of the output arrived broken (a streamed tool input that is not JSON);
3. `cut_short`: the stream ended before the provider's end marker, so the output is partial;
4. `missing_input_scores`: input scores were requested and none usable came back;
5. `missing_logprobs`: logprobs were requested and a choice came without them (lowest choice index first);
6. constraint violated: a choice that was not refused breaks the request's constraint (lowest index first): under
   a JSON-schema constraint its text is not JSON, under a JSON-object constraint it is not a JSON object, under a
   choice constraint it is not exactly one of the labels.
   JSON output is validated against its schema (jsonschema), regex output must match the whole regex (Python's
   dialect; a regex it cannot compile is left to the engine that enforced it); grammars are not re-checked. A
   choice cut short by its length limit is checked too: broken JSON is broken JSON, whatever the reason.

Errors that concern one choice (missing logprobs, a violated constraint) name it in `choice_index`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from modelir.v1 import errors_pb2, request_pb2, response_pb2, stream_pb2

_REFUSAL = response_pb2.FINISH_REASON_REFUSAL

# The reasons this policy can put in `Response.errors` (soft: the output is kept). Every reason can also be hard
# (raised, no response). The error table in `proto/README.md` says the same; `tests/test_error_table.py` checks it.
SOFT_REASONS = frozenset(
    {
        # A provider error inside a 200 answer or a stream, typed by its code as under an HTTP status.
        errors_pb2.ERROR_REASON_PROVIDER_AUTH,
        errors_pb2.ERROR_REASON_RATE_LIMITED,
        errors_pb2.ERROR_REASON_PROVIDER_REJECTED,
        errors_pb2.ERROR_REASON_PROVIDER_UNAVAILABLE,
        errors_pb2.ERROR_REASON_MALFORMED_RESPONSE,
        errors_pb2.ERROR_REASON_TRUNCATED_STREAM,
        errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
        errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED,
    }
)


@dataclass(slots=True)
class Facts:
    """What a lift observed that may make the response partial or wrong. Empty: nothing to report."""

    provider_error: errors_pb2.ResponseError | None = None
    malformed: str = ""  # what arrived broken
    cut_short: str = ""  # how the stream ended early
    missing_input_scores: str = ""  # what came back instead of usable input scores
    missing_logprobs: list[int] = field(default_factory=list)  # choices without the requested logprobs

    def lack_logprobs(self, choice_index: int) -> None:
        self.missing_logprobs.append(choice_index)


def provider_error(message: str, provider_code: object = "", *, retryable: bool = False) -> errors_pb2.ResponseError:
    """The error a provider reported inside a 200 answer or a stream."""
    return errors_pb2.ResponseError(
        reason=errors_pb2.ERROR_REASON_PROVIDER_UNAVAILABLE,
        message=message,
        provider_code=str(provider_code or ""),
        retryable=retryable,
    )


def _violated(index: int, message: str) -> errors_pb2.ResponseError:
    return errors_pb2.ResponseError(
        reason=errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED, message=message, choice_index=index
    )


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    """A JSON Schema validator for the request's schema (compiled once per schema), or None when the schema itself
    is not one this checker can read (the engine enforced it; an unreadable schema is not the output's fault)."""
    import jsonschema  # a dependency of the SDK, imported on the first schema check only

    try:
        schema = orjson.loads(schema_json)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        return cls(schema)
    except (orjson.JSONDecodeError, jsonschema.SchemaError, TypeError):
        return None


@functools.lru_cache(maxsize=64)
def _pattern(regex: str) -> re.Pattern[str] | None:
    """The request's regex, anchored at both ends as the spec says; None when Python's dialect cannot compile it
    (the engine's dialect differs: it enforced the regex, and this check cannot judge it)."""
    try:
        return re.compile(regex)
    except (re.error, RecursionError):
        return None


def _constraint_violation(request: request_pb2.Request, index: int, text: str) -> errors_pb2.ResponseError | None:
    """The rule the output breaks, checked for real: JSON against its schema, a regex against the whole output,
    a choice against the labels, an object constraint for an object."""
    kind = request.constraint.WhichOneof("kind")
    if kind in ("json_schema", "json_object"):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            wanted = "schema" if kind == "json_schema" else "JSON-object constraint"
            return _violated(index, f"the output is not valid JSON under the requested {wanted}: {exc}")
        if kind == "json_object":
            return None if isinstance(value, dict) else _violated(index, "the output is JSON, but not an object")
        validator = _validator(request.constraint.json_schema.schema_json)
        if validator is not None and (error := next(iter(validator.iter_errors(value)), None)) is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the root)"
            rule = "/".join(str(p) for p in error.absolute_schema_path)
            return _violated(
                index, f"the output breaks the requested schema at {where}: {error.message} (schema rule {rule})"
            )
    elif kind == "regex":
        pattern = _pattern(request.constraint.regex)
        if pattern is not None and pattern.fullmatch(text) is None:
            return _violated(index, f"the output does not match the requested regex {request.constraint.regex!r}")
    elif kind == "choice" and text not in request.constraint.choice.labels:
        return _violated(index, "the reply is not one of the labels")
    return None


def soft_errors(
    request: request_pb2.Request, facts: Facts, outcomes: Iterable[tuple[int, int, str]]
) -> list[errors_pb2.ResponseError]:
    """Every soft error of a response, in precedence order. `outcomes` are (choice index, finish reason, text)."""
    out = []
    if facts.provider_error is not None:
        out.append(facts.provider_error)
    if facts.malformed:
        out.append(errors_pb2.ResponseError(reason=errors_pb2.ERROR_REASON_MALFORMED_RESPONSE, message=facts.malformed))
    if facts.cut_short:
        out.append(
            errors_pb2.ResponseError(
                reason=errors_pb2.ERROR_REASON_TRUNCATED_STREAM, message=facts.cut_short, retryable=True
            )
        )
    if facts.missing_input_scores and request.HasField("input_scoring"):
        out.append(
            errors_pb2.ResponseError(
                reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
                message=f"input scores were requested but {facts.missing_input_scores}",
            )
        )
    if request.HasField("logprob_options"):
        for index in sorted(set(facts.missing_logprobs)):
            out.append(
                errors_pb2.ResponseError(
                    reason=errors_pb2.ERROR_REASON_MISSING_LOGPROBS,
                    message=f"logprobs were requested but the provider returned none for choice {index}",
                    choice_index=index,
                )
            )
    if request.constraint.WhichOneof("kind") is not None:
        for index, finish, text in sorted(outcomes):
            if finish != _REFUSAL and (violation := _constraint_violation(request, index, text)):
                out.append(violation)
    return out


def text_of(choice: response_pb2.Choice) -> str:
    return "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")


def settle(request: request_pb2.Request, response: response_pb2.Response, facts: Facts) -> None:
    """Set the soft errors of a complete unary response from the lift's facts."""
    constrained = request.constraint.WhichOneof("kind") is not None
    # A choice's label stands for its text where the wire text is the label wrapped (Ollama's JSON-quoted enum).
    outcomes = (
        [(c.index, c.finish_reason, c.constrained_label or text_of(c)) for c in response.choices] if constrained else []
    )
    response.errors.extend(soft_errors(request, facts, outcomes))


def settle_stream(
    request: request_pb2.Request, end: stream_pb2.StreamEnd, facts: Facts, texts: Mapping[int, str]
) -> None:
    """Set the soft errors of a stream's end from the lifter's facts and each choice's streamed text."""
    outcomes = [
        (f.choice_index, f.finish_reason, f.constrained_label or texts.get(f.choice_index, "")) for f in end.finishes
    ]
    end.errors.extend(soft_errors(request, facts, outcomes))
