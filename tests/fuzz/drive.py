"""Drives mutated native answers through `Model` and counts every exception that is not a typed `ModelError`.

Each input is one conformance fixture's exchange with its answer mutated (`mutate.py`). The exchange runs the way a
caller runs it: `Model.arun`, `Model.arun_streamed` (stream lifter, `close()`, the shared accumulator) or
`Model.atokenize_request`, over the real executor with an `httpx.MockTransport` as the network; every error that
comes out is also mapped to a `google.rpc.Status` the way the server does. Anything other than a `ModelError` is an
untyped escape, recorded with the innermost modelir frame it came from. A wrong-shape success
(`Report.wrong_shape_successes`) is an answer of the wrong shape lifted with no soft error: bytes that are not UTF-8 (no
JSON answer has them), or a reshaped body or event lifted with no output at all where the unmutated answer had output
(a body the lift did not understand, taken as an empty answer).

    python -m tests.fuzz --seconds 300 [--seed N] [--transport NAME]    # `make fuzz`
"""

from __future__ import annotations

import asyncio
import random
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from google.protobuf import json_format
from modelir import Model, errors
from modelir.conformance.runner import request_that_runs
from modelir.errors import rich_status
from modelir.http.executor import Executor
from modelir.http.retry import RetryPolicy
from modelir.registry import build_transport
from modelir.v1 import embedding_pb2, service_pb2

from tests.fuzz import accounted, mutate

FIXTURES = Path(__file__).resolve().parents[2] / "conformance" / "fixtures"
# One attempt and no waiting: a mutated 5xx or 429 must come out typed, not be retried for seconds.
_NO_RETRY = RetryPolicy(max_attempts=1, backoff_base=0.0, backoff_max=0.0, retry_after_max=0.0)


@dataclass(slots=True)
class Exchange:
    """One positive fixture, ready to replay: how to build the transport, the request, and the native answer."""

    transport: str
    case: str
    options: dict[str, Any]
    kind: str  # "unary", "stream", "tokenize" or "embed"
    request: Any
    answers: list[dict[str, Any]]  # unary/tokenize: the HTTP answers in order
    events: list[dict[str, str]] = field(default_factory=list)
    interrupted: bool = False


@dataclass(slots=True)
class Escape:
    transport: str
    case: str
    site: str
    error: str


@dataclass(slots=True)
class Report:
    seed: int
    inputs: int = 0
    typed: int = 0
    succeeded: int = 0
    escapes: list[Escape] = field(default_factory=list)
    # Lifted answers with a native member neither read, kept, declared nor warned about (`accounted.py`).
    dropped: list[Escape] = field(default_factory=list)
    # Mutated answers of the wrong shape lifted with no soft error (see the module's docstring).
    wrong_shape_successes: list[Escape] = field(default_factory=list)
    # Inputs lifted, by transport: a transport with none is not being fuzzed at all (its requests refused before
    # any answer is read, say), however many inputs it was given.
    lifted_by_transport: Counter[str] = field(default_factory=Counter)

    def sites(self) -> Counter[str]:
        return Counter(f"{e.site}: {e.error.split(':')[0]}" for e in self.escapes)

    def summary(self) -> str:
        lines = [
            f"fuzz seed {self.seed}: {self.inputs} inputs, {self.succeeded} lifted, {self.typed} typed errors, "
            f"{len(self.escapes)} untyped escapes at {len(self.sites())} sites, "
            f"{len(self.dropped)} answers with a member silently dropped, "
            f"{len(self.wrong_shape_successes)} wrong-shape successes"
        ]
        lines += [f"  dropped  {d.transport}/{d.case}: {d.error[:200]}" for d in self.dropped[:10]]
        for wrong in self.wrong_shape_successes[:40]:
            lines.append(f"  wrong-shape success  {wrong.transport}/{wrong.case}: {wrong.error[:600]}")
        for site, count in self.sites().most_common(40):
            example = next(e for e in self.escapes if f"{e.site}: {e.error.split(':')[0]}" == site)
            lines.append(f"  {count:5d}  {site}   e.g. {example.transport}/{example.case}: {example.error[:160]}")
        return "\n".join(lines)


