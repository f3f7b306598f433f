"""The RL rollout with the official openai SDK. Chat Completions gives no token ids: only token strings."""

import json

import numpy as np
from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city's name."}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city: str) -> str:
    return f"sunny in {city}"


client = OpenAI()
messages = [{"role": "user", "content": "What is the weather in Paris? Call get_weather."}]
tokens, logprobs = [], []
for turn in range(2):
    response = client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, tools=TOOLS, logprobs=True, max_tokens=48, seed=turn
    )
    choice = response.choices[0]
    content = choice.logprobs.content if choice.logprobs and choice.logprobs.content else []
    tokens += [entry.token for entry in content]
    logprobs.append(np.array([entry.logprob for entry in content], dtype=np.float32))
    messages.append(choice.message.model_dump(exclude_none=True))
    for call in choice.message.tool_calls or []:
        result = get_weather(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    calls = len(choice.message.tool_calls or [])
    print(f"turn {turn}: {choice.finish_reason}, {len(content)} tokens, {calls} tool calls")
client.close()

logprobs = np.concatenate(logprobs)
print(f"rollout: {len(tokens)} sampled tokens, tokens {tokens[:8]}..., sum logprob {logprobs.sum():.2f}")
