"""Bits per byte with the official openai SDK: legacy completions with echo (vLLM; current OpenAI models refuse it).

The first token has no logprob (None) and must be skipped by hand; nothing checks up front that the server can
score a prompt at all.
"""

import math

from openai import OpenAI

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "To be, or not to be, that is the question.",
    "Colourless green ideas sleep furiously.",
]

client = OpenAI()
sums, sizes = [], []
for text in CORPUS:
    response = client.completions.create(model="davinci-002", prompt=text, max_tokens=0, echo=True, logprobs=0)
    token_logprobs = response.choices[0].logprobs.token_logprobs
    sums.append(sum(lp for lp in token_logprobs if lp is not None))
    sizes.append(len(text.encode()))
client.close()

for text, logprob_sum, size in zip(CORPUS, sums, sizes, strict=True):
    print(f"{-logprob_sum / math.log(2) / size:6.3f} bits/byte  {text}")
total = -sum(sums) / math.log(2) / sum(sizes)
print(f"{total:6.3f} bits/byte over the corpus ({sum(sizes)} bytes)")
