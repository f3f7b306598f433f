"""Write a tiny llama-architecture GGUF with random weights and a real byte-level BPE tokenizer.

The engine tests need a model that a real `llama-server` loads and runs in milliseconds, with no model hub: this
one is generated, deterministically, in well under a second. Its text is gibberish by design; what matters is a
real tokenizer (token id == byte value for ids 0-255, GPT-2's byte-to-unicode mapping, merged pieces above them,
control tokens last), a chat template, and real logits.

`weights()` is the one source of the model: the GGUF written here and the Hugging Face copy `hf_model.py` writes
(for vLLM) hold the same weights and vocabulary, so every engine serves one model. Two heads of 32: vLLM's CPU
attention has no kernel for head size 16.

    python engines/llamacpp/tiny_model.py OUT.gguf [TRAINING_CONTEXT]
"""

from __future__ import annotations

import sys

import numpy as np

EMBEDDING, HEADS, LAYERS, FEED_FORWARD = 64, 2, 2, 128
HEAD_DIM = EMBEDDING // HEADS
ROPE_THETA, RMS_EPS = 10000.0, 1e-5
# Pre-tokens (as GPT-2's pre-tokenizer splits them) that should each end up as a single token.
SINGLE_TOKENS = [
    " the",
    " and",
    " of",
    " to",
    " a",
    " in",
    " is",
    " it",
    " yes",
    " no",
    "yes",
    "no",
    "Yes",
    "No",
    " hello",
    "Hello",
    " world",
    " cat",
    " sat",
    " on",
    " mat",
    " true",
    " false",
    "true",
    "false",
    "null",
    '{"',
    '":',
    '",',
    " café",
    "é",
    "日本",
    " positive",
    " negative",
    " maybe",
]
CONTROL = ["<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (printable Latin-1 map to themselves)."""
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    mapping = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_CHARS = byte_to_unicode()


def merge_once(pieces: list[str], ranks: dict[tuple[str, str], int]) -> list[str] | None:
    ranked = [(ranks[pair], i) for i, pair in enumerate(zip(pieces, pieces[1:])) if pair in ranks]
    if not ranked:
        return None
    _, i = min(ranked)
    return [*pieces[:i], pieces[i] + pieces[i + 1], *pieces[i + 2 :]]


def build_vocabulary() -> tuple[list[str], list[bool], list[str]]:
    """Byte tokens, merged pieces (merges chosen so each word in SINGLE_TOKENS becomes one token), controls."""
    merges: list[tuple[str, str]] = []
    ranks: dict[tuple[str, str], int] = {}
    for word in SINGLE_TOKENS:
        pieces = [BYTE_CHARS[b] for b in word.encode()]
        while len(pieces) > 1:
            merged = merge_once(pieces, ranks)
            if merged is None:  # no known merge applies: teach one, the leftmost pair
                ranks[(pieces[0], pieces[1])] = len(merges)
                merges.append((pieces[0], pieces[1]))
                merged = merge_once(pieces, ranks)
            pieces = merged
    tokens = [BYTE_CHARS[b] for b in range(256)]
    for left, right in merges:
        if left + right not in tokens:
            tokens.append(left + right)
    control = [False] * len(tokens) + [True] * len(CONTROL)
    return tokens + CONTROL, control, [f"{a} {b}" for a, b in merges]


def weights(tokens: list[str]) -> dict[str, np.ndarray]:
    """The model's tensors under Hugging Face `LlamaForCausalLM` names, Q and K in its rotary layout."""
    vocab = len(tokens)
    rng = np.random.default_rng(20261130)

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    embeddings = normal(vocab, EMBEDDING, std=1.0)
    embeddings[:, 0] = 4.0  # a constant feature the output head turns into a per-token preference
    head = normal(vocab, EMBEDDING, std=0.3)
    for token_id in range(vocab):
        if tokens[token_id] in CONTROL:
            preference = 0.3 if tokens[token_id] in ("</s>", "<|im_end|>") else -3.0
        elif token_id >= 256:
            preference = 1.5  # merged pieces
        elif 0x20 <= token_id < 0x7F:
            preference = 1.2  # printable ASCII
        else:
            preference = -0.1  # other bytes: rare, but they exercise the bytes and partial-UTF-8 paths
        head[token_id, 0] = preference

    tensors = {
        "model.embed_tokens.weight": embeddings,
        "model.norm.weight": np.ones(EMBEDDING, dtype=np.float32),
        "lm_head.weight": head,
    }
    for layer in range(LAYERS):
        prefix = f"model.layers.{layer}."
        tensors[prefix + "input_layernorm.weight"] = np.ones(EMBEDDING, dtype=np.float32)
        for name in ("q_proj", "k_proj", "v_proj"):
            tensors[prefix + f"self_attn.{name}.weight"] = normal(HEADS * HEAD_DIM, EMBEDDING, std=0.2)
        tensors[prefix + "self_attn.o_proj.weight"] = normal(EMBEDDING, HEADS * HEAD_DIM, std=0.05)
        tensors[prefix + "post_attention_layernorm.weight"] = np.ones(EMBEDDING, dtype=np.float32)
        tensors[prefix + "mlp.gate_proj.weight"] = normal(FEED_FORWARD, EMBEDDING, std=0.2)
        tensors[prefix + "mlp.up_proj.weight"] = normal(FEED_FORWARD, EMBEDDING, std=0.2)
        tensors[prefix + "mlp.down_proj.weight"] = normal(EMBEDDING, FEED_FORWARD, std=0.05)
    return tensors


def rotary_to_gguf(weight: np.ndarray) -> np.ndarray:
    """Hugging Face keeps each head's rotary halves apart, llama.cpp wants them interleaved (as its converter does)."""
    return weight.reshape(HEADS, 2, HEAD_DIM // 2, EMBEDDING).swapaxes(1, 2).reshape(weight.shape)


GGUF_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}  # fmt: skip


def main(out: str, context: int) -> None:
    import gguf  # only the GGUF side needs it (hf_model.py runs where it is not installed)

    tokens, control, merges = build_vocabulary()
    tensors = weights(tokens)
    types = [gguf.TokenType.CONTROL if c else gguf.TokenType.NORMAL for c in control]
    vocab = len(tokens)
    writer = gguf.GGUFWriter(out, "llama")
    writer.add_name("modelir-tiny-llama")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_vocab_size(vocab)
    writer.add_context_length(context)
    writer.add_embedding_length(EMBEDDING)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<s>"))
    writer.add_eos_token_id(tokens.index("</s>"))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    writer.add_tensor("token_embd.weight", tensors["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", tensors["model.norm.weight"])
    writer.add_tensor("output.weight", tensors["lm_head.weight"])
    for layer in range(LAYERS):
        for hf_name, gguf_name in GGUF_NAMES.items():
            weight = tensors[f"model.layers.{layer}.{hf_name}.weight"]
            if gguf_name in ("attn_q", "attn_k"):
                weight = rotary_to_gguf(weight)
            writer.add_tensor(f"blk.{layer}.{gguf_name}.weight", weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf", int(sys.argv[2]) if len(sys.argv) > 2 else 256)
