"""The sampling and constraint fields both llama-server wires take (`/completion` and the chat endpoint), under
llama.cpp's names; a choice among labels as a GBNF grammar."""

from __future__ import annotations

from typing import Any

import orjson

from modelir.transports import _common as common
from modelir.v1 import request_pb2

JSON_HEADERS = (("content-type", "application/json"),)


def gbnf_literal(text: str) -> str:
    """A GBNF string literal (backslash, quote and control characters escaped)."""
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )
    return f'"{escaped}"'


def choice_grammar(labels: list[str]) -> str:
    """A choice among labels as GBNF: the output is exactly one of them."""
    return "root ::= " + " | ".join(gbnf_literal(label) for label in labels)


def lower_sampling(request: request_pb2.Request, body: dict[str, Any]) -> None:
    """The sampling and constraint fields both endpoints take, under llama.cpp's names."""
    common.copy_sampling(request.sampling, body, _SAMPLING)
    kind = request.constraint.WhichOneof("kind")
    if kind == "choice":
        body["grammar"] = choice_grammar(list(request.constraint.choice.labels))
    elif kind == "grammar":
        body["grammar"] = request.constraint.grammar.text
    elif kind == "json_schema":
        body["json_schema"] = orjson.loads(request.constraint.json_schema.schema_json)
    elif kind == "json_object":  # a schema that admits exactly the JSON objects
        body["json_schema"] = {"type": "object"}


# IR sampling fields, as `ir_name:native_name` where this wire renames them.
_SAMPLING = (
    "temperature top_p top_k min_p seed presence_penalty frequency_penalty repetition_penalty:repeat_penalty stop"
)
