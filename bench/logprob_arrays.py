"""How to get packed logprob columns into numpy: which way is cheapest (`python -m bench.logprob_arrays`).

32,768 tokens with top-20 alternatives, as an RL trainer asks for. Each way is timed against `np.asarray` over the
generated repeated field (the way `modelir.reading.view` uses), side by side, as a ratio: absolute times on a shared
machine are noise. The serialized route is timed only up to the bytes `np.frombuffer` would view: it cannot be
cheaper than that, and its varint-packed ids cannot be viewed in place at all.
"""

from __future__ import annotations

import numpy as np
from modelir.reading.view import logprob_arrays
from modelir.v1 import logprobs_pb2

from bench.timing import paired

TOKENS, TOP_K = 32_768, 20


def columns() -> logprobs_pb2.TokenLogprobs:
    rng = np.random.default_rng(0)
    out = logprobs_pb2.TokenLogprobs(top_counts=[TOP_K] * TOKENS)
    out.token_ids.extend(rng.integers(0, 150_000, TOKENS).tolist())
    out.token_logprobs.extend(rng.normal(size=TOKENS).astype(np.float32).tolist())
    out.top_token_ids.extend(rng.integers(0, 150_000, TOKENS * TOP_K).tolist())
    out.top_logprobs.extend(rng.normal(size=TOKENS * TOP_K).astype(np.float32).tolist())
    out.tokens.extend(["x"] * TOKENS)
    out.top_tokens.extend(["y"] * (TOKENS * TOP_K))
    return out


def main(repeat: int = 9) -> None:
    message = columns()
    field = message.top_logprobs

    def asarray() -> object:
        return np.asarray(field, dtype=np.float32)

    ways = {
        "np.fromiter(field)": lambda: np.fromiter(field, dtype=np.float32, count=len(field)),
        "np.array(list(field))": lambda: np.array(list(field), dtype=np.float32),
        "SerializeToString() alone": message.SerializeToString,
        "logprob_arrays() (all columns, dense [T, k])": lambda: logprob_arrays(message),
    }
    print(f"{TOKENS} tokens x top-{TOP_K}: each way against np.asarray(top_logprobs), the ratio of times")
    for name, way in ways.items():
        seconds, baseline, ratio = paired(way, asarray, repeat)
        print(f"  {name:46} {ratio:10.1f}x  ({seconds * 1e3:.2f} ms against {baseline * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
