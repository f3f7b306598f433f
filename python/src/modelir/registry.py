"""The transport registry: every transport by name, with the option schema its constructor declares.

A transport's options are its constructor's keyword arguments with their annotations and defaults, read with
`inspect.signature`: a transport that adds an option (say Anthropic's `default_max_tokens`) is configurable from
the configuration file, the conformance fixtures' `transport_options` and `build_transport` at once, with no
table to keep in step. Options are checked against the schema: an unknown or mistyped one is rejected, naming the
key, before the transport is built.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from modelir import transports
from modelir.transports.base import Transport

# The value types an option may have: what a YAML or JSON document can spell.
_SCALARS: dict[type, str] = {
    str: "a string",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    bytes: "a string or YAML !!binary",
}


class TransportOptionError(ValueError):
    """An option a transport does not take, or a value of the wrong type. `key` names the option."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class TransportOption:
    """One constructor keyword: its name, the types it accepts, and its default (`inspect.Parameter.empty` if
    the option is required)."""

    name: str
    types: tuple[type, ...]
    optional: bool  # None is accepted
    default: Any

    @property
    def required(self) -> bool:
        return self.default is inspect.Parameter.empty

    def describe(self) -> str:
        spelled = " or ".join(_SCALARS[t] for t in self.types) + (" or null" if self.optional else "")
        return spelled if self.required else f"{spelled} (default {self.default!r})"

    def coerce(self, value: Any) -> Any:
        """`value` as the constructor expects it; raises `TransportOptionError` when its type is wrong."""
        if value is None and self.optional:
            return None
        for kind in self.types:
            if kind is bytes and isinstance(value, str):
                return value.encode()
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                return float(value)
            # bool is an int in Python, never in a configuration file.
            if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
                return value
        # The value itself is not repeated: an option may hold a secret.
        raise TransportOptionError(self.name, f"expected {self.describe()}, got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class TransportEntry:
    """A registered transport: its name, its class and the options its constructor takes."""

    name: str
    cls: type[Transport]
    options: Mapping[str, TransportOption]

    def build(self, options: Mapping[str, Any], base: Path | None = None) -> Transport:
        """Construct the transport from `options`; unknown, missing or mistyped options raise, naming the key, and
        so does an option the constructor refuses (a `ValueError`, naming its `option` when it has one). A relative
        path in one of the transport's `path_options` is taken from `base` (the configuration file's directory)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            known = ", ".join(sorted(self.options)) or "none"
            raise TransportOptionError(unknown[0], f"transport {self.name!r} takes no such option; it takes: {known}")
        missing = sorted(n for n, o in self.options.items() if o.required and n not in options)
        if missing:
            raise TransportOptionError(missing[0], f"transport {self.name!r} requires this option")
        values = {key: self.options[key].coerce(value) for key, value in options.items()}
        for key in self.cls.path_options:
            if base is not None and isinstance(values.get(key), str):
                values[key] = str(base / values[key])  # an absolute path stays as it is
        try:
            return self.cls(**values)
        except ValueError as exc:
            raise TransportOptionError(getattr(exc, "option", "options"), str(exc)) from exc


def _option(cls: type, parameter: inspect.Parameter) -> TransportOption:
    annotation = parameter.annotation
    where = f"{cls.__name__}({parameter.name})"
    if annotation is inspect.Parameter.empty:
        raise TypeError(f"{where}: a transport option needs a type annotation")
    is_union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
    members = typing.get_args(annotation) if is_union else (annotation,)
    optional = type(None) in members
    kinds = tuple(m for m in members if m is not type(None))
    if not kinds or any(k not in _SCALARS for k in kinds):
        raise TypeError(f"{where}: option type {annotation!r} is not one of {', '.join(t.__name__ for t in _SCALARS)}")
    return TransportOption(parameter.name, kinds, optional, parameter.default)


def schema_of(cls: type[Transport]) -> dict[str, TransportOption]:
    """The options `cls` takes: its constructor's keyword arguments, in declaration order."""
    parameters = inspect.signature(cls, eval_str=True).parameters.values()
    return {
        p.name: _option(cls, p)
        for p in parameters
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }


@cache
def registry() -> dict[str, TransportEntry]:
    """Every concrete transport `modelir.transports` exports, by its `name`."""
    entries: dict[str, TransportEntry] = {}
    for value in vars(transports).values():
        if isinstance(value, type) and issubclass(value, Transport) and not inspect.isabstract(value):
            if value.name in entries:
                raise TypeError(f"two transports are named {value.name!r}")
            entries[value.name] = TransportEntry(value.name, value, schema_of(value))
    return dict(sorted(entries.items()))


def transport_entry(name: str) -> TransportEntry:
    """The registered transport `name`; `KeyError` naming the known ones when there is none."""
    entries = registry()
    if name not in entries:
        raise KeyError(f"unknown transport {name!r}; known: {', '.join(entries)}")
    return entries[name]


def build_transport(name: str, options: Mapping[str, Any] | None = None, base: Path | None = None) -> Transport:
    """Construct transport `name` from its options (as in a model's configuration entry); relative paths in its
    path options are taken from `base` when given (else from the working directory)."""
    return transport_entry(name).build(options or {}, base)
