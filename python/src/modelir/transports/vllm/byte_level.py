"""Byte-level BPE symbols back to the bytes they stand for: vLLM's `/tokenize` spells tokens as the vocabulary does
(`Ġworld`, `ĠcafÃ©`: GPT-2's printable stand-ins for bytes), not as text, and gives no bytes.

A tokenizer that is not byte-level (SentencePiece's `▁world`) spells tokens otherwise, and some of its spellings
would also read as byte-level symbols, so the reading is trusted only when it is proven: the symbols' bytes end with
the text that was tokenized, or (a rendered conversation, whose text is not known) a symbol uses one of the stand-ins
above U+00FF that only a byte-level vocabulary has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _byte_to_symbol() -> dict[int, str]:
    """GPT-2's reversible map (printable Latin-1 bytes stand for themselves, the others for U+0100 on)."""
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_SYMBOL_TO_BYTE = {symbol: b for b, symbol in _byte_to_symbol().items()}
_STAND_INS = frozenset(symbol for symbol in _SYMBOL_TO_BYTE if ord(symbol) > 0xFF)


def symbol_bytes(piece: str) -> bytes | None:
    try:
        return bytes(_SYMBOL_TO_BYTE[c] for c in piece)
    except KeyError:
        return None


def recover(pieces: Sequence[str], text: str | None) -> list[bytes] | None:
    """Each piece's bytes when the pieces are proven byte-level symbols of `text` (None: a rendered conversation),
    else None (leave the pieces as they are)."""
    decoded = [d for p in pieces if (d := symbol_bytes(p)) is not None]
    if not decoded or len(decoded) != len(pieces):
        return None
    if text is not None:
        return decoded if b"".join(decoded).endswith(text.encode()) else None
    return decoded if any(c in _STAND_INS for p in pieces for c in p) else None


def token_text(raw: bytes) -> str:
    """A token's text; "" for a token that ends inside a UTF-8 character (its bytes carry it)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return ""


LOST_TEXT_WARNING = "token_text_lost"


def lost_text(tokens: Sequence[str], natural_end: bool) -> list[int]:
    """The positions of sampled tokens vLLM spelled as "" in its logprobs: it never flushes a token that ends inside
    a UTF-8 character (`token: ""`, `bytes: []`), so that token's text and bytes are not in the answer (its id is).
    A final end token (a natural end) has no text of its own and is not counted."""
    last = len(tokens) - 1 if natural_end else len(tokens)
    return [i for i, token in enumerate(tokens) if token == "" and i != last]


def flag_lost_text(warnings: Any, positions: Sequence[int], choice: int) -> None:
    """A warning naming the positions `lost_text` found (vLLM's answer cannot give their bytes: the bytes come with
    the vocabulary, which its server does not expose)."""
    if positions:
        warnings.add(
            code=LOST_TEXT_WARNING,
            message=f"choice {choice}: vLLM gave no text or bytes for the sampled token(s) at logprob position(s) "
            f"{', '.join(map(str, positions))} (each ends inside a UTF-8 character); their ids are in sampled_tokens",
        )
