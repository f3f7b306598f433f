"""Writing a `Request` from plain Python: tools, tool choice, reasoning, stops, enum names, tool results, images.

Every helper returns the generated message it builds (`Tool`, `Part`, `Message`), so the protobuf stays the truth
and anything not covered here is set on the message itself. `build_request` hands its extra keywords to `apply`.
A wrong argument raises `ArgumentError` (an `InvalidRequestError` and a `ValueError`) naming the field and what
it expects, before anything is sent.
"""

from __future__ import annotations

import datetime
import enum
import inspect
import json
import mimetypes
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from modelir import names
from modelir.errors import InvalidRequestError
from modelir.names import short_names
from modelir.v1 import content_pb2, errors_pb2, logprobs_pb2, request_pb2

ToolLike = request_pb2.Tool | Mapping[str, Any] | Callable[..., Any] | type
ContentLike = str | content_pb2.Part | bytes | os.PathLike


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


# ---- tools ---------------------------------------------------------------------------------------------


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
    return request_pb2.Tool(
        name=name, description=description or "", parameters_json_schema=json.dumps(schema), strict=strict
    )


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
        return annotation.model_json_schema()
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


def tool_choice(value: Any, declared: Sequence[request_pb2.Tool] = (), *, field: str = "tool_choice"):
    """A `ToolChoice`: `"auto"`, `"none"`, `"required"`, or the name (or function, or `Tool`) of a declared tool."""
    if isinstance(value, request_pb2.ToolChoice):
        return value
    names = [t.name for t in declared]
    if isinstance(value, request_pb2.Tool):
        value = value.name
    elif callable(value) and not isinstance(value, str):
        value = getattr(value, "__name__", value)
    if isinstance(value, str) and value.lower() in short_names(request_pb2.ToolChoiceMode):
        return request_pb2.ToolChoice(mode=enum_value(request_pb2.ToolChoiceMode, value, field=field))
    if isinstance(value, str) and value in names:
        return request_pb2.ToolChoice(tool_name=value)
    modes = ", ".join(map(repr, short_names(request_pb2.ToolChoiceMode)))
    tools_named = f" or a declared tool's name ({', '.join(map(repr, names))})" if names else " (no tools declared)"
    raise ArgumentError(field, f"{modes}{tools_named}", value)


# ---- reasoning, stops, sampling ---------------------------------------------------------------------------


def reasoning(
    amount: str | int | None = None,
    *,
    summary: str | None = None,
    include_thoughts: bool = False,
    field: str = "reasoning",
) -> request_pb2.ReasoningControls:
    """Reasoning controls: an effort by name (`"low"`, `"high"`, ...) or a token budget as an int."""
    out = request_pb2.ReasoningControls(include_thoughts=include_thoughts)
    if isinstance(amount, bool):
        raise ArgumentError(field, "an effort name or a token budget (int)", amount)
    if isinstance(amount, int):
        if amount < 1:
            raise ArgumentError(field, "a positive token budget", amount)
        out.budget_tokens = amount
    elif isinstance(amount, str):
        out.effort = enum_value(request_pb2.ReasoningEffort, amount, field=field)
    elif amount is not None:
        efforts = ", ".join(map(repr, short_names(request_pb2.ReasoningEffort)))
        raise ArgumentError(field, f"an effort ({efforts}) or a token budget (int)", amount)
    if summary is not None:
        out.summary = enum_value(request_pb2.ReasoningSummary, summary, field=f"{field}_summary")
    return out


def stop_sequences(stop: str | Sequence[str] | None, *, field: str = "stop") -> list[str]:
    """`stop` as a list: one string is one stop sequence (never its characters)."""
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, Sequence) or not all(isinstance(s, str) and s for s in stop):
        raise ArgumentError(field, "a non-empty string or a list of non-empty strings", stop)
    return list(stop)


