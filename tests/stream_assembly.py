"""A native stream assembled into the unary answer its wire would have sent (chat, completions, Responses,
Anthropic, Ollama, Gemini, llama.cpp `/completion`, sglang `/generate`), so that the folded stream lift can be
compared with the unary lift of the same answer.

Written from the providers' streaming references: chat deltas concatenate per choice and tool calls per `index`;
Responses streams end with the whole object; Anthropic blocks build from their start and their deltas, the message
from `message_start` and `message_delta`; Ollama's NDJSON lines concatenate and the last carries the totals.
Gemini chunks carry only their new parts (text runs continue, Gemini 3 call arguments stream as `partialArgs` at
JSON paths), the last says `finishReason`, `usageMetadata` is cumulative and grounding is filled on the last chunk;
llama-server's `/completion` events carry `content`, `tokens` (and `completion_probabilities`) per token and a last
`stop: true` event with the totals; sglang's events carry `text` and `output_ids` cumulative (incremental with
`--incremental-streaming-output`) with the running `meta_info`, and `[DONE]` ends them.
None when a stream has no unary twin (an error mid-stream, no end, an answer the stream never sent whole).
"""

from __future__ import annotations

import itertools
import json
import re
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


def _gemini_path(path: str) -> list[str | int] | None:
    """`$.a.b[0]['c']` -> ["a", "b", 0, "c"] (the `partialArgs` JSON paths of Gemini 3's streamed calls)."""
    steps: list[str | int] = []
    rest = path[1:] if path.startswith("$") else None
    while rest:
        match = re.match(r"\.([^.\[\]]+)|\['([^']*)'\]|\[(\d+)\]", rest)
        if match is None:
            return None
        name, quoted, index = match.groups()
        steps.append(int(index) if index is not None else name if name is not None else quoted)
        rest = rest[match.end() :]
    return steps or None


def _set_at(args: dict[str, Any], fragment: dict[str, Any]) -> None:
    steps = _gemini_path(str(fragment.get("jsonPath") or ""))
    if steps is None:
        return
    target: Any = args
    for step, following in itertools.pairwise(steps):
        if isinstance(step, int):
            target.extend([None] * (step + 1 - len(target)))
            if target[step] is None:
                target[step] = [] if isinstance(following, int) else {}
            target = target[step]
        else:
            target = target.setdefault(step, [] if isinstance(following, int) else {})
    last = steps[-1]
    if isinstance(last, int):
        target.extend([None] * (last + 1 - len(target)))
    for kind in ("stringValue", "numberValue", "boolValue", "nullValue"):
        if kind in fragment:
            value = fragment[kind]
            if kind == "stringValue":
                previous = target[last] if isinstance(last, int) else target.get(last)
                value = (previous if isinstance(previous, str) else "") + str(value)
            target[last] = None if kind == "nullValue" else value


def _gemini_part(parts: list[dict[str, Any]], part: dict[str, Any], open_call: dict[str, Any] | None) -> Any:
    """Add one chunk's part to the candidate's parts; returns the call whose arguments still stream, if any."""
    call = part.get("functionCall")
    if isinstance(call, dict) and ("partialArgs" in call or call.get("willContinue") or (not call and open_call)):
        if open_call is None:
            open_call = {"name": call.get("name") or "", "args": {}}
            if call.get("id"):
                open_call["id"] = call["id"]
            parts.append({**{k: v for k, v in part.items() if k != "functionCall"}, "functionCall": open_call})
        elif part.get("thoughtSignature"):
            next(p for p in parts if p.get("functionCall") is open_call)["thoughtSignature"] = part["thoughtSignature"]
        for fragment in call.get("partialArgs") or ():
            _set_at(open_call["args"], fragment)
        return None if not call else open_call
    previous = parts[-1] if parts else None
    if (
        "text" in part
        and previous is not None
        and "text" in previous
        and bool(previous.get("thought")) == bool(part.get("thought"))
        and not previous.get("thoughtSignature")
        and (part["text"] or not part.get("thoughtSignature"))  # a signature alone on empty text is its own part
    ):
        previous["text"] += part["text"]
        previous.update({k: v for k, v in part.items() if k != "text"})
    else:
        parts.append(dict(part))
    return open_call


