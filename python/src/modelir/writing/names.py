"""Enum values by their short lowercase names, both ways: `"high"` <-> `REASONING_EFFORT_HIGH`.

Every IR enum prefixes its values with the enum's name in UPPER_SNAKE (spec rule 2), so the short name is the value
name without that prefix, lowercased. `_UNSPECIFIED` has no short name: it means "not set" and is never accepted.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@cache
def _table(enum: Any) -> tuple[dict[str, int], dict[int, str]]:
    prefix = _CAMEL.sub("_", enum.DESCRIPTOR.name).upper() + "_"
    by_name = {
        value.name.removeprefix(prefix).lower(): value.number for value in enum.DESCRIPTOR.values if value.number != 0
    }
    return by_name, {number: name for name, number in by_name.items()}


def short_names(enum: Any) -> list[str]:
    """The accepted short names of `enum`, in declaration order."""
    return list(_table(enum)[0])


def enum_value(enum: Any, value: Any, *, field: str) -> int:
    """The number of `value` (a short name like `"high"`, a full name, or a number of `enum`).

    Anything else raises `ValueError` naming `field` and every accepted name.
    """
    by_name, by_number = _table(enum)
    if isinstance(value, bool):  # bool is an int: True would silently mean the first value
        pass
    elif isinstance(value, int) and value in by_number:
        return value
    elif isinstance(value, str):
        key = value.strip().lower()
        full = _CAMEL.sub("_", enum.DESCRIPTOR.name).lower() + "_"
        key = key.removeprefix(full)
        if key in by_name:
            return by_name[key]
    raise ValueError(f"{field}: expected one of {', '.join(map(repr, by_name))}; got {value!r}")


def enum_name(enum: Any, number: int) -> str:
    """The short name of `number` (`"stop"` for `FINISH_REASON_STOP`); `"unspecified"` for 0 and an unknown
    value's number as text, since receivers must tolerate values newer than their schema."""
    if number == 0:
        return "unspecified"
    return _table(enum)[1].get(number, str(number))