_SAMPLING_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "temperature": ((int, float), "a number, 0 or more"),
    "top_p": ((int, float), "a number in (0, 1]"),
    "top_k": (int, "a whole number, 1 or more"),
    "min_p": ((int, float), "a number in [0, 1]"),
    "max_output_tokens": (int, "a whole number, 0 or more"),
    "seed": (int, "a whole number"),
    "presence_penalty": ((int, float), "a number"),
    "frequency_penalty": ((int, float), "a number"),
    "repetition_penalty": ((int, float), "a positive number"),
}


def set_sampling(sampling: request_pb2.SamplingParams, name: str, value: Any) -> None:
    """Set one sampling field, raising `ArgumentError` naming it when the value is of the wrong kind."""
    kinds, expected = _SAMPLING_KINDS[name]
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ArgumentError(name, expected, value)
    try:
        setattr(sampling, name, value)
    except (ValueError, TypeError):  # out of the field's integer range
        raise ArgumentError(name, expected + " that fits the field", value) from None


# ---- messages: images, tool results ---------------------------------------------------------------------

_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def _sniff(data: bytes) -> str | None:
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image(source: str | bytes | os.PathLike, *, mime_type: str | None = None, field: str = "image") -> content_pb2.Part:
    """An image part from a file path, raw bytes, or an http(s)/gs/data URL (the URL is passed, not fetched)."""
    if isinstance(source, bytes | bytearray):
        mime = mime_type or _sniff(bytes(source))
        if mime is None:
            raise ArgumentError(f"{field}.mime_type", "a MIME type: the bytes are not PNG, JPEG, GIF or WebP")
        return content_pb2.Part(blob=content_pb2.Blob(mime_type=mime, data=bytes(source)))
    if isinstance(source, str) and re.match(r"^(https?|gs|data):", source):
        mime = mime_type or (source[5:].split(";", 1)[0] if source.startswith("data:") else None)
        mime = mime or mimetypes.guess_type(source.split("?", 1)[0])[0]
        if mime is None:
            raise ArgumentError(f"{field}.mime_type", "a MIME type: it cannot be told from the URL")
        return content_pb2.Part(blob=content_pb2.Blob(mime_type=mime, uri=source))
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if not path.is_file():
            raise ArgumentError(field, "an existing file, image bytes, or an http(s)/gs/data URL", str(source))
        data = path.read_bytes()
        mime = mime_type or _sniff(data) or mimetypes.guess_type(path.name)[0]
        if mime is None:
            raise ArgumentError(f"{field}.mime_type", f"a MIME type: {path.name} is not a known image type")
        return content_pb2.Part(blob=content_pb2.Blob(mime_type=mime, data=data))
    raise ArgumentError(field, "a file path, image bytes, or an http(s)/gs/data URL", source)


def _part(item: ContentLike, field: str) -> content_pb2.Part:
    if isinstance(item, content_pb2.Part):
        return item
    if isinstance(item, str):
        return content_pb2.Part(text=item)
    if isinstance(item, bytes | bytearray | os.PathLike):
        return image(item, field=field)
    raise ArgumentError(field, "text (str), a Part, image bytes or an image path", item)


def chat_message(role: str, *content: ContentLike, name: str = "") -> content_pb2.Message:
    """A message from text, images (bytes or a path; `image()` for URLs) and parts:
    `chat_message("user", "What is this?", Path("cat.png"))`."""
    role_value = enum_value(content_pb2.Role, role, field="role")
    parts = [_part(item, f"content[{i}]") for i, item in enumerate(content)]
    return content_pb2.Message(role=role_value, parts=parts, name=name)


