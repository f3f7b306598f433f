"""Runs every fault of the fault-injecting upstream through `Model` and through the gRPC server, unary and streamed.

Each case records how the call ended (a response, with its soft error if any, or the exception), how long it took,
how many requests reached the upstream, and whether output delivered before a failure is reachable (a soft error
keeping the text, or the exception's `partial`). `tests/test_faults.py` asserts the invariants on this table;
`python -m tests.faults` prints it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from modelir import Model, build_request, errors
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.limiter import Limiter
from modelir.remote import RemoteModel
from modelir.server import build_server
from modelir.transports.anthropic.messages import AnthropicMessages
from modelir.transports.google.genai import GoogleGenAI
from modelir.transports.ollama import Ollama
from modelir.transports.openai.chat import OpenAIChat
from modelir.v1 import errors_pb2

from tests.faults.upstream import FAULTS, Upstream

# transport name -> (class, the path prefix its base URL needs on this upstream)
TRANSPORTS = {
    "openai_chat": (OpenAIChat, "/v1"),
    "anthropic_messages": (AnthropicMessages, ""),
    "google_genai": (GoogleGenAI, ""),
    "ollama": (Ollama, ""),
}
# Seconds each call may take; the slow faults exceed it on purpose. Wide enough that a healthy call through gRPC
# still fits on a loaded machine (2 s did not, at a load average of 10 on 2 cores).
DEADLINE = 5.0
# Quick retries, so a retried fault shows up in the hit count without slowing the suite.
RETRY = RetryPolicy(max_attempts=3, backoff_base=0.05, backoff_max=0.1, retry_after_max=1.5)


@dataclass(slots=True)
class Outcome:
    transport: str
    fault: str
    mode: str  # "unary" or "stream"
    path: str  # "model" or "grpc"
    ended: str  # "ok", "soft:<REASON>", "raised:<ErrorReason>", "untyped:<exception type>"
    seconds: float
    upstream_hits: int
    partial_text: str
    message: str = ""

    def row(self) -> str:
        return (
            f"{self.transport:19s} {self.fault:25s} {self.mode:6s} {self.path:5s} {self.ended:34s} "
            f"{self.seconds:5.2f}s hits={self.upstream_hits} partial={self.partial_text!r} {self.message[:70]}"
        )


def _text(response) -> str:
    return "".join(p.text for c in response.choices for p in c.message.parts if p.WhichOneof("content") == "text")


def _reason(value: int) -> str:
    return errors_pb2.ErrorReason.Name(value).removeprefix("ERROR_REASON_")


def _model(transport: str, fault: str, base_url: str) -> Model:
    cls, prefix = TRANSPORTS[transport]
    executor = Executor(base_url + prefix, retry=RETRY)
    return Model(cls(provider_model=fault), name=f"{transport}-{fault}", executor=executor, limiter=Limiter())


async def _call(model, mode: str) -> tuple[str, str, str]:
    request = build_request(model.name, messages=[("user", "hi")], max_output_tokens=16)
    deadline = time.monotonic() + DEADLINE
    try:
        if mode == "unary":
            response = await model.arun(request, deadline=deadline)
        else:
            from modelir.streams.fold import StreamAccumulator

            accumulator = StreamAccumulator()
            async for event in model.astream(request, deadline=deadline):
                accumulator.add(event)
            response = accumulator.response()
    except errors.ModelError as exc:
        partial = _text(exc.partial) if exc.partial is not None else ""
        return f"raised:{_reason(exc.reason)}", partial, exc.message
    except Exception as exc:  # what the suite exists to find
        return f"untyped:{type(exc).__name__}", "", str(exc)
    if bool(response.errors):
        return f"soft:{_reason(response.errors[0].reason)}", _text(response), response.errors[0].message
    return "ok", _text(response), ""


async def census(faults: list[str] | None = None, transports: list[str] | None = None) -> list[Outcome]:
    """Every (transport, fault, mode, path) case at once: each has its own model, limiter and upstream id."""
    upstream = Upstream()
    base_url = await upstream.start()
    cases = [
        (transport, fault, mode, path)
        for transport in transports or list(TRANSPORTS)
        for fault in faults or list(FAULTS)
        for mode in ("unary", "stream")
        for path in ("model", "grpc")
    ]
    models = {case: _model(case[0], f"{case[1]}~{index}", base_url) for index, case in enumerate(cases)}
    server, port = await build_server({m.name: m for m in models.values()}, "127.0.0.1:0")
    await server.start()

    gate = asyncio.Semaphore(24)  # enough to overlap the slow cases, few enough to keep each case's timing honest

    async def one(case: tuple[str, str, str, str]) -> Outcome:
        async with gate:
            return await _one(case)

    async def _one(case: tuple[str, str, str, str]) -> Outcome:
        transport, fault, mode, path = case
        model = models[case]
        target = RemoteModel(f"127.0.0.1:{port}", model.name) if path == "grpc" else model
        started = time.monotonic()
        try:
            ended, partial, message = await _call(target, mode)
        finally:
            if isinstance(target, RemoteModel):
                await target.aclose()
        seconds = time.monotonic() - started
        hits = upstream.hits[model.transport.provider_model]
        return Outcome(transport, fault, mode, path, ended, seconds, hits, partial, message)

    try:
        return list(await asyncio.gather(*(one(case) for case in cases)))
    finally:
        await server.stop(None)
        for model in models.values():
            await model.executor.aclose()
        await upstream.stop()


def main() -> None:
    for outcome in asyncio.run(census()):
        print(outcome.row())


if __name__ == "__main__":
    main()
