"""A tiny, seeded, random-weight model made locally (no download): the demo's and tests' model.

Llama-style GQA (``llama``) or Mistral with a sliding window (``mistral-swa``). Weights are
seeded and scaled so attention is far from uniform (default-initialised dummy weights give
flat attention and degenerate text, which would hide attention bugs).

Needs ``tokenizers`` and ``safetensors`` (both engines install them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

CORPUS = (
    "the quick brown fox jumps over the lazy dog. a paged attention kernel reads keys and values "
    "from pages of a cache. intel gpus run vllm and sglang with this backend. sliding windows, "
    "sinks, softcap and alibi change which keys a query sees. once upon a time there was a small "
    "model that generated text one token at a time, attending to everything it had said before. "
)

PROMPTS = [
    "the quick brown fox",
    "once upon a time there was",
    "a paged attention kernel reads keys and values from pages of a cache, and",
    "intel gpus",
    "sliding windows, sinks, softcap and alibi change which keys a query sees. the quick brown fox jumps over "
    "the lazy dog and then",
    "model",
    "attending to everything it had said before, the small model",
    "vllm and sglang with this backend run the same kernels; a query sees",
    "pages of a cache hold keys",
    "one token at a time",
]

ARCHS = ("llama", "mistral-swa")


def make_tokenizer(path: Path, vocab_size: int) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 20, trainer=trainer)
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": 4096,
                "add_bos_token": False,
                "clean_up_tokenization_spaces": False,
            }
        )
    )
    (path / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}))
    return tok.get_vocab_size()


def make_tiny_model(
    path: str | os.PathLike,
    arch: str = "llama",
    *,
    seed: int = 0,
    sliding_window: int = 16,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int = 32,
    max_positions: int = 1024,
) -> str:
    """Write config.json, tokenizer and safetensors weights into ``path``; returns the path."""
    from safetensors.torch import save_file

    if arch not in ARCHS:
        raise ValueError(f"unknown tiny model arch {arch!r}; choose from {ARCHS}")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = make_tokenizer(out, 600)
    inter = hidden * 2
    cfg = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "MistralForCausalLM"],
        "model_type": "llama" if arch == "llama" else "mistral",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "max_position_embeddings": max_positions,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
    }
    if arch == "mistral-swa":
        cfg["sliding_window"] = sliding_window
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))

    g = torch.Generator().manual_seed(seed)

    def w(*shape, std):
        return (torch.randn(*shape, generator=g) * std).contiguous()

    tensors = {
        "model.embed_tokens.weight": w(vocab, hidden, std=1.0),
        "model.norm.weight": torch.ones(hidden),
        "lm_head.weight": w(vocab, hidden, std=hidden**-0.5 * 2),
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors.update(
            {
                # q/k scaled up: sharp, position-dependent attention patterns
                p + "self_attn.q_proj.weight": w(heads * head_dim, hidden, std=0.5 / hidden**0.5 * 4),
                p + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden, std=0.5 / hidden**0.5 * 4),
                p + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden, std=hidden**-0.5),
                p + "self_attn.o_proj.weight": w(hidden, heads * head_dim, std=(heads * head_dim) ** -0.5),
                p + "mlp.gate_proj.weight": w(inter, hidden, std=hidden**-0.5),
                p + "mlp.up_proj.weight": w(inter, hidden, std=hidden**-0.5),
                p + "mlp.down_proj.weight": w(hidden, inter, std=inter**-0.5),
                p + "input_layernorm.weight": torch.ones(hidden),
                p + "post_attention_layernorm.weight": torch.ones(hidden),
            }
        )
    save_file(tensors, str(out / "model.safetensors"))
    return str(out)


if __name__ == "__main__":  # python tests/support/tiny_model.py DIR [arch]
    import sys

    print(make_tiny_model(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "llama"))
