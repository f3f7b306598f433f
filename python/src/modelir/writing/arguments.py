"""`ArgumentError`, the error every request-building helper raises, with the nearest right spelling; enum names read
as values."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from modelir.errors import InvalidRequestError
from modelir.v1 import errors_pb2, request_pb2
from modelir.writing import names

# Keywords other SDKs spell differently, mapped to ours: a near-miss by letters (`temprature`) is found by difflib,
# but `max_tokens` is not a typo of `max_output_tokens`, it is OpenAI's name for it.
_OTHER_SDKS_SPELLINGS = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "max_new_tokens": "max_output_tokens",
    "num_predict": "max_output_tokens",
    "max_length": "max_output_tokens",
    "stop_sequences": "stop",
    "system_prompt": "system",
    "instructions": "system",
    "response_format": "json_schema (or json_object)",
    "reasoning_effort": "reasoning",
    "thinking": "reasoning",
    "num_choices": "n",
    "candidate_count": "n",
    "top_logprob_count": "top_logprobs",
    "functions": "tools",
}


class ArgumentError(InvalidRequestError, ValueError):
    """A request-building argument of the wrong kind. Names the field, what it expects and what it got; `hint`
    adds the nearest right spelling."""

    def __init__(self, field: str, expected: str, got: Any = ..., *, hint: str = "") -> None:
        description = f"expected {expected}" + ("" if got is ... else f"; got {_short_repr(got)}")
        description += f"; {hint}" if hint else ""
        super().__init__([errors_pb2.FieldViolation(field=field, description=description)])
        self.field = field


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known keyword `name` most likely meant: another SDK's name for it, or the closest spelling."""
    known = list(known)
    if name in _OTHER_SDKS_SPELLINGS:
        return _OTHER_SDKS_SPELLINGS[name]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return close[0] if close else None


def unknown_keyword(name: str, known: Iterable[str], where: str) -> ArgumentError:
    """The error for a keyword `where` does not take, suggesting the nearest one."""
    guess = nearest(name, known)
    hint = f"did you mean {guess}=?" if guess else f"the keywords are listed in help({where})"
    return ArgumentError(name, f"a keyword {where} takes", hint=hint)


def require_request(value: Any, method: str) -> request_pb2.Request:
    """`value` when it is a `Request`; else the error that says how to build one (`model.stream("Hello")` is
    ambiguous between a raw prompt and a user message, so it is refused rather than guessed)."""
    if isinstance(value, request_pb2.Request):
        return value
    if isinstance(value, str):
        hint = (
            f'build one: {method}(modelir.build_request(model.name, messages="...")) for a user message, or '
            'prompt="..." for a raw prompt; model.chat("...") and model.generate("...") run one directly'
        )
    else:
        hint = "build one with modelir.build_request(model.name, messages=[...], ...)"
    raise ArgumentError("request", f"a modelir Request for {method}()", value, hint=hint)


def enum_value(enum: Any, value: Any, *, field: str) -> Any:
    """`names.enum_value`, raising `ArgumentError`: `enum_value(Role, "user", field="role")`.

    Typed `Any`: the number is a value of `enum`, which the generated stubs type as `enum.ValueType`.
    """
    try:
        return names.enum_value(enum, value, field=field)
    except ValueError as exc:
        raise ArgumentError(field, str(exc).split("expected ", 1)[1].split("; got")[0], value) from None


def _short_repr(value: Any) -> str:
    text = repr(value)
    return (text[:60] + "...") if len(text) > 63 else text + f" ({type(value).__name__})"
