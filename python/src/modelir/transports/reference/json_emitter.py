"""JSON that satisfies a schema, emitted token by token, and the schemas the reference model can honour at all.

The subset is the one `schema_gaps` accepts: object, array, string, integer, number, boolean and null, with
`properties`, `required`, `items`, `enum`, `const`, `minItems` and `maxItems`. A schema outside it is rejected
before generation (through the transport's `extra_unsupported`), never approximated.
"""

from __future__ import annotations

from typing import Any

import orjson

from modelir.transports.reference.sampler import Generator
from modelir.transports.reference.vocabulary import DIGITS, LETTERS, NONZERO_DIGITS

_SUPPORTED_SCHEMA_KEYS = frozenset(
    {"type", "properties", "required", "items", "enum", "const", "minItems", "maxItems"}
    | {"additionalProperties", "description", "title", "$schema"}
)
_SCHEMA_TYPES = frozenset({"object", "array", "string", "integer", "number", "boolean", "null"})


def emit_json(gen: Generator, schema: dict[str, Any]) -> bool:
    """Emit a JSON value that satisfies `schema` (the subset `schema_gaps` accepts). False if cut short."""
    if "const" in schema:
        return gen.force(orjson.dumps(schema["const"]))
    if "enum" in schema:
        options = [orjson.dumps(v) for v in schema["enum"]]
        return gen.force(options[gen.pick_sequence(options)])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[gen.pick_sequence([k.encode() for k in kind])]
    if kind == "object":
        if not gen.force(b"{"):
            return False
        for n, (name, sub) in enumerate(schema.get("properties", {}).items()):
            if not gen.force((b"," if n else b"") + orjson.dumps(name) + b":") or not emit_json(gen, sub):
                return False
        return gen.force(b"}")
    if kind == "array":
        low = schema.get("minItems", 1)
        high = max(low, min(schema.get("maxItems", 3), low + 2))
        count = int(gen.rng.integers(low, high + 1))
        if not gen.force(b"["):
            return False
        for n in range(count):
            if (n and not gen.force(b",")) or not emit_json(gen, schema.get("items", {"type": "string"})):
                return False
        return gen.force(b"]")
    if kind == "string":
        return gen.force(b'"') and gen.sample_class(LETTERS[:-1], 1 + int(gen.rng.integers(0, 8))) and gen.force(b'"')
    if kind in ("integer", "number"):
        ok = gen.sample_class(NONZERO_DIGITS, 1) and gen.sample_class(DIGITS, int(gen.rng.integers(0, 3)))
        if ok and kind == "number":
            ok = gen.force(b".") and gen.sample_class(DIGITS, 1)
        return ok
    if kind == "boolean":
        options = [b"true", b"false"]
        return gen.force(options[gen.pick_sequence(options)])
    return gen.force(b"null")


def schema_gaps(schema_json: str, where: str) -> list[str]:
    """Reasons the reference model cannot honour a JSON schema (keywords or types it does not implement)."""
    try:
        schema = orjson.loads(schema_json)
    except orjson.JSONDecodeError:
        return []  # field validation reports it
    unknown: set[str] = set()

    def walk(node: object) -> None:
        if not isinstance(node, dict):
            unknown.add("(a schema that is not an object)")
            return
        unknown.update(k for k in node if k not in _SUPPORTED_SCHEMA_KEYS)
        kinds = node.get("type", "object")
        for kind in kinds if isinstance(kinds, list) else [kinds]:
            if kind not in _SCHEMA_TYPES:
                unknown.add(f"type {kind!r}")
        if node.get("additionalProperties", False) not in (False,):
            unknown.add("additionalProperties other than false")
        for sub in node.get("properties", {}).values():
            walk(sub)
        if "items" in node:
            walk(node["items"])

    walk(schema)
    if not unknown:
        return []
    return [f"The reference model cannot honour {', '.join(sorted(unknown))} in {where}."]
