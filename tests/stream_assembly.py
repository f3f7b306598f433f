"""A native stream assembled into the unary answer its wire would have sent (chat, completions, Responses,
Anthropic, Ollama), so that the folded stream lift can be compared with the unary lift of the same answer.

Written from the providers' streaming references: chat deltas concatenate per choice and tool calls per `index`;
Responses streams end with the whole object; Anthropic blocks build from their start and their deltas, the message
from `message_start` and `message_delta`; Ollama's NDJSON lines concatenate and the last carries the totals.
None when a stream has no unary twin (an error mid-stream, no end).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

_JOINED = ("text", "summary", "data")  # OpenRouter reasoning entries: members that stream in pieces


def _events(payloads: Sequence[bytes]) -> list[Any] | None:
    out = []
    for payload in payloads:
        if payload.strip() == b"[DONE]":
            continue
        try:
            out.append(json.loads(payload))
        except ValueError:
            return None
    return out


def _merge_entry(merged: dict[str, Any], entry: dict[str, Any]) -> None:
    for key, value in entry.items():
        if key in _JOINED and isinstance(value, str) and isinstance(merged.get(key), str):
            merged[key] += value
        elif value is not None or key not in merged:
            merged[key] = value


def chat(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    chunks = _events(payloads)
    if not chunks or any("error" in c for c in chunks):
        return None
    body: dict[str, Any] = {"object": "chat.completion"}
    choices: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    details: dict[int, dict[Any, dict[str, Any]]] = {}
    for chunk in chunks:
        for key, value in chunk.items():
            if key == "choices" or (key == "usage" and not value) or key == "object":
                continue
            body[key] = value
        for raw in chunk.get("choices") or ():
            index = raw.get("index", 0)
            choice = choices.setdefault(
                index, {"index": index, "message": {"role": "assistant"}, "finish_reason": None}
            )
            message = choice["message"]
            for key, value in (raw.get("delta") or {}).items():
                if key in ("content", "refusal", "reasoning_content", "reasoning") and isinstance(value, str):
                    message[key] = (message.get(key) or "") + value
                elif key == "tool_calls":
                    for call in value or ():
                        merged = calls.setdefault(index, {}).setdefault(call.get("index", 0), {"function": {}})
                        for member in ("id", "type"):
                            if call.get(member):
                                merged[member] = call[member]
                        function = call.get("function") or {}
                        if function.get("name"):
                            merged["function"]["name"] = function["name"]
                        merged["function"]["arguments"] = merged["function"].get("arguments", "") + (
                            function.get("arguments") or ""
                        )
                elif key == "annotations":
                    message.setdefault("annotations", []).extend(value or ())
                elif key == "reasoning_details":
                    entries = details.setdefault(index, {})
                    for entry in value or ():
                        _merge_entry(entries.setdefault(entry.get("index", len(entries)), {}), entry)
                elif key != "role" and value is not None:
                    message[key] = value
            for key, value in raw.items():
                if key in ("index", "delta"):
                    continue
                if key == "logprobs" and value:
                    logprobs = choice.setdefault("logprobs", {})
                    for part in ("content", "refusal"):
                        if value.get(part) is not None:
                            logprobs.setdefault(part, []).extend(value[part])
                elif key == "token_ids" and value:
                    choice.setdefault("token_ids", []).extend(value)
                elif value not in (None, {}, []):  # a state (Azure's filter results): its latest that says something
                    choice[key] = value
    for index, choice in choices.items():
        if index in calls:
            choice["message"]["tool_calls"] = [calls[index][k] for k in sorted(calls[index])]
        if index in details:
            choice["message"]["reasoning_details"] = list(details[index].values())
    body["choices"] = [choices[i] for i in sorted(choices)]
    return body


def completions(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    chunks = _events(payloads)
    if not chunks or any("error" in c for c in chunks):
        return None
    body: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        body.update({k: v for k, v in chunk.items() if k != "choices" and not (k == "usage" and not v)})
        for raw in chunk.get("choices") or ():
            index = raw.get("index", 0)
            choice = choices.setdefault(index, {"index": index, "text": "", "finish_reason": None})
            choice["text"] += raw.get("text") or ""
            if raw.get("logprobs"):
                logprobs = choice.setdefault("logprobs", {})
                for key, values in raw["logprobs"].items():
                    logprobs.setdefault(key, []).extend(values or ())
            for key, value in raw.items():
                if key == "token_ids" and value:
                    choice.setdefault("token_ids", []).extend(value)
                elif key not in ("index", "text", "logprobs") and value is not None:
                    choice[key] = value
    body["choices"] = [choices[i] for i in sorted(choices)]
    return body


def responses(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    events = _events(payloads) or []
    finals = [e["response"] for e in events if e.get("type") == "response.completed"]
    if len(finals) != 1 or any(e.get("type") == "error" for e in events):
        return None  # failed, unfinished, or several streams recorded into one file
    return finals[0]


def anthropic(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    events = _events(payloads)
    if not events or [e.get("type") for e in events].count("message_stop") != 1:
        return None  # failed, unfinished, or several streams recorded into one file
    body: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for event in events:
        kind = event.get("type")
        if kind == "error":
            return None
        if kind == "message_start":
            body = dict(event["message"])
        elif kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            block, delta = blocks[event["index"]], event["delta"]
            member = {
                "text_delta": "text",
                "thinking_delta": "thinking",
                "signature_delta": "signature",
                "compaction_delta": "content",
            }.get(delta["type"])
            if member:
                block[member] = (block.get(member) or "") + (delta.get(member) or "")
            elif delta["type"] == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta.get("partial_json") or "")
            elif delta["type"] == "citations_delta":
                block.setdefault("citations", []).append(delta["citation"])
        elif kind == "content_block_stop" and event["index"] in partial:
            blocks[event["index"]]["input"] = json.loads("".join(partial[event["index"]]) or "{}")
        elif kind == "message_delta":
            body.update({k: v for k, v in event.get("delta", {}).items()})
            body["usage"] = {
                **body.get("usage", {}),
                **{k: v for k, v in event.get("usage", {}).items() if v is not None},
            }
    body["content"] = [blocks[i] for i in sorted(blocks)]
    return body


def ollama(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    lines = _events(payloads)
    if not lines or not lines[-1].get("done") or any("error" in line for line in lines):
        return None
    body = dict(lines[-1])
    if "message" in body:
        message = dict(body["message"])
        for key in ("content", "thinking"):
            pieces = [(line.get("message") or {}).get(key) for line in lines]
            if any(isinstance(p, str) for p in pieces):
                message[key] = "".join(p for p in pieces if isinstance(p, str))
        calls = [c for line in lines for c in (line.get("message") or {}).get("tool_calls") or ()]
        if calls:
            message["tool_calls"] = calls
        body["message"] = message
    else:
        for key in ("response", "thinking"):
            pieces = [line.get(key) for line in lines]
            if any(isinstance(p, str) for p in pieces):
                body[key] = "".join(p for p in pieces if isinstance(p, str))
    logprobs = [e for line in lines for e in line.get("logprobs") or ()]
    if logprobs:
        body["logprobs"] = logprobs
    return body


# stream section -> its assembler
ASSEMBLERS: dict[str, Callable[[Sequence[bytes]], dict[str, Any] | None]] = {
    "openai_chat.stream": chat,
    "vllm.chat_stream": chat,
    "llamacpp.chat_stream": chat,
    "openai_completions.stream": completions,
    "vllm.completions_stream": completions,
    "openai_responses.stream": responses,
    "anthropic_messages.stream": anthropic,
    "ollama.chat_stream": ollama,
    "ollama.generate_stream": ollama,
}
