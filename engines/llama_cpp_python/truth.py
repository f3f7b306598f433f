"""The in-process truth for the live scoring checks: the same GGUF model loaded by `llama_cpp.Llama` with all logits.

Reads `{"model": PATH, "n_ctx": N, "texts": [...], "top_k": K}` as JSON on stdin; writes, for each text, the token
ids the model's tokenizer gives it (beginning-of-sequence token first, as the server adds it), each token's bytes
(hex), and each token's log-probability given everything before it (the first, the BOS, has none), with the top-k
alternatives at each position (their bytes in hex, and log-probabilities). Run it with the python that
engines/llama_cpp_python/build.sh prints.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from llama_cpp import Llama


def main() -> None:
    job = json.load(sys.stdin)
    # `type_k` / `type_v`: the KV cache's ggml type, as the server under test is given it (0: float32).
    kv = {key: job[key] for key in ("type_k", "type_v") if key in job}
    llm = Llama(model_path=job["model"], n_ctx=job["n_ctx"], logits_all=True, n_threads=2, verbose=False, **kv)
    out = []
    for text in job["texts"]:
        tokens = llm.tokenize(text.encode(), add_bos=True, special=False)
        llm.reset()
        llm.eval(tokens)
        # Row i of the scores is the distribution over the token after position i, in float32 as llama.cpp keeps it.
        logprobs = Llama.logits_to_logprobs(np.asarray(llm.scores[: len(tokens)], dtype=np.float32))
        positions = []
        for i in range(1, len(tokens)):
            row = logprobs[i - 1]
            top = np.argsort(-row, kind="stable")[: job["top_k"]]
            positions.append(
                {
                    "logprob": float(row[tokens[i]]),
                    "top": [[llm.detokenize([int(t)]).hex(), float(row[t])] for t in top],
                }
            )
        out.append(
            {
                "tokens": tokens,
                "bytes": [llm.detokenize([t]).hex() for t in tokens],
                "positions": positions,
            }
        )
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
