"""modelir benchmarks. Every target is a ratio of two things measured side by side in this one run.

Run with `make bench` (not part of `make test`). See bench/README.md for the cases and targets.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time

import orjson
from modelir import Model, ReferenceModel, build_request
from modelir.logprobs import build as lp
from modelir.v1 import content_pb2, response_pb2
from timing import chained


def openai_chat_body(tokens: int, top_k: int, seed: int = 0) -> bytes:
    """An OpenAI chat completion body with `tokens` logprob entries of `top_k` alternatives, bytes included."""
    rng = random.Random(seed)
    words = ["the", " cat", " sat", " on", " mat", ",", " and", " é", "\n", " 42"]

    def entry(token: str) -> dict:
        return {"token": token, "logprob": -rng.random() * 5, "bytes": list(token.encode())}

    content = []
    for _ in range(tokens):
        chosen = rng.choice(words)
        item = entry(chosen)
        item["top_logprobs"] = [entry(rng.choice(words) + str(j)) for j in range(top_k)]
        content.append(item)
    text = "".join(c["token"] for c in content)
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": {"content": content, "refusal": None},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": tokens + 5},
    }
    return orjson.dumps(body)


def build_response_from_parsed(parsed: dict) -> response_pb2.Response:
    """The dict -> IR part of a lift: choices, message text, columnar logprobs, usage."""
    response = response_pb2.Response(id=parsed["id"], model=parsed["model"])
    for raw in parsed["choices"]:
        choice = response.choices.add(index=raw["index"], raw_finish_reason=raw["finish_reason"])
        choice.message.role = content_pb2.ROLE_ASSISTANT
        choice.message.parts.add(text=raw["message"]["content"])
        if raw.get("logprobs"):
            lp.from_openai_content(raw["logprobs"]["content"], into=choice.logprobs)
    response.usage.input_token_count = parsed["usage"]["prompt_tokens"]
    response.usage.output_token_count = parsed["usage"]["completion_tokens"]
    return response


def bench_logprob_build(repeat: int) -> list[tuple[str, str, str]]:
    body = openai_chat_body(2000, 20)
    rows = []
    defaults = gc.get_threshold()
    for label, gc_mode in (("default GC", "default"), ("GC as `modelir serve` runs it", "served"), ("GC off", "off")):
        if gc_mode == "off":
            gc.disable()
        elif gc_mode == "served":
            gc.set_threshold(100_000, 50, 100)  # what tune_gc() sets (it also freezes the start-up heap)
        try:
            t_build, t_loads, ratio = chained(lambda: orjson.loads(body), build_response_from_parsed, repeat)
        finally:
            gc.enable()
            gc.set_threshold(*defaults)
        rows.append(
            (
                f"2,000 x top-20 Response from parsed JSON ({len(body) / 1e6:.2f} MB), {label}",
                f"build {t_build * 1e3:.1f} ms vs orjson.loads {t_loads * 1e3:.1f} ms",
                f"{ratio:.2f}x (target <= 0.50x)",
            )
        )
    return rows


def bench_reference_calls(seconds: float) -> list[tuple[str, str, str]]:
    model = Model(ReferenceModel())
    small = build_request("reference", messages=[("user", "Hello!")], max_output_tokens=16)
    big = build_request("reference", prompt="x", max_output_tokens=2000, top_logprobs=20, seed=0)

    async def rate(request) -> tuple[float, int]:
        calls = 0
        response = None
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            response = await model.arun(request)
            calls += 1
        tokens = len(response.choices[0].logprobs.token_logprobs) or response.usage.output_token_count
        return calls / (time.perf_counter() - start), tokens

    small_rate, _ = asyncio.run(rate(small))
    big_rate, big_tokens = asyncio.run(rate(big))
    return [
        ("reference arun, small chat (16 tokens)", f"{small_rate:,.0f} calls/s", f"{1e6 / small_rate:.0f} us/call"),
        (
            f"reference arun, {big_tokens:,} tokens x top-20 logprobs",
            f"{big_rate:,.0f} calls/s",
            f"{big_rate / small_rate:.3f}x the small-chat rate",
        ),
    ]


GROUPS = (
    "reference",
    "build",
    "transports",
    "records",
    "cli",
    "inprocess",
    "gateway",
    "workers",
    "telemetry",
    "instructions",
    "streams",
)
MULTI_PROCESS = ("cli", "inprocess", "gateway", "workers", "telemetry", "instructions", "streams")


def _group(group: str, args: argparse.Namespace) -> list[tuple[str, str, str]]:
    seconds = max(args.seconds, 3.0)
    if group == "reference":
        return bench_reference_calls(args.seconds)
    if group == "build":
        return bench_logprob_build(args.repeat)
    if group == "transports":
        import transports

        return transports.run(args.repeat)
    if group == "records":
        import records_reading

        return records_reading.run(args.repeat)
    if group == "cli":
        import cli_startup

        return cli_startup.run(args.repeat)
    if group == "inprocess":
        import inprocess

        return inprocess.run(rounds=args.rounds)
    import gateway

    if group == "gateway":
        return gateway.run(seconds=seconds, rounds=args.rounds)
    if group == "workers":
        return gateway.run_workers(workers=args.workers, seconds=seconds, rounds=args.rounds)
    if group == "telemetry":
        import telemetry

        return telemetry.run(seconds=seconds)
    if group == "instructions":
        import instructions

        return instructions.run()
    import streams

    return streams.run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15, help="timed repetitions per measurement")
    parser.add_argument("--seconds", type=float, default=2.0, help="duration of each throughput case")
    parser.add_argument("--skip-gateway", action="store_true", help="skip the multi-process cases")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the multi-process cases")
    parser.add_argument("--workers", type=int, default=2, help="processes of the `serve --workers` case")
    parser.add_argument(
        "--only", help=f"a comma-separated subset of the groups, in this order: {', '.join(GROUPS)}", default=""
    )
    args = parser.parse_args(argv)
    chosen = [g.strip() for g in args.only.split(",") if g.strip()] or list(GROUPS)
    unknown = set(chosen) - set(GROUPS)
    if unknown:
        parser.error(f"--only: unknown groups {sorted(unknown)}; choose from {', '.join(GROUPS)}")
    if args.skip_gateway:
        chosen = [g for g in chosen if g not in MULTI_PROCESS]
    rows = []
    for group in GROUPS:
        if group in chosen:
            rows += _group(group, args)
    width = max(len(r[0]) for r in rows)
    print(f"{'case'.ljust(width)}  measurement  |  ratio")
    for case, measured, ratio in rows:
        print(f"{case.ljust(width)}  {measured}  |  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
