"""Every cell of the constraint table (python/src/modelir/transports/README.md): lowered where, or rejected."""

from __future__ import annotations

import orjson
import pytest
from modelir.pipeline import capabilities
from modelir.transports import TRANSPORTS
from modelir.v1 import request_pb2

LABELS = ["yes", "no (maybe)"]
SCHEMA = '{"type":"object","properties":{"a":{"type":"integer"}}}'
GBNF, EBNF, LARK = request_pb2.GRAMMAR_DIALECT_GBNF, request_pb2.GRAMMAR_DIALECT_EBNF, request_pb2.GRAMMAR_DIALECT_LARK


def _constraint(kind: str) -> request_pb2.Constraint:
    constraint = request_pb2.Constraint()
    if kind == "choice":
        constraint.choice.labels.extend(LABELS)
    elif kind == "regex":
        constraint.regex = "[0-9]+"
    elif kind == "json":
        constraint.json_schema.schema_json = SCHEMA
    else:
        constraint.grammar.dialect = {"gbnf": GBNF, "ebnf": EBNF, "lark": LARK}[kind]
        constraint.grammar.text = 'root ::= "a"'
    return constraint


def _dig(body, path: str):
    for key in path.split("."):
        body = body[key]
    return body


SCHEMA_OBJ = orjson.loads(SCHEMA)
# (transport, constraint) -> (body path, expected value), or "rejected".
TABLE = {
    ("vllm", "choice"): ("structured_outputs.choice", LABELS),
    ("vllm", "regex"): ("structured_outputs.regex", "[0-9]+"),
    ("vllm", "json"): ("structured_outputs.json", SCHEMA_OBJ),
    ("vllm", "gbnf"): "rejected",
    ("vllm", "ebnf"): ("structured_outputs.grammar", 'root ::= "a"'),
    ("vllm", "lark"): "rejected",
    ("sglang", "choice"): ("sampling_params.regex", r"(yes|no\ \(maybe\))"),
    ("sglang", "regex"): ("sampling_params.regex", "[0-9]+"),
    ("sglang", "json"): ("sampling_params.json_schema", SCHEMA),
    ("sglang", "gbnf"): "rejected",
    ("sglang", "ebnf"): ("sampling_params.ebnf", 'root ::= "a"'),
    ("sglang", "lark"): "rejected",
    ("llamacpp", "choice"): ("grammar", 'root ::= "yes" | "no (maybe)"'),
    ("llamacpp", "regex"): "rejected",
    ("llamacpp", "json"): ("json_schema", SCHEMA_OBJ),
    ("llamacpp", "gbnf"): ("grammar", 'root ::= "a"'),
    ("llamacpp", "ebnf"): "rejected",
    ("llamacpp", "lark"): "rejected",
    ("ollama", "choice"): ("format", {"enum": LABELS}),
    ("ollama", "regex"): "rejected",
    ("ollama", "json"): ("format", SCHEMA_OBJ),
    ("ollama", "gbnf"): "rejected",
    ("ollama", "ebnf"): "rejected",
    ("ollama", "lark"): "rejected",
    ("openai_chat", "json"): ("response_format.json_schema.schema", SCHEMA_OBJ),
    ("openai_responses", "json"): ("text.format.schema", SCHEMA_OBJ),
    ("google_genai", "json"): ("generationConfig.responseJsonSchema", SCHEMA_OBJ),
}
for transport in ("openai_chat", "openai_responses", "anthropic_messages", "google_genai", "openai_completions"):
    for kind in ("choice", "regex", "json", "gbnf", "ebnf", "lark"):
        TABLE.setdefault((transport, kind), "rejected")


@pytest.mark.parametrize(("transport_name", "kind"), sorted(TABLE), ids=lambda v: v)
def test_constraint_cell(transport_name, kind):
    transport = TRANSPORTS[transport_name]({"provider_model": "m"})
    request = request_pb2.Request(model="m")
    if transport_name in ("sglang", "openai_completions"):
        request.prompt = "Answer:"
    else:
        request.conversation.messages.add(role=3).parts.add(text="Answer:")
    request.constraint.CopyFrom(_constraint(kind))
    gaps = capabilities.unsupported(request, transport.manifest(), extra_reasons=transport.extra_unsupported(request))
    expected = TABLE[(transport_name, kind)]
    if expected == "rejected":
        assert gaps is not None, "the manifest must reject this constraint"
        return
    assert gaps is None, gaps
    path, value = expected
    assert _dig(orjson.loads(transport.lower(request, stream=False).body), path) == value
