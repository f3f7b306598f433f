"""The streaming cases: `modelir serve` relaying an instant OpenAI-style SSE upstream of one-token chunks, against
reading that SSE directly; one stream for tokens per second, 16 at once for the server's CPU per token.

Also the time to the first token, through the gateway against reading the SSE directly, from the instant upstream
and from one paced like a real model (a chunk every `PACE_MS`, at `/paced/v1/chat/completions`): the first token
must leave the gateway as soon as it arrives, whatever follows it.

Run alone with `python bench/streams.py` (or through `make bench`; `python bench/streams.py first-token` runs only
the first-token rows); `python bench/streams.py upstream` is the
helper process (it prints `READY <port>`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
CHUNKS = 500
PACE_MS = 20
PACED_CHUNKS = 10  # a paced stream is short: its first token is what is measured


def _sse_body(chunks: int) -> bytes:
    """A whole chat-completions stream: `chunks` one-token content chunks, a finish chunk, a usage chunk, [DONE]."""
    return b"".join(_sse_events(chunks))


def _sse_events(chunks: int) -> list[bytes]:
    """The events of `_sse_body`, one `data:` event each."""

    def event(choices: list, **extra) -> bytes:
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "bench-model",
            "choices": choices,
            **extra,
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    body = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    body += [event([{"index": 0, "delta": {"content": f" t{i % 10}"}, "finish_reason": None}]) for i in range(chunks)]
    body.append(event([{"index": 0, "delta": {}, "finish_reason": "length"}]))
    body.append(event([], usage={"prompt_tokens": 5, "completion_tokens": chunks, "total_tokens": chunks + 5}))
    body.append(b"data: [DONE]\n\n")
    return body


def upstream() -> None:
    """An instant upstream: the whole stream is written at once, as fast as the connection takes it."""
    from aiohttp import web

    body = _sse_body(CHUNKS)
    paced = _sse_events(PACED_CHUNKS)

    async def handle(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()
        return response

    async def handle_paced(request: web.Request) -> web.StreamResponse:
        """The role chunk at once, then one chunk every PACE_MS, as a model decoding at 50 tokens/s sends them."""
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(paced[0])
        for event in paced[1:]:
            await asyncio.sleep(PACE_MS / 1000)
            await response.write(event)
        await response.write_eof()
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        app.router.add_post("/paced/v1/chat/completions", handle_paced)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        print("READY", site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    _uvloop()
    asyncio.run(main())


def _uvloop() -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass


async def _direct(url: str, streams: int) -> tuple[float, int]:
    """Read `streams` SSE streams at once with aiohttp, decoding each event: (seconds, tokens)."""
    import aiohttp

    body = orjson.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True})

    async def one(session: aiohttp.ClientSession) -> int:
        tokens = 0
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as answer:
            pending = b""
            async for data in answer.content.iter_any():
                pending += data
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    payload = event.removeprefix(b"data: ")
                    if payload != b"[DONE]":
                        for choice in orjson.loads(payload)["choices"]:
                            tokens += bool(choice["delta"].get("content"))
        return tokens

    async with aiohttp.ClientSession() as session:
        await one(session)  # warm the connection
        start = time.perf_counter()
        counts = await asyncio.gather(*(one(session) for _ in range(streams)))
        return time.perf_counter() - start, sum(counts)


async def _served(target: str, streams: int, request, pid: int) -> tuple[float, int, int, float]:
    """`streams` StreamGenerate calls at once through the gateway: (seconds, tokens, messages received, the
    gateway's CPU seconds meanwhile)."""
    import grpc
    from gateway import _cpu_seconds
    from modelir.v1 import service_pb2, service_pb2_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.ModelServiceStub(channel)
        message = service_pb2.StreamGenerateRequest(request=request)

        async def one() -> tuple[int, int]:
            tokens = messages = 0
            async for answer in stub.StreamGenerate(message):
                messages += 1
                if answer.event.WhichOneof("event") == "end":
                    tokens = answer.event.end.usage.output_token_count
            return tokens, messages

        await one()
        cpu = _cpu_seconds(pid)
        start = time.perf_counter()
        results = await asyncio.gather(*(one() for _ in range(streams)))
        seconds = time.perf_counter() - start
        return seconds, sum(t for t, _ in results), sum(m for _, m in results), _cpu_seconds(pid) - cpu


async def _direct_first_token(url: str, streams: int) -> list[float]:
    """Seconds from sending to the first content token, for each of `streams` SSE streams read at once directly."""
    import aiohttp

    body = orjson.dumps({"model": "bench-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True})

    async def one(session: aiohttp.ClientSession) -> float:
        start = time.perf_counter()
        first = 0.0
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as answer:
            pending = b""
            async for data in answer.content.iter_any():
                pending += data
                *events, pending = pending.split(b"\n\n")
                for event in events:
                    payload = event.removeprefix(b"data: ")
                    if not first and payload != b"[DONE]":
                        if any(choice["delta"].get("content") for choice in orjson.loads(payload)["choices"]):
                            first = time.perf_counter() - start
        return first

    async with aiohttp.ClientSession() as session:
        await one(session)
        return list(await asyncio.gather(*(one(session) for _ in range(streams))))


async def _served_first_token(target: str, streams: int, request) -> list[float]:
    """Seconds from calling StreamGenerate to the first text delta, for each of `streams` calls at once."""
    import grpc
    from modelir.v1 import service_pb2, service_pb2_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.ModelServiceStub(channel)
        message = service_pb2.StreamGenerateRequest(request=request)

        async def one() -> float:
            start = time.perf_counter()
            first = 0.0
            async for answer in stub.StreamGenerate(message):
                event = answer.event
                if not first and event.WhichOneof("event") == "delta" and event.delta.text:
                    first = time.perf_counter() - start
            return first

        await one()
        return list(await asyncio.gather(*(one() for _ in range(streams))))


def _first_token_rows(url: str, target: str, rounds: int, concurrent: int) -> list:
    """Time to first token, gateway vs direct, each side in turn: fast upstream (1 and `concurrent` streams) and
    paced upstream (1 stream). The figure per round is the median over the streams of that round."""
    from modelir import build_request

    fast_request = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=CHUNKS)
    paced_request = build_request("paced", messages=[("user", "Hello!")], max_output_tokens=PACED_CHUNKS)
    paced_url = url.replace("/v1/", "/paced/v1/", 1)
    cases = [
        ("fast upstream, one stream", url, fast_request, 1),
        (f"fast upstream, {concurrent} streams at once", url, fast_request, concurrent),
        (f"upstream paced at a token every {PACE_MS} ms, one stream", paced_url, paced_request, 1),
    ]
    rows = []
    for label, direct_url, request, streams in cases:
        direct, served = [], []
        for round_index in range(rounds):
            for side in ("direct", "served")[:: 1 if round_index % 2 else -1]:
                if side == "direct":
                    direct.append(statistics.median(asyncio.run(_direct_first_token(direct_url, streams))))
                else:
                    served.append(statistics.median(asyncio.run(_served_first_token(target, streams, request))))
        added = [(s - d) * 1e3 for s, d in zip(served, direct, strict=True)]
        rows.append(
            (
                f"time to first token through the gateway vs directly: {label}",
                f"{statistics.median(served) * 1e3:.2f} vs {statistics.median(direct) * 1e3:.2f} ms",
                f"{statistics.median(added):+.2f} ms (target <= +1 ms); {rounds} rounds "
                f"{min(added):+.2f} to {max(added):+.2f} ms",
            )
        )
    return rows


def run(rounds: int = 7, concurrent: int = 16, only_first_token: bool = False) -> list[tuple[str, str, str]]:
    from gateway import _process
    from modelir import build_request

    _uvloop()
    python = sys.executable
    request = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=CHUNKS)
    with (
        _process([python, str(HERE / "streams.py"), "upstream"], r"READY (\d+)") as (port, _),
        tempfile.NamedTemporaryFile("w", suffix=".yaml") as config,
    ):
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        config.write(
            f"models:\n  bench:\n    transport: openai_chat\n    base_url: http://127.0.0.1:{port}/v1\n"
            "    provider_model: bench-model\n"
            f"  paced:\n    transport: openai_chat\n    base_url: http://127.0.0.1:{port}/paced/v1\n"
            "    provider_model: bench-model\n"
        )
        config.flush()
        serve = [python, "-m", "modelir.cli", "serve", "--config", config.name, "--port", "0"]
        floor = [python, str(HERE / "processes.py"), "floor", url]
        with (
            _process(serve, r"on 127\.0\.0\.1:(\d+)") as (gateway_port, pid),
            _process(floor, r"READY (\d+)") as (floor_port, floor_pid),
        ):
            target, floor_target = f"127.0.0.1:{gateway_port}", f"127.0.0.1:{floor_port}"
            ratios, floor_ratios, direct_rates, served_rates, messages_per_stream = [], [], [], [], []
            cpu_per_token, floor_cpu_per_token = [], []
            for round_index in range(0 if only_first_token else rounds):
                # One stream: tokens per second, each side in turn, the order rotating by round.
                measured = {}
                sides = ("direct", "served", "floor")
                for side in sides[round_index % 3 :] + sides[: round_index % 3]:
                    if side == "direct":
                        seconds, tokens = asyncio.run(_direct(url, 1))
                    elif side == "served":
                        seconds, tokens, messages, _ = asyncio.run(_served(target, 1, request, pid))
                        messages_per_stream.append(messages)
                    else:
                        seconds, tokens, _, _ = asyncio.run(_served(floor_target, 1, request, floor_pid))
                    measured[side] = tokens / seconds
                direct_rates.append(measured["direct"])
                served_rates.append(measured["served"])
                ratios.append(measured["served"] / measured["direct"])
                floor_ratios.append(measured["floor"] / measured["direct"])
                # Sixteen streams at once: the server's CPU per token relayed, modelir's and the floor's in turn.
                for side in ("served", "floor")[:: 1 if round_index % 2 else -1]:
                    at, at_pid = (target, pid) if side == "served" else (floor_target, floor_pid)
                    _, tokens, _, cpu = asyncio.run(_served(at, concurrent, request, at_pid))
                    (cpu_per_token if side == "served" else floor_cpu_per_token).append(cpu / tokens * 1e6)
            first_token = _first_token_rows(url, target, rounds, concurrent)
    if only_first_token:
        return first_token
    cpu_over_floor = [m / f for m, f in zip(cpu_per_token, floor_cpu_per_token, strict=True)]
    return [
        (
            f"one stream of {CHUNKS} one-token chunks through the gateway vs reading the SSE directly",
            f"{statistics.median(served_rates):,.0f} vs {statistics.median(direct_rates):,.0f} tokens/s; "
            f"{statistics.median(messages_per_stream):.0f} gRPC messages per stream",
            f"{statistics.median(ratios):.3f}x direct (target >= 0.3x); {rounds} rounds "
            f"{min(ratios):.3f}-{max(ratios):.3f}",
        ),
        (
            "the same through the floor stream gateway (grpc.aio + aiohttp + orjson, one message per read)",
            f"{statistics.median(floor_ratios):.3f}x direct",
            f"{rounds} rounds {min(floor_ratios):.3f}-{max(floor_ratios):.3f}; modelir at "
            f"{statistics.median(r / f for r, f in zip(ratios, floor_ratios, strict=True)):.2f}x the floor's rate",
        ),
        (
            f"{concurrent} streams of {CHUNKS} chunks at once: gateway CPU per token",
            f"{statistics.median(cpu_per_token):.1f} us (rounds {min(cpu_per_token):.1f}-{max(cpu_per_token):.1f})",
            "target <= 8 us",
        ),
        (
            f"{concurrent} streams at once: the floor stream gateway's CPU per token",
            f"{statistics.median(floor_cpu_per_token):.1f} us "
            f"(rounds {min(floor_cpu_per_token):.1f}-{max(floor_cpu_per_token):.1f})",
            f"modelir at {statistics.median(cpu_over_floor):.2f}x the floor's",
        ),
        *first_token,
    ]


if __name__ == "__main__":
    if sys.argv[1:] == ["upstream"]:
        upstream()
    else:
        sys.path.insert(0, str(HERE))
        for case, measured, ratio in run(only_first_token=sys.argv[1:] == ["first-token"]):
            print(f"{case}  {measured}  |  {ratio}")
