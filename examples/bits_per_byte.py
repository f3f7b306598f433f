"""Bits per byte of a small corpus: each document scored as a whole (input scoring, no generation).

Runs on the reference model. Any model whose manifest claims input scoring works the same (sglang, vLLM);
one that cannot score its input is refused up front, before any document is sent.
"""

import modelir

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "To be, or not to be, that is the question.",
    "Colourless green ideas sleep furiously.",
]

with modelir.connect("reference") as model:
    modelir.needs("input_scoring").check(model)
    scores = [model.score("", text) for text in CORPUS]

for text, score in zip(CORPUS, scores, strict=True):
    print(f"{score.bits_per_byte:6.3f} bits/byte  {text}")
total = modelir.bits_per_byte(sum(s.logprob_sum for s in scores), sum(s.byte_count for s in scores))
print(f"{total:6.3f} bits/byte over the corpus ({sum(s.byte_count for s in scores)} bytes)")
