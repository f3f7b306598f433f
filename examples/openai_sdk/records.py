"""Persisting responses with provenance and reading them back, with the official openai SDK.

The file format, the key and the provenance are ours to invent, and only this program can read them.
"""

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import openai
from openai import OpenAI
from openai.types.chat import ChatCompletion

QUESTIONS = ["What is 2 + 2?", "Name a colour.", "Say hello."]
path = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()) / "answers.jsonl"

client = OpenAI()
with path.open("w") as out:
    for question in QUESTIONS:
        request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": question}]}
        started = time.time()
        response = client.chat.completions.create(**request)
        key = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:24]
        provenance = {"sdk": f"openai {openai.__version__}", "base_url": str(client.base_url)}
        provenance |= {"start_time": started, "end_time": time.time()}
        record = {"key": key, "request": request, "response": response.model_dump(), "provenance": provenance}
        out.write(json.dumps(record) + "\n")
client.close()

for line in path.read_text().splitlines():
    record = json.loads(line)
    response = ChatCompletion.model_validate(record["response"])
    print(f"{record['key']} {response.model} via {record['provenance']['sdk']}: ", end="")
    print(f"{response.choices[0].message.content!r}")
