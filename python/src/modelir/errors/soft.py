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
   JSON output is validated against its schema (jsonschema), regex output must match the whole regex; grammars
   are not re-checked. A choice cut short by its length limit is checked too: broken JSON is broken JSON, whatever
   the reason.

Errors that concern one choice (missing logprobs, a violated constraint) name it in `choice_index`.

The caller writes the pattern and, through the prompt, much of the output, and the check runs on the event loop:
so no check may cost more than linear time. Every regex (the regex constraint, and a JSON schema's `pattern` and
`patternProperties`) is matched by RE2 (`google-re2`), whose time is linear in the text. RE2's dialect is Perl's
without backreferences, lookahead or lookbehind, possessive quantifiers or atomic groups (`\\1`, `(?=`, `(?!`,
`(?<=`, `(?<!`, `a++`, `(?>`); its `\\b`, `\\d`, `\\s`, `\\w` are ASCII-only where Python's are Unicode. What RE2
cannot compile (those constructs, or a pattern past its memory bound) is not checked, and says so: a
`constraint_not_checked` warning. So is a schema whose keywords would need Python's backtracking `re`
(`unevaluatedProperties` beside `patternProperties`), and an output longer than `MAX_CHECKED_CHARS` (a JSON
schema's validation is not linear in general).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import re2

from modelir.http.redaction import redact_outcome
from modelir.v1 import errors_pb2, request_pb2, response_pb2, stream_pb2

_REFUSAL = response_pb2.FINISH_REASON_REFUSAL

# The longest output a constraint is checked against. Longer ones are not checked (with a warning): a JSON schema's
# validation runs in pure Python, and its cost grows with the output times the schema.
MAX_CHECKED_CHARS = 1_000_000
# RE2 refuses to compile a pattern whose automaton would need more than this (its default is 8 MiB).
_RE2_MAX_MEM = 8 << 20
NOT_CHECKED = "constraint_not_checked"

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


class Unchecked(Exception):
    """The constraint cannot be checked in linear time (or at all); the message says why."""


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = _RE2_MAX_MEM
    options.log_errors = False  # a refused pattern is reported as a warning, not logged to stderr by RE2
    return options


@functools.lru_cache(maxsize=256)
def _re2(pattern: str) -> Any:
    """`pattern` compiled by RE2 (linear-time matching); `Unchecked` when RE2's dialect or memory bound refuses it."""
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise Unchecked(f"the regex {pattern!r} is outside RE2's linear-time dialect ({reason})") from None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's `pattern` (an unanchored search), matched by RE2."""
    if validator.is_type(instance, "string") and _re2(pattern).search(instance) is None:
        yield _jsonschema().ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's `patternProperties`: every key a pattern finds is checked against its subschema (RE2)."""
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        compiled = _re2(pattern)
        for key, value in instance.items():
            if compiled.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """JSON Schema's `additionalProperties`: the keys neither `properties` nor a `patternProperties` pattern (RE2)
    covers must satisfy it."""
    if not validator.is_type(instance, "object"):
        return
    named = schema.get("properties", {})
    patterns = [_re2(p) for p in schema.get("patternProperties", {})]
    extras = [k for k in instance if k not in named and not any(p.search(k) is not None for p in patterns)]
    if validator.is_type(additional, "object"):
        for key in extras:
            yield from validator.descend(instance[key], additional, path=key)
    elif additional is False and extras:
        listed = ", ".join(repr(k) for k in sorted(extras))
        yield _jsonschema().ValidationError(f"additional properties are not allowed ({listed} unexpected)")


def _jsonschema() -> Any:
    import jsonschema  # a dependency of the SDK, imported on the first schema check only

    return jsonschema


_RE2_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


def _keywords(schema: Any) -> set[str]:
    """Every keyword used anywhere in `schema` (object keys at any depth)."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.update(k for k in node if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    """A JSON Schema validator for the request's schema (compiled once per schema) whose regex keywords match with
    RE2; None when the schema itself is not one this checker can read (the engine enforced it; an unreadable schema
    is not the output's fault); `Unchecked` when checking it would need a backtracking regex."""
    jsonschema = _jsonschema()
    try:
        schema = orjson.loads(schema_json)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except (orjson.JSONDecodeError, jsonschema.SchemaError, TypeError):
        return None
    except RecursionError:  # a pattern with groups nested past what Python's `re` compiles, in the schema check
        return Unchecked("the schema holds a regex nested deeper than its validator reads")
    used = _keywords(schema)
    if "patternProperties" in used and "unevaluatedProperties" in used:  # kept (not raised): the cache keeps it
        return Unchecked("the schema's unevaluatedProperties beside patternProperties needs a backtracking regex")
    keywords = {k: v for k, v in _RE2_KEYWORDS.items() if k in cls.VALIDATORS}
    return jsonschema.validators.extend(cls, keywords)(schema)


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
        if isinstance(validator, Unchecked):
            raise validator
        if validator is not None and (error := next(iter(validator.iter_errors(value)), None)) is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the root)"
            rule = "/".join(str(p) for p in error.absolute_schema_path)
            return _violated(
                index, f"the output breaks the requested schema at {where}: {error.message} (schema rule {rule})"
            )
    elif kind == "regex":
        if _re2(request.constraint.regex).fullmatch(text) is None:
            return _violated(index, f"the output does not match the requested regex {request.constraint.regex!r}")
    elif kind == "choice" and text not in request.constraint.choice.labels:
        return _violated(index, "the reply is not one of the labels")
    return None


def soft_errors(
    request: request_pb2.Request,
    facts: Facts,
    outcomes: Iterable[tuple[int, int, str]],
    warnings: list[errors_pb2.Warning] | None = None,
) -> list[errors_pb2.ResponseError]:
    """Every soft error of a response, in precedence order. `outcomes` are (choice index, finish reason, text).
    A choice whose constraint could not be checked is a `constraint_not_checked` warning in `warnings`."""
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
            if finish == _REFUSAL:
                continue
            try:
                violation = _checked(request, index, text)
            except Unchecked as exc:
                if warnings is not None:
                    warnings.append(
                        errors_pb2.Warning(code=NOT_CHECKED, message=f"choice {index} was not checked: {exc}")
                    )
                continue
            if violation is not None:
                out.append(violation)
    return out


def _checked(request: request_pb2.Request, index: int, text: str) -> errors_pb2.ResponseError | None:
    """`_constraint_violation` within its bounds: an output too long to check, or too deep for the validator to
    walk, is `Unchecked` rather than checked at any cost."""
    if len(text) > MAX_CHECKED_CHARS and request.constraint.WhichOneof("kind") != "choice":
        raise Unchecked(f"the output is longer than the {MAX_CHECKED_CHARS:,} characters a constraint is checked on")
    try:
        return _constraint_violation(request, index, text)
    except RecursionError:
        raise Unchecked("the output nests deeper than the schema validator walks") from None


def add_malformed(found: Any, message: str) -> None:
    """Add a `MALFORMED_RESPONSE` soft error to `found` (a response's or a stream end's `errors`) in its place in the
    precedence: after the provider's own errors, before the rest. For damage found outside the lift (bytes that were
    not UTF-8, `transports.base.utf8_repaired`)."""
    at = 0
    while at < len(found) and found[at].reason == errors_pb2.ERROR_REASON_PROVIDER_UNAVAILABLE:
        at += 1
    found.insert(at, errors_pb2.ResponseError(reason=errors_pb2.ERROR_REASON_MALFORMED_RESPONSE, message=message))


def damaged_events(count: int) -> str:
    """What `count` stream events with bytes that were not UTF-8 mean ("" for none)."""
    if not count:
        return ""
    return (
        f"{count} stream event(s) carried bytes that are not valid UTF-8 (replaced with U+FFFD); "
        "their output may be incomplete"
    )


def received(outcome: Any, damage: str, secrets: tuple[str, ...]) -> None:
    """What `Model` adds to a lift's response or stream end: `damage` found before the lift (bytes that were not
    UTF-8) as a `MALFORMED_RESPONSE` soft error, then the one redaction pass (a provider's error inside a 200 answer
    or a stream can quote the key), so that every surface downstream sees redacted text only."""
    if damage:
        add_malformed(outcome.errors, damage)
    redact_outcome(outcome, secrets)


def text_of(choice: response_pb2.Choice) -> str:
    return "".join(p.text for p in choice.message.parts if p.WhichOneof("content") == "text")


def settle(request: request_pb2.Request, response: response_pb2.Response, facts: Facts) -> None:
    """Set the soft errors of a complete unary response from the lift's facts."""
    constrained = request.constraint.WhichOneof("kind") is not None
    # A choice's label stands for its text where the wire text is the label wrapped (Ollama's JSON-quoted enum).
    outcomes = (
        [(c.index, c.finish_reason, c.constrained_label or text_of(c)) for c in response.choices] if constrained else []
    )
    found: list[errors_pb2.Warning] = []
    if soft := soft_errors(request, facts, outcomes, found):  # (an empty `extend` still looks the field up)
        response.errors.extend(soft)
    if found:
        response.warnings.extend(found)


def settle_stream(
    request: request_pb2.Request, end: stream_pb2.StreamEnd, facts: Facts, texts: Mapping[int, str]
) -> None:
    """Set the soft errors of a stream's end from the lifter's facts and each choice's streamed text."""
    outcomes = [
        (f.choice_index, f.finish_reason, f.constrained_label or texts.get(f.choice_index, "")) for f in end.finishes
    ]
    found: list[errors_pb2.Warning] = []
    end.errors.extend(soft_errors(request, facts, outcomes, found))
    end.warnings.extend(found)
