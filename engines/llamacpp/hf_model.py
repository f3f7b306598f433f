"""Write the tiny model (`tiny_model.py`) in Hugging Face form, for engines that load no GGUF (vLLM).

The same weights and vocabulary as the GGUF: a `LlamaForCausalLM` config and safetensors, a fast byte-level BPE
tokenizer (`tokenizers`, saved as `PreTrainedTokenizerFast`) with the same tokens and merges and the BOS added by
its post-processor as llama.cpp adds it, the ChatML template, and a generation config whose end tokens are `</s>`
and `<|im_end|>` (what a chat model's natural end looks like). Made locally, no hub. Needs `tokenizers`,
`safetensors` and `transformers` (run it with vLLM's python).

    python engines/llamacpp/hf_model.py OUT_DIR [CONTEXT]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from safetensors.numpy import save_file
from tiny_model import (
    CHAT_TEMPLATE,
    CONTROL,
    EMBEDDING,
    FEED_FORWARD,
    HEADS,
    LAYERS,
    RMS_EPS,
    ROPE_THETA,
    build_vocabulary,
    weights,
)
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast


def tokenizer(tokens: list[str], merges: list[str]) -> PreTrainedTokenizerFast:
    vocabulary = {token: i for i, token in enumerate(tokens) if token not in CONTROL}
    bpe = models.BPE(vocab=vocabulary, merges=[tuple(m.split(" ")) for m in merges], fuse_unk=False)
    core = Tokenizer(bpe)
    # GPT-2's split and byte map, as the GGUF's `gpt-2` pre-tokenizer; no prefix space (llama.cpp adds none).
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL])
    bos = tokens.index("<s>")
    core.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    assert all(core.token_to_id(t) == i for i, t in enumerate(tokens)), "ids must match the GGUF's"
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", chat_template=CHAT_TEMPLATE
    )


def main(out: str, context: int) -> None:
    tokens, _, merges = build_vocabulary()
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    save_file(weights(tokens), str(directory / "model.safetensors"), metadata={"format": "pt"})
    ends = [tokens.index("</s>"), tokens.index("<|im_end|>")]
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(tokens),
        "hidden_size": EMBEDDING,
        "intermediate_size": FEED_FORWARD,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS,
        "max_position_embeddings": context,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": tokens.index("<s>"),
        "eos_token_id": ends[0],
    }
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    generation = {"bos_token_id": tokens.index("<s>"), "eos_token_id": ends}
    (directory / "generation_config.json").write_text(json.dumps(generation, indent=1))
    tokenizer(tokens, merges).save_pretrained(str(directory))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-hf", int(sys.argv[2]) if len(sys.argv) > 2 else 256)
