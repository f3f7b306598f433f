"""Persisting responses with their provenance, and reading them back (here or, years later, in any language).

Talks to OpenAI chat (set OPENAI_API_KEY; OPENAI_BASE_URL points it elsewhere, as the test does at a local fake).
"""

import sys
import tempfile
from pathlib import Path

import modelir
from modelir.records.files import RecordWriter, read_records

QUESTIONS = ["What is 2 + 2?", "Name a colour.", "Say hello."]
path = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()) / "answers.jsonl"

with modelir.connect("openai_chat", "gpt-4o-mini") as model, RecordWriter.create(path) as records:
    for question in QUESTIONS:
        records.append(modelir.recorded(model, modelir.build_request(model.name, messages=[("user", question)])))

for record in read_records(path):
    p = record.provenance
    print(f"{record.key} {p.provider_model} via {p.transport} {p.transport_version} (IR {p.ir_version}), ", end="")
    print(f"{p.attempt_count} attempt(s): {modelir.view(record.response).text!r}")
