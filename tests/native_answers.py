"""Every native answer we have, as (where it came from, the `native_fields` section that accounts it, its payloads):
the golden fixtures, and the shared real recordings (`../shared/wire`, skipped when absent)."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from modelir.conformance.runner import request_that_runs
from modelir.registry import build_transport
from modelir.transports.base import HttpTransport

from tests.recordings import WIRE, cassette, parse_sse, vercel_chunks

FIXTURES = Path(__file__).resolve().parents[1] / "conformance" / "fixtures"


@dataclass(frozen=True)
class Answer:
    source: str
    section: str
    payloads: tuple[bytes, ...]  # one unary body, or a stream's event data in order
    stream: bool = False


def _fixture_answers(path: Path) -> Iterator[Answer]:
    fixture = json.loads(path.read_text())
    source = f"{path.parent.name}/{path.name}"
    transport = build_transport(path.parent.name, fixture.get("transport_options", {}))
    assert isinstance(transport, HttpTransport)
    if fixture.get("operation") == "tokenize":
        sent = fixture.get("expected_http_requests", [])
        for native, answer in zip(sent, fixture.get("http_responses", []), strict=False):
            kind = "detokenize" if native["path"].endswith("detokenize") else "tokenize"
            yield Answer(source, transport.native_fields(None, kind), (_body(answer),))
        return
    answer = fixture.get("http_response")
    if answer is None or "request" not in fixture:
        return
    if fixture.get("operation") == "embed":  # IR 1.1: the embedding endpoint's own section
        kind = "error" if answer.get("status", 200) >= 400 else "embed"
        yield Answer(source, transport.native_fields(None, kind), (_body(answer),))
        return
    request = request_that_runs(fixture)
    if answer.get("status", 200) >= 400:
        yield Answer(source, transport.native_fields(None, "error"), (_body(answer),))
    elif fixture.get("mode") == "stream":
        events = tuple(e["data"].encode() for e in fixture.get("stream_events", []))
        yield Answer(source, transport.native_fields(request, "stream"), events, stream=True)
    else:
        yield Answer(source, transport.native_fields(request, "unary"), (_body(answer),))


def _body(answer: dict) -> bytes:
    if "body_text" in answer:
        return str(answer["body_text"]).encode()
    return json.dumps(answer.get("body")).encode()


def fixture_answers() -> list[Answer]:
    return [a for path in sorted(FIXTURES.glob("*/*.json")) for a in _fixture_answers(path)]


# ---- the shared recordings --------------------------------------------------------------------------------------

# folder -> (unary section, stream section, error section) of its plain files; cassettes go by their URI.
_FOLDERS = {
    "anthropic_messages": "anthropic_messages",
    "gemini": "google_genai",
    "openai_chat": "openai_chat",
    "openai_completions": "openai_completions",
    "openai_responses": "openai_responses",
}
_BY_URI = (  # (URI fragment, wire): the first that matches decides; else the folder's wire
    ("/api/chat", "ollama.chat"),
    ("/api/generate", "ollama.generate"),
    ("/chat/completions", "openai_chat"),
    ("localhost:8000/v1/completions", "vllm.completions"),
)


def _section(wire: str, kind: str) -> str:
    """`openai_chat` + stream -> `openai_chat.stream`; `ollama.chat` + stream -> `ollama.chat_stream`."""
    if "." in wire:
        return {"unary": wire, "stream": f"{wire}_stream"}.get(kind, f"{wire.split('.')[0]}.{kind}")
    return f"{wire}.{kind}"


# wire -> a fragment every URI of its generation endpoint holds (other calls in a cassette are not lifted by us)
_ENDPOINTS = {
    "openai_chat": "/chat/completions",
    "openai_responses": "/responses",
    "anthropic_messages": "/messages",
    "google_genai": "generatecontent",  # `generateContent` and `streamGenerateContent`
}


def _cassette_answers(path: Path, wire: str) -> Iterator[Answer]:
    for exchange in cassette(path):
        endpoint = _ENDPOINTS.get(wire, "")
        if exchange.uri and (endpoint not in exchange.uri.lower() or "count_tokens" in exchange.uri):
            continue  # not a generation (files, vector stores, token counts): no lift of ours reads it
        wire = next((w for fragment, w in _BY_URI if fragment in exchange.uri), wire)
        source = f"{path.parent.name}/{path.name}"
        if exchange.status >= 400:
            yield Answer(source, _section(wire, "error"), (exchange.body,))
        elif exchange.sse is not None:
            yield Answer(source, _section(wire, "stream"), tuple(d.encode() for _, d in exchange.sse), stream=True)
        elif "ndjson" in exchange.headers.get("content-type", ""):
            lines = tuple(line.encode() for line in exchange.body.decode().splitlines() if line.strip())
            yield Answer(source, _section(wire, "stream"), lines, stream=True)
        else:
            yield Answer(source, _section(wire, "unary"), (exchange.body,))


def _file_answers(path: Path, wire: str) -> Iterator[Answer]:
    source = f"{path.parent.name}/{path.name}"
    if path.name.endswith(".chunks.jsonl"):
        events = tuple(d.encode() for _, d in vercel_chunks(path, done=False))
        yield Answer(source, _section(wire, "stream"), events, stream=True)
    elif path.name.endswith(".sse.txt"):
        events = tuple(d.encode() for _, d in parse_sse(path.read_text()))
        yield Answer(source, _section(wire, "stream"), events, stream=True)
    elif path.suffix == ".json":
        body = path.read_bytes()
        kind = "error" if b'"error"' in body[:40] else "unary"
        yield Answer(source, _section(wire, kind), (body,))


_LLAMA = (  # name prefix -> section
    ("completion__stream", "llamacpp.completion_stream"),
    ("completion__", "llamacpp.completion"),
    ("tokenize__", "llamacpp.tokenize"),
    ("detokenize__", "llamacpp.detokenize"),
    ("v1_models", "llamacpp.models"),
    ("v1_chat_completions__", "llamacpp.chat"),
    ("error__", "llamacpp.error"),
)


def _llama_answers(folder: Path) -> Iterator[Answer]:
    index = (folder / "INDEX.txt").read_text().splitlines() if (folder / "INDEX.txt").exists() else []
    statuses = {line.split()[0]: int(line.split()[1]) for line in index if len(line.split()) > 1}
    for response in sorted(folder.glob("*.response.*")):
        name = response.name.split(".response.")[0]
        if response.name.endswith(".headers"):
            continue
        if name.startswith("error__") and statuses.get(name, 400) < 400:
            name = name.removeprefix("error__").replace("v1_chat_", "v1_chat_completions__")
        section = next((s for prefix, s in _LLAMA if name.startswith(prefix)), None)
        if section is None:
            continue  # /props, /slots, /health, /apply-template, legacy /v1/completions: no lift of ours reads them
        source = f"llama_cpp/{response.name}"
        if response.suffix == ".sse":
            events = tuple(d.encode() for _, d in parse_sse(response.read_text()))
            stream = section if section.endswith("_stream") or section == "llamacpp.error" else f"{section}_stream"
            yield Answer(source, stream, events, stream=True)
        else:
            yield Answer(source, section, (response.read_bytes(),))


def _sglang_answers(folder: Path) -> Iterator[Answer]:
    for path in sorted(folder.glob("*.json")):
        excerpt = json.loads(path.read_text())
        body = ast.literal_eval(excerpt["response_python_repr_verbatim"])
        yield Answer(f"sglang/{path.name}", "sglang.unary", (json.dumps(body).encode(),))


def recorded_answers() -> list[Answer]:
    """Every shared recording's answers; empty when `../shared/wire` is not here."""
    if not WIRE.is_dir():
        return []
    out: list[Answer] = []
    for folder, wire in _FOLDERS.items():
        for path in sorted((WIRE / folder).rglob("*")):
            if path.suffix == ".yaml":
                out.extend(_cassette_answers(path, wire))
            elif path.is_file():
                out.extend(_file_answers(path, wire))
    for folder, wire in (("ollama", "ollama.chat"), ("vllm", "vllm.completions")):
        for path in sorted((WIRE / folder).glob("*.yaml")):
            out.extend(_cassette_answers(path, wire))
    out.extend(_llama_answers(WIRE / "llama_cpp"))
    out.extend(_sglang_answers(WIRE / "sglang"))
    return out
