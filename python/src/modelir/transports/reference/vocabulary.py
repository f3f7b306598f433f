"""The reference model's vocabulary and its fixed bigram table: what each token spells, and every next-token logprob.

Token ids 0-255 are bytes, 256 is BOS and 257 is EOS. The table of next-token logits is drawn once from a fixed
seed, so it is identical on every machine and every logprob the model reports is genuine.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

BOS, EOS, VOCAB = 256, 257, 258
MAX_TOP_LOGPROBS = 20
_TABLE_SEED = 20261130

# What each token id spells. Bytes outside printable ASCII are spelled `<0xNN>`, as SentencePiece does.
PIECES: list[str] = [chr(b) if 0x20 <= b < 0x7F or b in (9, 10) else f"<0x{b:02X}>" for b in range(256)]
PIECES += ["<s>", "</s>"]
PIECE_BYTES: list[bytes] = [bytes([b]) for b in range(256)] + [b"", b""]
PIECE_LEN = np.array([1] * 256 + [0, 0], dtype=np.int64)


def token_ids(text: str | bytes) -> list[int]:
    """The tokens of `text`: its UTF-8 bytes."""
    return list(text.encode() if isinstance(text, str) else text)


def _class_ids(predicate: Callable[[int], bool]) -> np.ndarray:
    return np.array([b for b in range(256) if predicate(b)], dtype=np.int64)


# The token classes generation samples from: free text, lower-case words, and digits.
PRINTABLE = np.concatenate([_class_ids(lambda b: 0x20 <= b < 0x7F or b == 10), [EOS]])
LETTERS = _class_ids(lambda b: 0x61 <= b <= 0x7A or b == 0x20)
DIGITS = _class_ids(lambda b: 0x30 <= b <= 0x39)
NONZERO_DIGITS = _class_ids(lambda b: 0x31 <= b <= 0x39)


@lru_cache(maxsize=1)
def logprob_table() -> np.ndarray:
    """`table[prev, next]`: the model's log probability of `next` after `prev` (float64, rows sum to 1)."""
    rng = np.random.Generator(np.random.PCG64(_TABLE_SEED))
    logits = rng.normal(0.0, 1.5, size=(VOCAB, VOCAB))
    bonus = np.full(VOCAB, -6.0)
    for b in range(0x20, 0x7F):
        bonus[b] = -1.0
    bonus[ord("a") : ord("z") + 1] = 3.0
    bonus[ord(" ")] = 3.5
    bonus[ord("A") : ord("Z") + 1] = 0.5
    bonus[ord("0") : ord("9") + 1] = 0.0
    for ch in ".,!?'\n":
        bonus[ord(ch)] = 1.0
    bonus[EOS] = -4.5
    bonus[BOS] = -np.inf  # BOS only ever starts a sequence
    logits = logits + bonus
    logits[ord("."), EOS] += 3.0
    logits -= logits.max(axis=1, keepdims=True)
    table: np.ndarray = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    table.setflags(write=False)
    return table


@lru_cache(maxsize=1)
def top_table() -> tuple[np.ndarray, np.ndarray]:
    """Per previous token: the next tokens by descending logprob (ids, logprobs), for top-k alternatives."""
    table = logprob_table()
    order = np.argsort(-table, axis=1, kind="stable")[:, :MAX_TOP_LOGPROBS]
    return order, np.take_along_axis(table, order, axis=1)
