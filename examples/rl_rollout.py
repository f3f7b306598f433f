"""An RL rollout: chat with a tool, the sampled token ids and logprobs into numpy, a tool result, a second turn.

Runs on the reference model (deterministic, not a language model: the words are gibberish, the token ids and
logprobs are real). For a real engine, change the connect() line: connect("vllm", "Qwen/Qwen3-8B", base_url=...).
"""

import modelir
import numpy as np


def get_weather(city: str) -> str:
    """The current weather in a city.

    Args:
        city: The city's name.
    """
    return f"sunny in {city}"


with modelir.connect("reference") as model:
    messages = [modelir.chat_message("user", "What is the weather in Paris? Call get_weather.")]
    ids, logprobs = [], []
    for turn in range(2):
        asked = modelir.RequestOptions(tools=[get_weather], logprobs=True, require_token_ids=True, max_output_tokens=48)
        reply = modelir.view(model.chat(messages, **asked | {"seed": turn}))
        arrays = reply.logprobs
        assert arrays is not None and arrays.ids is not None  # asked for: require_token_ids refuses a model without
        ids.append(arrays.ids)
        logprobs.append(arrays.logprobs)
        messages.append(reply.assistant_message)
        for i, call in enumerate(reply.tool_calls):
            messages.append(modelir.tool_result(call, get_weather(**reply.arguments(i))))
        print(f"turn {turn}: {reply.finish_reason}, {len(arrays)} tokens, {len(reply.tool_calls)} tool calls")

all_ids, all_logprobs = np.concatenate(ids), np.concatenate(logprobs)
print(f"rollout: {all_ids.shape[0]} sampled tokens, ids {all_ids[:8]}..., sum logprob {all_logprobs.sum():.2f}")