def load_exchanges(transport: str | None = None) -> list[Exchange]:
    """Every positive fixture (unary, stream, error and tokenize) of every transport with HTTP fixtures."""
    out = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        name = path.parent.name
        if transport and name != transport:
            continue
        fixture = orjson.loads(path.read_bytes())
        if "expected_rejection" in fixture:
            continue
        options = fixture.get("transport_options", {})
        if fixture.get("operation") == "tokenize":
            request = json_format.Parse(orjson.dumps(fixture["tokenize_request"]), service_pb2.TokenizeRequest())
            out.append(Exchange(name, path.stem, options, "tokenize", request, fixture["http_responses"]))
            continue
        if fixture.get("operation") == "embed":  # IR 1.1: the embedding lift, fed the same mutations
            request = json_format.Parse(orjson.dumps(fixture["request"]), embedding_pb2.EmbedRequest())
            out.append(Exchange(name, path.stem, options, "embed", request, [fixture["http_response"]]))
            continue
        if "token_prompt_rounds" in fixture and "http_response" not in fixture:
            continue  # a token-in conversation refused after its renders: there is no generation answer to mutate
        request = request_that_runs(fixture)  # a token-in conversation's answer is its token-id request's
        if fixture.get("mode") == "stream":
            answer = fixture.get("http_response", {"status": 200})
            out.append(
                Exchange(
                    name,
                    path.stem,
                    options,
                    "stream",
                    request,
                    [answer],
                    fixture.get("stream_events", []),
                    fixture.get("stream_end") == "interrupted",
                )
            )
        else:
            out.append(Exchange(name, path.stem, options, "unary", request, [fixture["http_response"]]))
    return out


def _body(answer: dict[str, Any]) -> bytes:
    if "body_text" in answer:
        return answer["body_text"].encode()
    if "body" in answer:
        return orjson.dumps(answer["body"])
    return b""


class _BrokenAfter(httpx.AsyncByteStream):
    """A body that breaks (connection reset) after its bytes, as a cut stream does."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def __aiter__(self):
        if self._data:
            yield self._data
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    async def aclose(self) -> None:
        return None


def _wire(text: str) -> bytes:
    """Event text as bytes: escaped raw bytes (`mutate_events`) back as they were, other lone surrogates as such."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")


def _sse(events: list[dict[str, str]], ndjson: bool) -> bytes:
    if ndjson:
        return b"".join(_wire(e.get("data", "")) + b"\n" for e in events)
    chunks = []
    for event in events:
        text = ""
        if event.get("event"):
            text += f"event: {event['event']}\n"
        for line in event.get("data", "").split("\n"):
            text += f"data: {line}\n"
        chunks.append(_wire(text) + b"\n")
    return b"".join(chunks)


def unmutated(exchange: Exchange) -> list[httpx.Response]:
    """The fixture's own answers, as `mutated_inputs` serves them before mutating."""
    if exchange.kind == "stream":
        answer = exchange.answers[0]
        headers = {"content-type": "text/event-stream", **answer.get("headers", {})}
        data = _sse(exchange.events, exchange.transport == "ollama")
        stream = _BrokenAfter(data) if exchange.interrupted else None
        if stream is not None:
            return [httpx.Response(answer.get("status", 200), headers=headers, stream=stream)]
        return [httpx.Response(answer.get("status", 200), headers=headers, content=data)]
    return [
        httpx.Response(a.get("status", 200), headers=dict(a.get("headers", {})), content=_body(a))
        for a in exchange.answers
    ]


