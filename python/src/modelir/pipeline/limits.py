"""How deep and how large the JSON a request carries may be: the bounds every lowering and provider can take.

A request carries JSON as text in its `*_json` fields (a tool's schema, tool-call arguments, provider options, a
JSON-schema constraint, replayed provider parts). A lowering parses that text and serialises it again inside the
native body, so nesting that the parser takes but the serialiser refuses (orjson stops at 255 levels, its parser at
1,024; Python's recursion limit is near 1,000 frames) would fail deep inside a lowering, untyped. Validation refuses
it first, naming the field, so `Validate` and a call agree. A regex constraint is bounded too: its automaton is
built for the output check (`errors.soft`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import orjson
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

# Deeper than any real schema or arguments nest, and far below where a lowering (which puts the value a few levels
# down in its body) or a provider's parser gives up.
MAX_JSON_DEPTH = 128
# The longest regex constraint: RE2's automaton for it must fit its memory bound.
MAX_REGEX_CHARS = 100_000


def limit_problems(request: Message, present: Collection[str] | None = None) -> Iterator[tuple[str, str]]:
    """(field, description) of every JSON text in `request` nested deeper than `MAX_JSON_DEPTH`, and of a regex
    constraint longer than `MAX_REGEX_CHARS`. `present`: the names of the request's set fields, when the caller
    has them (a request that sets no constraint has no regex to measure)."""
    if _may_nest_deeper(request) and _any_deep(request):  # the common case, found without a walk
        for field, text in _json_texts(request, ""):
            if _nests_deeper(text, MAX_JSON_DEPTH):
                yield field, f"The JSON nests deeper than {MAX_JSON_DEPTH} levels, more than any provider takes."
    if present is not None and "constraint" not in present:
        return
    constraint = getattr(request, "constraint", None)
    if constraint is not None and len(constraint.regex) > MAX_REGEX_CHARS:
        yield "constraint.regex", f"The regular expression is longer than {MAX_REGEX_CHARS:,} characters."


def _nests_deeper(text: str, limit: int) -> bool:
    """Whether the JSON `text` nests more than `limit` arrays and objects deep. Text with fewer brackets than that
    cannot (the common case, counted in C); text that is not JSON is left to the checks that want JSON."""
    if text.count("[") + text.count("{") <= limit:
        return False
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return "depth" in str(exc)  # orjson's own limit (1,024): deeper still
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


def _may_nest_deeper(request: Message) -> bool:
    """Whether `request` has more brackets than `MAX_JSON_DEPTH` in all (no JSON text in it can nest deeper
    otherwise): its bytes counted in C, cheaper than walking its messages when, as usual, it has few."""
    wire = request.SerializeToString()
    return wire.count(b"[") + wire.count(b"{") > MAX_JSON_DEPTH


def _any_deep(message: Message) -> bool:
    """Whether any JSON text in `message` nests too deep (`_json_texts`' walk, over set fields only, no paths)."""
    kinds = _fields(type(message))
    if not kinds:
        return False
    for field, value in message.ListFields():
        kind = kinds.get(field.name)
        if kind == _JSON:
            if _nests_deeper(value, MAX_JSON_DEPTH):
                return True
        elif kind == _REPEATED:
            if any(_any_deep(item) for item in value):
                return True
        elif kind == _MESSAGE and _any_deep(value):
            return True
    return False


def _json_texts(message: Message, path: str) -> Iterator[tuple[str, str]]:
    """(field path, text) of every non-empty JSON text field (`_is_json`) anywhere in `message`."""
    kinds = _fields(type(message))
    for field, value in message.ListFields():
        kind = kinds.get(field.name)
        if kind is None:
            continue
        where = f"{path}.{field.name}" if path else field.name
        if kind == _JSON:
            yield where, value
        elif kind == _REPEATED:
            for index, item in enumerate(value):
                yield from _json_texts(item, f"{where}[{index}]")
        else:
            yield from _json_texts(value, where)


_JSON, _MESSAGE, _REPEATED = range(3)
_FIELDS: dict[type, dict[str, int]] = {}


def _fields(message_type: type[Message]) -> dict[str, int]:
    """The kind of each field of `message_type` that is, or can contain, a JSON text (maps excluded), by name;
    worked out once per message type."""
    found = _FIELDS.get(message_type)
    if found is None:
        found = _FIELDS[message_type] = dict(_kinds(message_type))
    return found


def _kinds(message_type: type[Message]) -> Iterator[tuple[str, int]]:
    for field in message_type.DESCRIPTOR.fields:
        if _is_json(field):
            yield field.name, _JSON
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            if _reaches_json(field.message_type, frozenset()):
                yield field.name, _REPEATED if field.is_repeated else _MESSAGE


def _is_json(field: Any) -> bool:  # a FieldDescriptor (upb's or the pure one)
    """A JSON text field: `options_json`, `arguments_json`, `parameters_json_schema`, ..."""
    return field.type == FieldDescriptor.TYPE_STRING and "_json" in field.name and not field.is_repeated


def _reaches_json(descriptor: Any, seen: frozenset[str]) -> bool:  # a message Descriptor
    if descriptor.full_name in seen:
        return False
    seen = seen | {descriptor.full_name}
    return any(
        _is_json(f)
        or (
            f.message_type is not None
            and not f.message_type.GetOptions().map_entry
            and _reaches_json(f.message_type, seen)
        )
        for f in descriptor.fields
    )
