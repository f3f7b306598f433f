"""A multi-turn RL rollout, token in and token out: each assistant turn goes back as the ids it was sampled as
(`Message.token_ids`), so no turn is re-tokenized and each prompt is the previous one, that turn's ids unchanged,
and the new messages. Given back as text instead, a turn loses what its text does not show: here the stop string's
tokens, which the model sampled and the text trims (on a BPE engine, also ids that re-tokenize as other merges).

Runs on the reference model (deterministic, not a language model). For a real engine, change the connect() line:
connect("vllm", "Qwen/Qwen3-8B", base_url=...) or connect("llamacpp", "tiny", base_url=...). modelir then renders
only the new messages through the model's own chat template, and refuses (INVALID_REQUEST, naming the turn) a
template that would rewrite the earlier ones.
"""

import modelir

with modelir.connect("reference") as model:
    messages = [modelir.chat_message("user", "Find the key. Say where you look.")]
    naive = list(messages)  # the same rollout, turns given back as text: what a text round trip re-tokenizes
    previous: list[int] = []
    for turn in range(4):
        prompt = list(model.tokenize_messages(messages).token_ids)  # what this turn is sampled from
        assert prompt[: len(previous)] == previous  # every earlier id is where it was
        reply = modelir.view(model.chat(messages, max_output_tokens=24, stop=" ", seed=turn))
        sampled = [int(i) for i in reply.sampled_token_ids]
        print(f"turn {turn}: prompt {len(prompt)} ids, sampled {sampled}")
        message = reply.assistant_message
        message.token_ids.extend(sampled)  # token in: the turn as it was sampled, not its text
        observation = modelir.chat_message("tool", f"nothing under stone {turn}")
        messages += [message, observation]
        naive += [reply.assistant_message, observation]
        previous = prompt + sampled

    token_in = list(model.tokenize_messages(messages).token_ids)
    text_round_trip = list(model.tokenize_messages(naive).token_ids)
    parted = next((i for i, (a, b) in enumerate(zip(token_in, text_round_trip, strict=False)) if a != b), None)
    print(f"final prompt: {len(token_in)} ids token-in, {len(text_round_trip)} after a text round trip", end="")
    print(f"; they part at id {parted}" if parted is not None else "; identical")
