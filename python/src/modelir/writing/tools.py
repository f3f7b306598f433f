"""Tools from plain Python: a function's or a class's signature as a `Tool` with its JSON schema; tool choice."""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from modelir.v1 import request_pb2
from modelir.writing.arguments import ArgumentError, enum_value
from modelir.writing.names import short_names

ToolLike = request_pb2.Tool | Mapping[str, Any] | Callable[..., Any] | type


def tool(
    spec: ToolLike,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    field: str = "tool",
) -> request_pb2.Tool:
    """A `Tool` from a typed function, a pydantic model class, or a dict.

    The dict may be a bare JSON schema of the parameters (give `name=`), or a declaration in any of the big
    providers' shapes: `{"name", "description", "parameters"}`, OpenAI's `{"type": "function", "function": {...}}`,
    or Anthropic's `{"name", "description", "input_schema"}`. A function's schema comes from its annotations
    (str, int, float, bool, lists, dicts, `Literal`, enums, optionals, pydantic models) and its docstring: the
    first paragraph describes the tool, a Google-style `Args:` section describes the parameters.
    """
    if isinstance(spec, request_pb2.Tool):
        out = request_pb2.Tool()
        out.CopyFrom(spec)
        return out
    if isinstance(spec, Mapping):
        decl = dict(spec.get("function", spec)) if spec.get("type") == "function" else dict(spec)
        if "parameters" in decl or "input_schema" in decl:
            schema = decl.get("parameters", decl.get("input_schema"))
            name = name or decl.get("name")
            description = description if description is not None else decl.get("description", "")
            strict = strict or bool(decl.get("strict", False))
        else:
            schema = decl
        if not name:
            raise ArgumentError(f"{field}.name", "a tool name (give name=, or a 'name' key in the declaration)")
        if not isinstance(schema, Mapping):
            raise ArgumentError(f"{field}.parameters", "a JSON schema object (a dict)", schema)
    elif isinstance(spec, type) and hasattr(spec, "model_json_schema"):  # pydantic, without importing it
        schema = spec.model_json_schema()
        schema.pop("title", None)
        name = name or _snake(spec.__name__)
        description = description if description is not None else _doc_parts(spec)[0]
    elif callable(spec):
        schema, doc = _function_schema(spec, field)
        name = name or getattr(spec, "__name__", "")
        description = description if description is not None else doc
    else:
        raise ArgumentError(field, "a typed function, a pydantic model class, a dict or a Tool", spec)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
        raise ArgumentError(f"{field}.name", "1-128 letters, digits, '_', '.' or '-'", name)
    function = request_pb2.FunctionTool(
        name=name, description=description or "", parameters_json_schema=json.dumps(schema), strict=strict
    )
    return request_pb2.Tool(function=function)


def tools(specs: Iterable[ToolLike] | ToolLike) -> list[request_pb2.Tool]:
    """`tool()` over each item (a single tool is taken as a list of one)."""
    if isinstance(specs, Mapping | request_pb2.Tool) or callable(specs):
        specs = [specs]
    return [tool(s, field=f"tools[{i}]") for i, s in enumerate(specs)]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _doc_parts(obj: Any) -> tuple[str, dict[str, str]]:
    """The docstring's first paragraph, and each `Args:` entry's description by parameter name."""
    doc = inspect.getdoc(obj) or ""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.MULTILINE)
    if section:
        current = None
        for line in section.group(1).splitlines():
            entry = re.match(r"\s{1,8}(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if entry and (current is None or len(line) - len(line.lstrip()) <= 8):
                current = entry.group(1)
                params[current] = entry.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return summary, params


def _function_schema(fn: Callable[..., Any], field: str) -> tuple[dict[str, Any], str]:
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError) as exc:
        raise ArgumentError(field, "a function whose signature and annotations can be read", exc) from None
    summary, docs = _doc_parts(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ArgumentError(f"{field}.{pname}", "named parameters only (no *args or **kwargs)")
        if pname not in hints:
            raise ArgumentError(f"{field}.{pname}", "a type annotation (the tool's schema is built from it)")
        schema = _type_schema(hints[pname], f"{field}.{pname}")
        if pname in docs:
            schema["description"] = docs[pname]
        if param.default is param.empty:  # defaults stay out of the schema: strict modes reject `default`
            required.append(pname)
        properties[pname] = schema
    schema_out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema_out["required"] = required
    return schema_out, summary


_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _type_schema(annotation: Any, field: str) -> dict[str, Any]:
    if annotation in _SIMPLE:
        return {"type": _SIMPLE[annotation]}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [m.value for m in annotation]}
    if isinstance(annotation, type) and hasattr(annotation, "model_json_schema"):
        schema: dict[str, Any] = annotation.model_json_schema()  # a pydantic model's (duck-typed: no import)
        return schema
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        inner = _type_schema(args[0], field)
        text = next((a for a in args[1:] if isinstance(a, str)), None)
        return {**inner, "description": text} if text else inner
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is tuple and args and args[-1] is not Ellipsis:  # a fixed-length tuple
        items = [_type_schema(a, f"{field}[{i}]") for i, a in enumerate(args)]
        return {"type": "array", "prefixItems": items, "minItems": len(args), "maxItems": len(args)}
    if origin in (list, Sequence, tuple, set, frozenset) or annotation in (list, tuple, set):
        return {"type": "array", **({"items": _type_schema(args[0], field + "[]")} if args else {})}
    if origin in (dict, Mapping) or annotation is dict:
        value = args[1] if len(args) == 2 else None
        extra = {"additionalProperties": _type_schema(value, field + "{}")} if value not in (None, Any) else {}
        return {"type": "object", **extra}
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # Optional[X]: the default None makes it optional, the schema is X's
            return _type_schema(options[0], field)
        return {"anyOf": [_type_schema(a, field) for a in args]}
    if annotation is Any:
        return {}
    raise ArgumentError(
        field,
        "a JSON-representable annotation (str, int, float, bool, list, dict, Literal, Enum, pydantic)",
        annotation,
    )


def tool_choice(
    value: Any, declared: Sequence[request_pb2.Tool] = (), *, field: str = "tool_choice"
) -> request_pb2.ToolChoice:
    """A `ToolChoice`: `"auto"`, `"none"`, `"required"`, or the name (or function, or `Tool`) of a declared tool."""
    if isinstance(value, request_pb2.ToolChoice):
        return value
    names = [t.function.name for t in declared]
    if isinstance(value, request_pb2.Tool):
        value = value.function.name
    elif callable(value) and not isinstance(value, str):
        value = getattr(value, "__name__", value)
    if isinstance(value, str) and value.lower() in short_names(request_pb2.ToolChoiceMode):
        return request_pb2.ToolChoice(mode=enum_value(request_pb2.ToolChoiceMode, value, field=field))
    if isinstance(value, str) and value in names:
        return request_pb2.ToolChoice(tool_name=value)
    modes = ", ".join(map(repr, short_names(request_pb2.ToolChoiceMode)))
    tools_named = f" or a declared tool's name ({', '.join(map(repr, names))})" if names else " (no tools declared)"
    raise ArgumentError(field, f"{modes}{tools_named}", value)
