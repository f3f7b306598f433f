"""A multi-turn conversation whose second turn replays the reasoning artifact of the first, verbatim and in place.

Runs on the reference model, which seals its reasoning like Anthropic does and refuses a replayed thought whose
artifact it did not issue or that was altered: the second turn succeeding is the proof the artifact survived.
"""

import modelir

with modelir.connect("reference") as model:
    messages = [modelir.chat_message("user", "Think of a number, then name it.")]
    first = modelir.view(model.chat(messages, reasoning="high", max_output_tokens=300, seed=1))
    issuer = first.artifacts[0].issuer
    print(f"turn 1: {first.text[:40]!r}, {len(first.artifacts)} artifact(s) from {issuer.transport}/{issuer.model}")
    messages += [first.assistant_message, modelir.chat_message("user", "Now double it.")]
    second = modelir.view(model.chat(messages, reasoning="high", max_output_tokens=300, seed=2))
    print(f"turn 2: {second.text[:40]!r} (the replayed artifact was accepted)")
