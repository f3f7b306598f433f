"""`ArgumentError`, the error every request-building helper raises, and enum names read as values."""

from __future__ import annotations

from typing import Any

from modelir.errors import InvalidRequestError
from modelir.v1 import errors_pb2
from modelir.writing import names


class ArgumentError(InvalidRequestError, ValueError):
    """A request-building argument of the wrong kind. Names the field and what it expects."""

    def __init__(self, field: str, expected: str, got: Any = ...) -> None:
        description = f"expected {expected}" + ("" if got is ... else f"; got {_short_repr(got)}")
        super().__init__([errors_pb2.FieldViolation(field=field, description=description)])
        self.field = field


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