def mutated_inputs(rng: random.Random, exchange: Exchange) -> Iterator[tuple[list[httpx.Response], str]]:
    """Endless mutated answers for one exchange: (the HTTP responses to serve in order, what was mutated)."""
    while True:
        answers = []
        what = []
        if exchange.kind == "stream":
            answer = exchange.answers[0]
            status = answer.get("status", 200)
            headers = {"content-type": "text/event-stream", **answer.get("headers", {})}
            events = exchange.events
            interrupted = exchange.interrupted
            roll = rng.random()
            if roll < 0.65:
                events, kind = mutate.mutate_events(rng, events)
                what.append(f"events:{kind}")
            elif roll < 0.75:
                interrupted = True
                events = events[: rng.randrange(len(events) + 1)]
                what.append("cut")
            elif roll < 0.85:
                headers = mutate.mutate_headers(rng, headers)
                what.append("headers")
            else:
                status = rng.choice((400, 404, 429, 500, 503, 529))
                what.append(f"status {status}")
            ndjson = exchange.transport == "ollama"
            data = _sse(events, ndjson)
            if status < 400 and not _utf8(data):
                what.append("not-utf8")
            if status >= 400:
                answers.append(httpx.Response(status, headers=headers, content=mutate.mutate_bytes(rng, data)))
            elif interrupted:
                answers.append(httpx.Response(status, headers=headers, stream=_BrokenAfter(data)))
            else:
                answers.append(httpx.Response(status, headers=headers, content=data))
        else:
            target = rng.randrange(len(exchange.answers))
            for index, answer in enumerate(exchange.answers):
                status = answer.get("status", 200)
                headers = dict(answer.get("headers", {}))
                body = _body(answer)
                if index == target:
                    roll = rng.random()
                    if roll < 0.7:
                        body = mutate.mutate_body(rng, answer.get("body"), body)
                        what.append("body")
                    elif roll < 0.85:
                        headers = mutate.mutate_headers(rng, headers)
                        body = mutate.mutate_body(rng, answer.get("body"), body) if rng.random() < 0.5 else body
                        what.append("headers")
                    else:
                        status = rng.choice((200, 400, 401, 404, 408, 429, 500, 503, 529))
                        what.append(f"status {status}")
                if index == target and status < 400 and not _utf8(body):
                    what.append("not-utf8")
                answers.append(httpx.Response(status, headers=headers, content=body))
        yield answers, "+".join(what)


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _site(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/modelir/" in f.filename]
    if not frames:
        return "outside modelir"
    frame = frames[-1]
    return f"{frame.filename.split('/modelir/')[-1]}:{frame.lineno} {frame.name}"


def _reshaped(what: str) -> bool:
    """Whether a mutation changed the shape of what arrived (a body or an event's data), not only which events
    arrived (a stream with its only content event dropped is a well-formed empty answer)."""
    return not any(kind in what for kind in ("events:dropped", "events:duplicated", "events:swapped", "events:cut"))


def _has_output(response: Any) -> bool:
    """Whether a response carries anything a caller could use: a part, logprobs, scores, token ids, usage, or a
    finish reason (a blocked answer with no content is an answer: its reason is what the caller reads)."""
    return bool(
        any(
            choice.message.parts
            or choice.sampled_tokens.token_ids
            or choice.HasField("logprobs")
            or choice.finish_reason
            for choice in response.choices
        )
        or response.input_scores
        or response.prompt_token_ids
        or response.usage.output_token_count
    )


async def _one(exchange: Exchange, answers: list[httpx.Response]) -> str:
    """Run one input; return "clean" (a response without soft errors), "soft" (with them), "empty" (without output
    or errors), "typed", or what it dropped silently ("dropped: ..."); or raise what escaped."""
    queue = list(answers)

    def handler(_request: httpx.Request) -> httpx.Response:
        return queue.pop(0) if queue else httpx.Response(500, content=b"no more answers")

    transport = build_transport(exchange.transport, exchange.options)
    executor = Executor("http://fuzz.invalid", transport=httpx.MockTransport(handler), retry=_NO_RETRY)
    # Named as the fixture's request names its model: a request naming another model is refused before any I/O,
    # and the native answer would never be lifted.
    model = Model(transport, name=exchange.request.model or None, executor=executor, default_timeout=5.0)
    response = None
    try:
        if exchange.kind == "tokenize":
            await model.atokenize_request(exchange.request)
        elif exchange.kind == "embed":
            await model.aembed(exchange.request)
        else:
            stream = exchange.kind == "stream"
            run = model.arun_streamed if stream else model.arun
            response = await run(exchange.request)
            if dropped := accounted.silently_dropped(transport, exchange.request, answers[0], response, stream=stream):
                return f"dropped: {', '.join(dropped)}"
    except errors.ModelError as exc:
        rich_status.to_status(exc)  # the server maps every error: that must not raise either
        exc.to_response_error()
        return "typed"
    finally:
        await executor.aclose()
    if response is not None and response.errors:
        return "soft"
    if response is not None and not _has_output(response):
        return "empty"
    return "clean"


def run(seed: int, *, seconds: float, max_inputs: int | None = None, transport: str | None = None) -> Report:
    """Fuzz round-robin over every exchange until the time or input budget is spent."""
    rng = random.Random(seed)
    exchanges = load_exchanges(transport)
    report = Report(seed)
    generators = [(exchange, mutated_inputs(random.Random(rng.random()), exchange)) for exchange in exchanges]
    stop = time.monotonic() + seconds
    with_output: set[int] = set()  # the exchanges whose own answer lifts with output

    async def loop() -> None:
        for index, exchange in enumerate(exchanges):
            try:
                if await _one(exchange, unmutated(exchange)) in ("clean", "soft"):
                    with_output.add(index)
            except Exception:  # the mutated runs report what escapes
                pass
        while True:
            for index, (exchange, inputs) in enumerate(generators):
                if time.monotonic() > stop or (max_inputs is not None and report.inputs >= max_inputs):
                    return
                answers, what = next(inputs)
                report.inputs += 1
                sample = b"|".join(bytes(a.content) for a in answers if isinstance(a.stream, httpx.ByteStream))
                try:
                    outcome = await _one(exchange, answers)
                except Exception as exc:  # what the fuzzer exists to find
                    error = f"{type(exc).__name__}: {exc}"
                    report.escapes.append(Escape(exchange.transport, f"{exchange.case} [{what}]", _site(exc), error))
                    continue
                if ("not-utf8" in what and outcome in ("clean", "empty")) or (
                    outcome == "empty" and index in with_output and _reshaped(what)
                ):
                    report.wrong_shape_successes.append(
                        Escape(exchange.transport, f"{exchange.case} [{what}]", "", repr(sample[:2000]))
                    )
                if outcome == "typed":
                    report.typed += 1
                elif outcome.startswith("dropped"):
                    report.dropped.append(Escape(exchange.transport, f"{exchange.case} [{what}]", "", outcome))
                else:
                    report.succeeded += 1
                    report.lifted_by_transport[exchange.transport] += 1

    asyncio.run(loop())
    return report
