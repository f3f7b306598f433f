"""The reasoning replay with the official openai SDK: the Responses API, stateless, with encrypted reasoning."""

from openai import OpenAI

client = OpenAI()
options = {
    "model": "o4-mini",
    "reasoning": {"effort": "high"},
    "include": ["reasoning.encrypted_content"],
    "store": False,
    "max_output_tokens": 300,
}
inputs = [{"role": "user", "content": "Think of a number, then name it."}]
first = client.responses.create(input=inputs, **options)
artifacts = [item for item in first.output if item.type == "reasoning" and item.encrypted_content]
print(f"turn 1: {first.output_text[:40]!r}, {len(artifacts)} artifact(s) from openai/{first.model}")
inputs += [item.model_dump(exclude_none=True) for item in first.output]
inputs.append({"role": "user", "content": "Now double it."})
second = client.responses.create(input=inputs, **options)
print(f"turn 2: {second.output_text[:40]!r} (the replayed artifact was accepted)")
client.close()
