"""The in-process truth for the tiny model in numpy: the Llama forward pass over `tiny_model.weights()` in float64.

An oracle that shares no code with any engine: Hugging Face's layout (rotary halves apart, `rotate_half`), RMS
norm, causal attention, SwiGLU. `logprobs(ids)[i]` is the distribution over the token after position i;
`hidden_states(ids)[i]` is the final normed hidden state there, which embeddings pool.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import numpy as np
import regex

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engines" / "llamacpp"))
import tiny_model  # (the generator is a script beside the engines' builds, not a package)

sys.path.pop(0)


@cache
def vocabulary() -> tuple[list[str], dict[str, np.ndarray]]:
    tokens, _, _ = tiny_model.build_vocabulary()
    return tokens, {k: v.astype(np.float64) for k, v in tiny_model.weights(tokens).items()}


# GPT-2's pre-tokenizer split (the GGUF's `gpt2` pre-tokenizer, the Hugging Face form's ByteLevel regex).
_SPLIT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


@cache
def _ranks() -> dict[tuple[str, str], int]:
    _, _, merges = tiny_model.build_vocabulary()
    return {tuple(m.split(" ")): rank for rank, m in enumerate(merges)}  # type: ignore[misc]


def tokenize(text: str, *, bos: bool = True) -> list[int]:
    """The model's own tokenization of plain text (no control tokens): GPT-2's split, then the byte-level BPE merges
    in rank order; the BOS first when `bos`. An oracle for prompts an engine tokenizes without saying its ids."""
    tokens, _ = vocabulary()
    index = {token: i for i, token in enumerate(tokens)}
    ids = [index["<s>"]] if bos else []
    for word in _SPLIT.findall(text):
        pieces: list[str] | None = [tiny_model.BYTE_CHARS[b] for b in word.encode()]
        while pieces is not None and len(pieces) > 1:
            merged = tiny_model.merge_once(pieces, _ranks())
            if merged is None:
                break
            pieces = merged
        ids.extend(index[piece] for piece in pieces or ())
    return ids


@cache
def _ids_by_bytes() -> dict[bytes, int]:
    tokens, _ = vocabulary()
    return {token_bytes(i): i for i in range(len(tokens))}


def id_of_bytes(raw: bytes) -> int | None:
    """The id whose token has exactly these bytes (every token's bytes differ), or None."""
    return _ids_by_bytes().get(raw)


def token_bytes(token_id: int) -> bytes:
    """A token's bytes: the byte-level symbols mapped back (control tokens are their text)."""
    tokens, _ = vocabulary()
    token = tokens[token_id]
    if token in tiny_model.CONTROL:
        return token.encode()
    inverse = {c: b for b, c in tiny_model.BYTE_CHARS.items()}
    return bytes(inverse[c] for c in token)


def _rms(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + tiny_model.RMS_EPS) * weight


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def logprobs(ids: list[int]) -> np.ndarray:
    """(len(ids), vocab) log-probabilities: row i is the next-token distribution after ids[: i + 1]."""
    _, w = vocabulary()
    logits = hidden_states(ids) @ w["lm_head.weight"].T
    top = logits.max(-1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))


def hidden_states(ids: list[int]) -> np.ndarray:
    """(len(ids), embedding size): the last layer's output after the final RMS norm at each position, the vectors
    an engine pools into an embedding (mean, last token, ...)."""
    _, w = vocabulary()
    heads, dim = tiny_model.HEADS, tiny_model.HEAD_DIM
    n = len(ids)
    x = w["model.embed_tokens.weight"][ids]
    inverse = 1.0 / tiny_model.ROPE_THETA ** (np.arange(0, dim, 2) / dim)
    angles = np.outer(np.arange(n), inverse)
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for layer in range(tiny_model.LAYERS):
        p = f"model.layers.{layer}."
        h = _rms(x, w[p + "input_layernorm.weight"])
        q, k, v = (
            (h @ w[p + f"self_attn.{name}.weight"].T).reshape(n, heads, dim).transpose(1, 0, 2)
            for name in ("q_proj", "k_proj", "v_proj")
        )
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(dim) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        x = x + attended.transpose(1, 0, 2).reshape(n, heads * dim) @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return _rms(x, w["model.norm.weight"])
