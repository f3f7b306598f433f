"""Loading the real recordings in ../shared/wire (never copied into this repository; tests skip without them)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

# `../shared` beside the checkout; MODELIR_SHARED points elsewhere (a git worktree outside the project's folder).
WIRE = Path(os.environ.get("MODELIR_SHARED") or Path(__file__).resolve().parents[1].parent / "shared") / "wire"


@dataclass
class Exchange:
    source: str
    request_body: dict[str, Any] | None
    status: int
    headers: dict[str, str]
    body: bytes  # unary body ('' for streams)
    sse: list[tuple[str, str]] | None  # (event, data) pairs for streams
    uri: str = ""  # the request's URI, when the cassette has it


def wire_dir(protocol: str) -> Path:
    folder = WIRE / protocol
    if not folder.is_dir():
        pytest.skip(f"the shared recordings are not here ({folder})")
    return folder


def parse_sse(text: str) -> list[tuple[str, str]]:
    """A minimal SSE split for replaying recordings (the product uses `http.decoding.SseDecoder` on the live wire)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            events.append((name, "\n".join(data)))
    return events


def cassette(path: Path) -> list[Exchange]:
    """pydantic-ai / openllmetry vcrpy cassettes."""
    doc = yaml.safe_load(path.read_text())
    out = []
    for interaction in doc["interactions"]:
        request, response = interaction["request"], interaction["response"]
        body = request.get("parsed_body")
        if body is None and isinstance(request.get("body"), str) and request["body"].startswith("{"):
            body = json.loads(request["body"])
        headers = {k.lower(): (v[0] if isinstance(v, list) else v) for k, v in (response.get("headers") or {}).items()}
        status, uri = response["status"]["code"], str(request.get("uri") or "")
        if "parsed_body" in response:
            parsed = json.dumps(response["parsed_body"]).encode()
            out.append(Exchange(path.name, body, status, headers, parsed, None, uri))
            continue
        raw = response.get("body", {})
        text = raw.get("string", "") if isinstance(raw, dict) else str(raw)
        if "text/event-stream" in headers.get("content-type", ""):
            out.append(Exchange(path.name, body, status, headers, b"", parse_sse(text), uri))
        else:
            out.append(Exchange(path.name, body, status, headers, text.encode(), None, uri))
    return out


def vercel_chunks(path: Path, *, done: bool = True) -> list[tuple[str, str]]:
    """vercel/ai chunk files: one data payload a line; the recorder stripped event names and [DONE]."""
    events = [("", line) for line in path.read_text().splitlines() if line.strip()]
    return [*events, ("", "[DONE]")] if done else events