def genai(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    chunks = _events(payloads)
    if not chunks or any("error" in c for c in chunks):
        return None
    body: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    open_calls: dict[int, Any] = {}
    for chunk in chunks:
        body.update({k: v for k, v in chunk.items() if k != "candidates" and v not in (None, {}, [])})
        for position, raw in enumerate(chunk.get("candidates") or ()):
            index = raw.get("index", position)
            candidate = candidates.setdefault(index, {"index": index, "content": {"parts": []}})
            content = raw.get("content") or {}
            if content.get("role"):
                candidate["content"]["role"] = content["role"]
            for part in content.get("parts") or ():
                open_calls[index] = _gemini_part(candidate["content"]["parts"], part, open_calls.get(index))
            for key, value in raw.items():
                if key == "logprobsResult" and value:  # each chunk's own tokens: the answer's are all of them
                    merged = candidate.setdefault(key, {})
                    for member in ("chosenCandidates", "topCandidates"):
                        merged.setdefault(member, []).extend(value.get(member) or ())
                    if "logProbabilitySum" in value:
                        merged["logProbabilitySum"] = merged.get("logProbabilitySum", 0.0) + value["logProbabilitySum"]
                elif key not in ("index", "content") and value not in (None, {}, []):
                    candidate[key] = value  # the last that says something: grounding fills only the last chunk
    if not candidates and "promptFeedback" not in body:
        return None
    if any("finishReason" not in c for c in candidates.values()):
        return None  # there is no [DONE]: a stream without its finishReason did not end
    body["candidates"] = [candidates[i] for i in sorted(candidates)]
    return body


def llamacpp_completion(payloads: Sequence[bytes]) -> dict[str, Any] | None:
    events = _events(payloads)
    if not events or not events[-1].get("stop") or any("error" in e for e in events):
        return None
    body = dict(events[-1])
    # A token that ends inside a UTF-8 character gets no event (a later one carries its text and the running
    # `tokens_predicted`): when generation ends there, the last token event's count falls short of the final one
    # and the stream never sent that text, which the unary answer has.
    counts = [e.get("tokens_predicted") for e in events[:-1] if e.get("content") or e.get("tokens")]
    last = counts[-1] if counts else 0  # no token event at all: every token was held back
    if isinstance(last, int) and last < (body.get("tokens_predicted") or 0):
        return None
    ids = [t for e in events for t in e.get("tokens") or ()]
    body["content"] = "".join(e.get("content") or "" for e in events)
    body["tokens"] = ids
    if any("completion_probabilities" in e for e in events):
        body["completion_probabilities"] = [p for e in events for p in e.get("completion_probabilities") or ()]
    return body


def _extends(values: list[Any]) -> bool | None:
    """Whether a field's non-empty values each extend the one before (a cumulative run); None with fewer than two."""
    present = [v for v in values if v]
    if len(present) < 2:
        return None
    return all(b[: len(a)] == a and len(b) > len(a) for a, b in itertools.pairwise(present))


def _joined(values: list[Any], cumulative: bool | None) -> Any:
    """One field over a choice's events: a cumulative run's last value, else the pieces joined."""
    present = [v for v in values if v]
    if cumulative and present:
        return present[-1]
    return "".join(present) if values and isinstance(values[0], str) else [x for v in present for x in v]


def sglang(payloads: Sequence[bytes]) -> dict[str, Any] | list[dict[str, Any]] | None:
    """One answer, or the list a batch (`n` > 1) answers, in `index` order."""
    events = _events(payloads)
    if not events or payloads[-1].strip() != b"[DONE]" or any("error" in e for e in events):
        return None
    by_choice: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        by_choice.setdefault(event.get("index", 0), []).append(event)
    answers = []
    for _, lines in sorted(by_choice.items()):
        answer = {**lines[-1], "meta_info": dict(lines[-1].get("meta_info") or {})}
        texts = [line.get("text") or "" for line in lines]
        ids = [line.get("output_ids") or [] for line in lines]
        # Text and ids share the server's mode (an incremental token's text may begin with the one before, its id
        # list says surely); the logprob lists have their own (older servers resent them whole even so).
        cumulative = _extends(ids) if _extends(ids) is not None else _extends(texts)
        answer["text"] = _joined(texts, cumulative)
        if any("output_ids" in line for line in lines):
            answer["output_ids"] = _joined(ids, cumulative)
        for key in ("output_token_logprobs", "output_top_logprobs"):
            values = [(line.get("meta_info") or {}).get(key) or [] for line in lines]
            if any(key in (line.get("meta_info") or {}) for line in lines):
                answer["meta_info"][key] = _joined(values, _extends(values))
        answers.append(answer if len(by_choice) > 1 else {k: v for k, v in answer.items() if k != "index"})
    return answers[0] if len(answers) == 1 else answers


# stream section -> its assembler
ASSEMBLERS: dict[str, Callable[[Sequence[bytes]], dict[str, Any] | list[dict[str, Any]] | None]] = {
    "openai_chat.stream": chat,
    "vllm.chat_stream": chat,
    "llamacpp.chat_stream": chat,
    "openai_completions.stream": completions,
    "vllm.completions_stream": completions,
    "openai_responses.stream": responses,
    "anthropic_messages.stream": anthropic,
    "ollama.chat_stream": ollama,
    "ollama.generate_stream": ollama,
    "google_genai.stream": genai,
    "llamacpp.completion_stream": llamacpp_completion,
    "sglang.stream": sglang,
}