def tool_result(
    call: content_pb2.ToolCall | content_pb2.Part, result: Any, *, failed: bool = False
) -> content_pb2.Message:
    """The tool message answering `call`: text as is, anything else as JSON; `failed=True` marks an error."""
    if isinstance(call, content_pb2.Part):
        call = call.tool_call
    if not isinstance(call, content_pb2.ToolCall) or (not call.id and not call.name):
        raise ArgumentError("tool_result.call", "the ToolCall being answered (from view(response).tool_calls)", call)
    if isinstance(result, content_pb2.Part):
        content = [result]
    elif isinstance(result, str):
        content = [content_pb2.Part(text=result)]
    else:
        try:
            content = [content_pb2.Part(text=json.dumps(result, default=_jsonable))]
        except TypeError:
            raise ArgumentError("tool_result.result", "text, or a JSON-serializable value", result) from None
    answer = content_pb2.ToolResult(tool_call_id=call.id, name=call.name, content=content, failed=failed)
    return content_pb2.Message(role=content_pb2.ROLE_TOOL, parts=[content_pb2.Part(tool_result=answer)])


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(type(value).__name__)


# ---- build_request's extra keywords --------------------------------------------------------------------

#: The keywords `apply` (and so `build_request`) accepts beyond build_request's own.
EXTRA_KEYWORDS = (
    "system",
    "tools",
    "tool_choice",
    "reasoning",
    "reasoning_summary",
    "include_thoughts",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "stop_token_ids",
    "regex",
    "grammar",
    "require_token_ids",
    "logprob_basis",
    "foreign_artifact_policy",
    "include_raw",
)


def apply(request: request_pb2.Request, **options: Any) -> request_pb2.Request:
    """Set the `EXTRA_KEYWORDS` on `request` (in place; returned for chaining)."""
    unknown = sorted(set(options) - set(EXTRA_KEYWORDS))
    if unknown:
        raise TypeError(
            f"unknown request keyword {unknown[0]!r}; besides build_request's own: {', '.join(EXTRA_KEYWORDS)}"
        )
    get = options.get
    if get("system") is not None:
        if not isinstance(options["system"], str):
            raise ArgumentError("system", "the system prompt as a string", options["system"])
        if request.WhichOneof("input") != "conversation":
            raise ArgumentError("system", "messages= to go with it (a raw prompt has no system message)")
        request.conversation.messages.insert(0, chat_message("system", options["system"]))
    if get("tools"):
        request.tools.extend(tools(options["tools"]))
    if get("tool_choice") is not None:
        request.tool_choice.CopyFrom(tool_choice(options["tool_choice"], request.tools))
    if get("reasoning") is not None or get("reasoning_summary") is not None or get("include_thoughts"):
        request.reasoning.CopyFrom(
            reasoning(
                get("reasoning"), summary=get("reasoning_summary"), include_thoughts=bool(get("include_thoughts"))
            )
        )
    for name in ("min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if get(name) is not None:
            set_sampling(request.sampling, name, options[name])
    if get("stop_token_ids"):
        ids = options["stop_token_ids"]
        if isinstance(ids, int) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ArgumentError("stop_token_ids", "a list of token ids (ints)", ids)
        request.sampling.stop_token_ids.extend(ids)
    if get("regex") is not None:
        request.constraint.regex = options["regex"]
    if get("grammar") is not None:
        grammar = options["grammar"]
        if not (isinstance(grammar, tuple) and len(grammar) == 2 and isinstance(grammar[1], str)):
            raise ArgumentError("grammar", "a (dialect, text) pair, e.g. ('gbnf', 'root ::= ...')", grammar)
        dialect = enum_value(request_pb2.GrammarDialect, grammar[0], field="grammar[0]")
        request.constraint.grammar.CopyFrom(request_pb2.Grammar(dialect=dialect, text=grammar[1]))
    if get("require_token_ids"):
        request.logprobs.require_token_ids = True
    if get("logprob_basis") is not None:
        request.logprobs.basis = enum_value(logprobs_pb2.LogprobBasis, options["logprob_basis"], field="logprob_basis")
    if get("foreign_artifact_policy") is not None:
        request.foreign_artifact_policy = enum_value(
            request_pb2.ForeignArtifactPolicy, options["foreign_artifact_policy"], field="foreign_artifact_policy"
        )
    if get("include_raw"):
        request.include_raw = True
    return request
