"""Where a scored continuation starts among the tokens of a prompt the engine tokenized: the one rule every
input-scoring lift uses.

Engines place tokens differently: vLLM's `text_offset` counts the BOS text `<s>` that its echo leaves out,
llama-cpp-python's skips control-token text (a `</s>` inside a prompt shifts everything after it), and a chat
route's `prompt_logprobs` have no offsets at all. What they agree on is the distance between tokens. The
continuation is the end of the prompt, so the rule measures back from the prompt's end: the continuation starts
`len(continuation)` characters before it, and its first token is the first one that ends after that point. Nothing
before the continuation (a BOS, control tokens, a chat template) can move the boundary. A token that also covers
the end of the context straddles the boundary and belongs to the continuation; a token spelled "" (it ends inside a
UTF-8 character) is placed by its start alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Split:
    start: int  # index of the continuation's first token
    chars: int  # characters from that token's start to the prompt's end: the continuation, or more if it straddles
    straddles: bool  # the first scored token also covers the end of the context


def offsets_of(texts: Sequence[str]) -> list[int]:
    """Offsets for tokens that come without any (a chat route's `prompt_logprobs`): their texts' running length."""
    out, at = [], 0
    for text in texts:
        out.append(at)
        at += len(text)
    return out


def continuation_start(offsets: Sequence[int], texts: Sequence[str], end: int, continuation: str) -> Split | None:
    """The split of a prompt whose tokens start at `offsets` and read `texts` (the prompt's tokens only) and whose
    end is at `end` in the same count (the first generated token's offset, or the last token's end). None when the
    offsets do not reach back to the continuation's start (the engine rendered something shorter)."""
    if not continuation:
        return Split(len(texts), 0, False)
    boundary = end - len(continuation)
    for i, (at, text) in enumerate(zip(offsets, texts, strict=True)):
        if at >= boundary or at + len(text) > boundary:
            if i == 0 and at > boundary:
                return None
            return Split(i, end - at, at < boundary)
    return None
