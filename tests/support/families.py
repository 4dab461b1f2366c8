"""Tiny seeded model families made with transformers, and transformers' eager greedy output.

Test-only (needs transformers, tokenizers, safetensors: both engine venvs have them). One model
per family, with configs chosen so that the prompts plus 32 generated tokens cross every window
and chunk: sliding windows of 8 (Gemma-3) and 16, Llama-4 chunks of 32, prompts of 10-60 tokens.

    python families.py make DIR FAMILY SEED        -> writes the model into DIR
    python families.py greedy DIR OUT_JSON N       -> transformers eager greedy tokens for PROMPTS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import tiny_model as _tiny_model  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 128, 4, 2, 32
WINDOW, CHUNK = 16, 32
GEMMA_WINDOW = 8

# 12 prompts: the tiny model's 10 (short ones, and long ones crossing a window of 16 and a chunk
# of 32 in the prompt itself) plus two more
PROMPTS = _tiny_model.PROMPTS + [
    "a paged attention kernel reads keys and values from pages of a cache. intel gpus run vllm and sglang with "
    "this backend. once upon a time",
    "the lazy dog",
]

FAMILIES = ("qwen3", "gemma3", "gpt-oss", "llama4")
MLA_FAMILIES = ("deepseek-v2",)  # multi-head latent attention (kv_lora_rank 512 + rope 64: the engines' MLA paths
#                                  accept only DeepSeek's latent width; nope/v heads tiny)


def config(family: str, vocab: int):
    """The transformers config of a family's tiny model (fp32, 4 heads / 2 KV heads, D=32 or 64)."""
    import transformers as tf

    common = dict(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=1024,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
        initializer_range=0.15,
    )
    if family == "qwen3":
        cfg = tf.Qwen3Config(num_hidden_layers=2, intermediate_size=256, head_dim=HEAD_DIM, **common)
        cfg.architectures = ["Qwen3ForCausalLM"]
    elif family == "gemma3":
        cfg = tf.Gemma3TextConfig(
            num_hidden_layers=4,
            intermediate_size=256,
            head_dim=HEAD_DIM,
            sliding_window=GEMMA_WINDOW,
            query_pre_attn_scalar=HEAD_DIM,
            layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"],
            **{**common, "tie_word_embeddings": True},
        )
        cfg.architectures = ["Gemma3ForCausalLM"]
    elif family == "gpt-oss":
        # sinks on every layer, alternating sliding (16) / full layers, a 4-expert MoE; D=64
        cfg = tf.GptOssConfig(
            num_hidden_layers=2,
            intermediate_size=128,
            head_dim=64,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"],
            **common,
        )
        cfg.architectures = ["GptOssForCausalLM"]
    elif family == "llama4":
        # chunked local attention (chunk 32) on layers 0-2, a global no-rope layer 3; a 2-expert MoE
        cfg = tf.Llama4TextConfig(
            num_hidden_layers=4,
            intermediate_size=128,
            intermediate_size_mlp=256,
            head_dim=HEAD_DIM,
            num_local_experts=2,
            num_experts_per_tok=1,
            attention_chunk_size=CHUNK,
            interleave_moe_layer_step=2,
            no_rope_layers=[1, 1, 1, 0],
            **common,
        )
        cfg.architectures = ["Llama4ForCausalLM"]
    elif family == "deepseek-v2":
        # MLA on both layers (dense MLPs: first_k_dense_replace covers them), no q LoRA; latent 512 + rope 64
        cfg = tf.DeepseekV2Config(
            num_hidden_layers=2,
            intermediate_size=256,
            moe_intermediate_size=32,
            n_routed_experts=2,
            n_shared_experts=1,
            num_experts_per_tok=1,
            first_k_dense_replace=2,
            moe_layer_freq=1,
            n_group=1,
            topk_group=1,
            topk_method="greedy",
            q_lora_rank=None,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            qk_nope_head_dim=16,
            v_head_dim=16,
            **{**common, "num_key_value_heads": HEADS, "initializer_range": 0.2},
        )
        cfg.architectures = ["DeepseekV2ForCausalLM"]
    else:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES + MLA_FAMILIES}")
    cfg.torch_dtype = "float32"
    return cfg


