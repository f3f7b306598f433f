"""Per-transport translation costs: lower and lift of a small chat exchange, and the whole lift (parsing
included) of a 2,000-token response with top-20 logprobs, against a bare `orjson.loads` of the same bytes: the
Python builders and the native fast path (`native/`, `modelir.logprobs.native`) side by side, in interleaved rounds."""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
from collections.abc import Callable

import orjson
from modelir import build_request
from modelir.logprobs import native
from modelir.server.app import tune_gc
from modelir.transports.base import HttpResponse
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.openai.completions import OpenAICompletions
from modelir.transports.openai.responses import OpenAIResponses
from modelir.transports.vllm import VLLM
from timing import median_seconds

WORDS = ["the", " cat", " sat", " on", " mat", ",", " and", " é", "\n", " 42"]


def _entries(tokens: int, top_k: int, rng: random.Random) -> list[dict]:
    def entry(token: str) -> dict:
        return {"token": token, "logprob": -rng.random() * 5, "bytes": list(token.encode())}

    out = []
    for _ in range(tokens):
        item = entry(rng.choice(WORDS))
        item["top_logprobs"] = [entry(rng.choice(WORDS) + str(j)) for j in range(top_k)]
        out.append(item)
    return out


def chat_body(tokens: int, top_k: int) -> bytes:
    content = _entries(tokens, top_k, random.Random(0)) if tokens else None
    text = "".join(e["token"] for e in content) if content else "Hello there!"
    return orjson.dumps(
        {
            "id": "chatcmpl-b",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": {"content": content} if content else None,
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": max(tokens, 3), "total_tokens": 5 + max(tokens, 3)},
        }
    )


def responses_body(tokens: int, top_k: int) -> bytes:
    content = _entries(tokens, top_k, random.Random(0)) if tokens else []
    text = "".join(e["token"] for e in content) if content else "Hello there!"
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": content}
    return orjson.dumps(
        {
            "id": "resp_b",
            "object": "response",
            "status": "completed",
            "model": "m",
            "output": [
                {"type": "message", "id": "msg_b", "status": "completed", "role": "assistant", "content": [part]}
            ],
            "usage": {"input_tokens": 5, "output_tokens": max(tokens, 3), "total_tokens": 5 + max(tokens, 3)},
        }
    )


def completions_body(tokens: int, top_k: int) -> bytes:
    rng = random.Random(0)
    logprobs = None
    text = "Hello there!"
    if tokens:
        toks = [rng.choice(WORDS) for _ in range(tokens)]
        logprobs = {
            "tokens": toks,
            "token_logprobs": [-rng.random() * 5 for _ in toks],
            "top_logprobs": [{rng.choice(WORDS) + str(j): -rng.random() * 5 for j in range(top_k)} for _ in toks],
            "text_offset": list(range(tokens)),
        }
        text = "".join(toks)
    return orjson.dumps(
        {
            "id": "cmpl-b",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": max(tokens, 3), "total_tokens": 5 + max(tokens, 3)},
        }
    )


CASES = [
    ("openai_chat", OpenAIChat(provider_model="m"), "chat", chat_body),
    ("openai_responses", OpenAIResponses(provider_model="m"), "chat", responses_body),
    ("openai_completions", OpenAICompletions(provider_model="m"), "prompt", completions_body),
    ("vllm (chat)", VLLM(provider_model="m"), "chat", chat_body),
    ("vllm (completions)", VLLM(provider_model="m"), "prompt", completions_body),
]


def _measure(name: str, transport, kind: str, make_body, repeat: int) -> list[tuple[str, str, str]]:
    if kind == "chat":
        small = build_request("m", messages=[("system", "Be brief."), ("user", "Hello!")], max_output_tokens=16)
        big = build_request("m", messages=[("user", "Hello!")], top_logprobs=20)
    else:
        small = build_request("m", prompt="Hello!", max_output_tokens=16)
        big = build_request("m", prompt="Hello!", top_logprobs=5)
    small_body, big_body = make_body(0, 0), make_body(2000, 20)
    small_answer = HttpResponse(200, {}, small_body)
    big_answer = HttpResponse(200, {}, big_body)
    t_lower = median_seconds(lambda: [transport.lower(small, stream=False) for _ in range(100)], repeat) / 100
    t_lift = median_seconds(lambda: [transport.lift(small, small_answer) for _ in range(100)], repeat) / 100
    gc.collect()
    sides = {"loads": lambda: orjson.loads(big_body), "python": _with_native(False, transport.lift, big, big_answer)}
    if native._ext is not None:
        sides["native"] = _with_native(True, transport.lift, big, big_answer)
    times, ratios = rotated(sides, "loads", repeat)
    lift = f"python {times['python'] * 1e3:.1f} ms"
    ratio = f"python {ratios['python']:.2f}x"
    if "native" in times:
        lift += f" / native {times['native'] * 1e3:.1f} ms"
        ratio += f" / native {ratios['native']:.2f}x"
    else:
        ratio += " / native not built"
    return [
        (
            f"{name}: small {'chat' if kind == 'chat' else 'prompt'} lower / lift",
            f"{t_lower * 1e6:.1f} us / {t_lift * 1e6:.1f} us",
            "reported",
        ),
        (
            f"{name}: lift of 2,000 x top-20 ({len(big_body) / 1e6:.2f} MB), GC as served",
            f"{lift} vs orjson.loads {times['loads'] * 1e3:.1f} ms",
            f"{ratio} (target <= 0.6x)",
        ),
    ]


def _with_native(on: bool, fn: Callable, *args: object) -> Callable[[], object]:
    """`fn(*args)` with the native fast path turned on or off (`MODELIR_NATIVE`) for that call."""

    def call() -> object:
        os.environ["MODELIR_NATIVE"] = "1" if on else "0"
        try:
            return fn(*args)
        finally:
            os.environ.pop("MODELIR_NATIVE", None)

    return call


def rotated(sides: dict[str, Callable[[], object]], baseline: str, repeat: int) -> tuple[dict, dict]:
    """Each side once per round, the order rotating each round, `repeat` rounds.

    Returns (median seconds per side, median per-round ratio of each side to `baseline`): every ratio's two sides
    ran in the same round, under the same machine conditions.
    """
    names = list(sides)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for round_index in range(repeat):
        shift = round_index % len(names)
        took = {}
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            sides[name]()
            took[name] = time.perf_counter() - start
        for name in names:
            seconds[name].append(took[name])
            ratios[name].append(took[name] / took[baseline])
    return {n: statistics.median(v) for n, v in seconds.items()}, {n: statistics.median(v) for n, v in ratios.items()}


def run(repeat: int = 15) -> list[tuple[str, str, str]]:
    tune_gc()  # the settings `modelir serve` runs with
    return [row for case in CASES for row in _measure(*case, repeat)]
