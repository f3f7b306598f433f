"""The optional native fast path for logprob-heavy lifts: loading the extension, and the calls the lifts make.

`native/` (Rust, built into the venv by `make venv`) parses the logprob section of an OpenAI-shaped body straight
into packed `TokenLogprobs` wire bytes, with no Python object per token; the lifts merge them into the IR. Each
call here answers only for a shape whose Python result it reproduces byte for byte, and returns None (or raises
`Unsupported`) for anything else, so the Python builders stay the reference: they lift whatever is declined and
raise the typed errors. Without the extension every call declines, and that is said once, at debug level.
`MODELIR_NATIVE=0` turns the fast path off (to compare, or to rule it out).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson

_log = logging.getLogger(__name__)

try:
    import modelir_native as _ext
except ImportError as exc:  # not built (no cargo, a failed build): the Python builders do everything
    _ext = None
    _why = f"the native logprob fast path is not built ({exc}); lifts use the Python builders"
else:
    _why = "the native logprob fast path is turned off (MODELIR_NATIVE=0); lifts use the Python builders"


class _Never(Exception):
    """Stands in for the extension's `Unsupported` when there is no extension (nothing raises it)."""


Unsupported: type[Exception] = _ext.Unsupported if _ext is not None else _Never
_said = False
# Below this size a body takes the Python path: there the native calls' fixed cost (and, for completions, parsing
# the body's rest a second time) outweighs what they save, measured at 5-20% of a small lift (bench/transports.py).
MIN_BODY_BYTES = 16_384
# The completions wires' fast path (a hand-written reader, native/src/completions.rs): on since it measured about
# half the Python builders' time on a 2,000 x top-20 body (bench/README.md); False takes the Python path for them.
COMPLETIONS = True


def enabled() -> bool:
    """Whether lifts take the native path (the extension is built and not turned off)."""
    global _said
    if _ext is not None and os.environ.get("MODELIR_NATIVE", "1") != "0":
        return True
    if not _said:
        _said = True
        _log.debug(_why)
    return False


def wanted(body: bytes) -> bool:
    """Whether a lift should take the native path for this body: enabled, and the body large enough to gain."""
    return len(body) >= MIN_BODY_BYTES and enabled()


def chat_choice(raw: Any) -> bytes | None:
    """A chat choice's `logprobs` JSON (bytes or `msgspec.Raw`) -> None where it or its `content` is null or
    absent, b"" for an empty `content`, else the `TokenLogprobs` bytes. Raises `Unsupported`."""
    assert _ext is not None  # callers ask `enabled()` first
    built: bytes | None = _ext.chat_choice_logprobs(raw)  # the extension is untyped
    return built


def entries(raw: Any, *, unclamp: bool = False) -> bytes | None:
    """A JSON list of OpenAI logprob entries (or null) -> None, b"" or the `TokenLogprobs` bytes; `unclamp` reads
    vLLM's -9999.0 (as the float32 column holds it) as -inf. Raises `Unsupported`."""
    assert _ext is not None
    built: bytes | None = _ext.entries_logprobs(raw, unclamp=unclamp)
    return built


def completion_body(body: bytes, *, unclamp: bool, token_ids: bool) -> dict[str, Any] | None:
    """A completions body as `orjson.loads` gives it, except that each choice's `logprobs` is what the native
    builder made of it: None (null), b"" (no tokens) or the `TokenLogprobs` bytes. None: take the Python path.

    The logprob sections are cut out (replaced by `null`) before orjson parses the rest, so every other field is
    exactly what the reference decoder makes of it. `unclamp` reads vLLM's -9999.0 as -inf; `token_ids` reads its
    `token_id:N` spellings into the id columns.
    """
    if not COMPLETIONS or not wanted(body):
        return None
    try:
        spans = _ext.completion_logprobs(body, unclamp=unclamp, token_ids=token_ids)
    except Unsupported as exc:
        _log.debug("native completions lift declined: %s", exc)
        return None
    if not any(spans):
        return None  # nothing to take: the Python path parses the body once
    view = memoryview(body)
    pieces: list[bytes | memoryview] = []
    position = 0
    for span in spans:
        if span is not None:
            pieces += (view[position : span[0]], b"null")
            position = span[1]
    pieces.append(view[position:])
    try:
        parsed: dict[str, Any] = orjson.loads(b"".join(pieces))
    except orjson.JSONDecodeError:
        return None  # the reference decoder raises its own typed error for the whole body
    choices = parsed["choices"]
    for index, span in enumerate(spans):
        if span is not None:
            choices[index]["logprobs"] = span[2]
    return parsed