def make(path: str, family: str, seed: int) -> str:
    """Write config, tokenizer and seeded random weights (safetensors) of a family into ``path``."""
    import torch
    import transformers as tf

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = _tiny_model.make_tokenizer(out, 600)
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(config(family, vocab), torch_dtype=torch.float32)
    if family == "gpt-oss":
        with torch.no_grad():  # transformers initialises sinks to 0; make them matter, in bf16 (SGLang keeps bf16)
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_((torch.randn_like(layer.self_attn.sinks) * 2).bfloat16().float())
    if family == "gemma3":
        with torch.no_grad():  # tied embeddings scaled by sqrt(hidden) otherwise dominate: the model echoes its input
            for layer in model.model.layers:
                layer.post_attention_layernorm.weight.fill_(3.0)  # Gemma's RMSNorm scales by (1 + w)
                layer.post_feedforward_layernorm.weight.fill_(3.0)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    return str(out)


ABLATIONS = {  # family -> what turning its attention feature off means (to show the prompts exercise it)
    "gemma3": "window",
    "gpt-oss": "sinks+window",
    "llama4": "chunk",
}


def greedy(path: str, max_tokens: int, ablate: bool = False) -> list[list[int]]:
    """transformers' eager attention, fp32, greedy, one prompt at a time (no padding).

    ``ablate``: the same model with its family's attention feature turned off (windows of 4096,
    chunks of 4096, sinks of -inf): the engines must match the model *with* it, and differ from this.
    """
    import torch
    import transformers as tf

    tok = tf.AutoTokenizer.from_pretrained(path)
    cfg = tf.AutoConfig.from_pretrained(path)
    if ablate:
        if getattr(cfg, "sliding_window", None):
            cfg.sliding_window = 4096
        if getattr(cfg, "attention_chunk_size", None):
            cfg.attention_chunk_size = 4096
    model = tf.AutoModelForCausalLM.from_pretrained(
        path, config=cfg, torch_dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    if ablate and cfg.model_type == "gpt_oss":
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.fill_(-1e9)
    res = []
    with torch.no_grad():
        for p in PROMPTS:
            ids = tok(p, return_tensors="pt").input_ids
            gen = model.generate(
                ids,
                max_new_tokens=max_tokens,
                min_new_tokens=max_tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=1,
            )
            res.append(gen[0, ids.shape[1] :].tolist())
    return res


def agreement(ref: list[list[int]], got: list[list[int]]) -> int:
    """How many prompts' greedy continuations are identical."""
    return sum(a == b for a, b in zip(ref, got))


def build_all(root: Path, python: str, families=FAMILIES) -> dict:
    """Each family's model (seed 0) and transformers' greedy tokens with and without its feature, made
    in a subprocess of ``python`` (the engine venv's, whose transformers the engine uses too)."""
    import subprocess

    here = str(Path(__file__).parent)
    res = {}
    for fam in families:
        path = root / fam
        ref, abl = root / f"{fam}.hf.json", root / f"{fam}.hf-ablated.json"
        cmds = [["make", str(path), fam, "0"], ["greedy", str(path), str(ref), "32"]]
        if fam in ABLATIONS:
            cmds.append(["greedy", str(path), str(abl), "32", "ablate"])
        for c in cmds:
            subprocess.run([python, str(Path(here) / "families.py"), *c], check=True, capture_output=True, timeout=600)
        res[fam] = {
            "path": str(path),
            "hf": json.loads(ref.read_text()),
            "hf_ablated": json.loads(abl.read_text()) if fam in ABLATIONS else None,
        }
    (root / "prompts.json").write_text(json.dumps(PROMPTS))
    return res


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    if sys.argv[1] == "make":
        print(make(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    elif sys.argv[1] == "greedy":  # greedy DIR OUT N [ablate]
        json.dump(greedy(sys.argv[2], int(sys.argv[4]), ablate=len(sys.argv) > 5), open(sys.argv[3], "w"))
