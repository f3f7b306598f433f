"""Seeded mutations of native provider answers: JSON bodies, raw bytes, headers and stream event lists.

Every mutation is drawn from a `random.Random`, so a seed reproduces an input exactly. The mutations are the ones
real providers and broken proxies produce: keys deleted, values of the wrong type, integers past 2^63, floats at
1e308 and NaN, invalid UTF-8, bodies cut short, deep nesting, stream events dropped, duplicated or reordered, and
retry hints that are not numbers.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

# Values that stand in for any JSON value: wrong types, boundary numbers, empty containers.
ODD_VALUES: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    2**63,
    -(2**63) - 1,
    2**64 + 1,
    1e308,
    -1e308,
    math.nan,
    math.inf,
    0.5,
    "",
    "x",
    "\u00e9\u4e2d",
    [],
    [None],
    {},
    {"": None},
)

ODD_HEADER_VALUES = (
    "inf",
    "-inf",
    "nan",
    "-1",
    "0",
    "1e308",
    "99999999999999999999999",
    "Wed, 21 Oct 2015 07:28:00 GMT",
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "soon",
    "",
    "1.5",
)

HINT_HEADERS = (
    "retry-after",
    "retry-after-ms",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-reset-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "content-type",
)


def dumps(value: Any) -> bytes:
    """JSON as a provider might send it: non-finite floats as NaN/Infinity, big integers verbatim."""
    text = json.dumps(value, allow_nan=True, ensure_ascii=False)
    marker = json.dumps(_DEEP, ensure_ascii=False)[:-1]
    while (start := text.find(marker)) >= 0:
        end = text.index('"', start + len(marker))
        levels = int(text[start + len(marker) : end])
        text = text[:start] + "[" * levels + "0" + "]" * levels + text[end + 1 :]
    return text.encode("utf-8", "surrogatepass")


def _paths(value: Any, prefix: tuple = (), out: list | None = None, depth: int = 0) -> list[tuple]:
    """Every path to a node (dict keys and list indices), the root included."""
    out = [] if out is None else out
    out.append(prefix)
    if depth > 12:
        return out
    if isinstance(value, dict):
        for key, child in value.items():
            _paths(child, (*prefix, key), out, depth + 1)
    elif isinstance(value, list):
        for index, child in enumerate(value[:8]):
            _paths(child, (*prefix, index), out, depth + 1)
    return out


def _get(value: Any, path: tuple) -> Any:
    for step in path:
        value = value[step]
    return value


def _set(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    _get(value, path[:-1])[path[-1]] = new
    return value


_DEEP = "\u0000deep-nesting\u0000"


def _deep(levels: int) -> str:
    """A marker that `dumps` expands into `levels` nested arrays (deeper than Python's json can encode)."""
    return f"{_DEEP}{levels}"


def mutate_json(rng: random.Random, value: Any) -> Any:
    """One structural change at a random node of a (deep-copied) JSON value."""
    value = json.loads(json.dumps(value))
    paths = _paths(value)
    path = rng.choice(paths)
    node = _get(value, path)
    op = rng.randrange(7)
    if op == 0 and path:  # delete the node
        parent = _get(value, path[:-1])
        del parent[path[-1]]
        return value
    if op == 1:  # replace it with an odd value
        return _set(value, path, rng.choice(ODD_VALUES))
    if op == 2:  # wrap it in a list, or unwrap a list
        if isinstance(node, list) and node:
            return _set(value, path, node[0])
        return _set(value, path, [node])
    if op == 3 and isinstance(node, list) and node:  # duplicate, drop or reorder list items
        items = list(node)
        choice = rng.randrange(3)
        if choice == 0:
            items.insert(rng.randrange(len(items) + 1), rng.choice(items))
        elif choice == 1:
            items.pop(rng.randrange(len(items)))
        else:
            rng.shuffle(items)
        return _set(value, path, items)
    if op == 4 and isinstance(node, dict):  # an unknown key
        node[rng.choice(("type", "extra", "index", "id", "\u00ff"))] = rng.choice(ODD_VALUES)
        return value
    if op == 5:  # deep nesting
        return _set(value, path, _deep(rng.choice((64, 2000))))
    if isinstance(node, str):  # change a string's content (an enum value, an id, a number in text)
        return _set(value, path, rng.choice(("", node + "x", node[: len(node) // 2], "\u0000", "1e308", "NaN")))
    return _set(value, path, rng.choice(ODD_VALUES))


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """Damage raw bytes: cut short, invalid UTF-8 spliced in, a byte flipped, or emptied."""
    op = rng.randrange(5)
    if op == 0 or not data:
        return data[: rng.randrange(len(data) + 1)] if data else b""
    at = rng.randrange(len(data) + 1)
    if op == 1:
        return data[:at] + rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80")) + data[at:]
    if op == 2:
        index = rng.randrange(len(data))
        return data[:index] + bytes([data[index] ^ (1 << rng.randrange(8))]) + data[index + 1 :]
    if op == 3:
        return b""
    return data + rng.choice((b"}", b"]", b",", b"garbage"))


def mutate_body(rng: random.Random, body: Any | None, text: bytes) -> bytes:
    """A mutated body: structurally (when it is JSON) or as bytes."""
    if body is not None and rng.random() < 0.75:
        return dumps(mutate_json(rng, body))
    return mutate_bytes(rng, text)


def mutate_headers(rng: random.Random, headers: dict[str, str]) -> dict[str, str]:
    headers = dict(headers)
    headers[rng.choice(HINT_HEADERS)] = rng.choice(ODD_HEADER_VALUES)
    return headers


def mutate_events(rng: random.Random, events: list[dict[str, str]]) -> tuple[list[dict[str, str]], str]:
    """Stream events dropped, duplicated, reordered, or one event's data mutated; and which of these it was
    (`dropped`, `duplicated`, `swapped`, `cut`, `data`: only `data` changes the shape of what arrives)."""
    events = [dict(e) for e in events]
    if not events:
        return [{"data": rng.choice(("{}", "[DONE]", "null", "\xff"))}], "data"
    op = rng.randrange(5)
    index = rng.randrange(len(events))
    if op == 0:
        events.pop(index)
    elif op == 1:
        events.insert(index, dict(events[index]))
    elif op == 2:
        other = rng.randrange(len(events))
        events[index], events[other] = events[other], events[index]
    elif op == 3:
        events = events[: index + 1]
    else:
        data = events[index].get("data", "")
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        if parsed is not None and rng.random() < 0.8:
            events[index]["data"] = dumps(mutate_json(rng, parsed)).decode("utf-8", "replace")
        else:
            # Bytes that are not UTF-8 stay so on the wire (`drive._sse` encodes the escapes back).
            events[index]["data"] = mutate_bytes(rng, data.encode()).decode("utf-8", "surrogateescape")
    return events, ("dropped", "duplicated", "swapped", "cut", "data")[op]
