"""Tiny models for speculative decoding: a target Llama and an EAGLE draft made from it (no download).

``make_spec_target``: ``tiny_model.make_tiny_model`` with every embedding row scaled to unit RMS,
so layer 0's input RMSNorm (all-ones weight) is nearly the identity on it.

``make_eagle_draft``: an EAGLE-1 draft (``fc`` + decoder layers, embeddings and LM head shared
with the target) that copies the target's decoder layers, with ``fc = [I | 0]`` (the draft reads
the next token's embedding and ignores the target's hidden state). EAGLE runs the draft at the
target's positions shifted by one token, so the draft computes nearly what the target computes
(it never sees the first prompt token; layer 0 has no input norm; no final norm before the
shared LM head, which does not change the argmax): a draft good enough to be accepted often and
wrong sometimes, which exercises both the accepted and the rejected path of the verify step.
``noise`` adds seeded Gaussian noise (relative std) to the copied weights for a worse draft.
Greedy output must not depend on the draft at all.

Formats: vLLM (``EagleLlamaForCausalLM`` via ``architectures: [LlamaForCausalLM]`` +
``method: eagle``; its ``fc`` has no bias) and SGLang (``LlamaForCausalLMEagle``; its ``fc`` is an
``nn.Linear`` with a bias, written as zeros).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch
from tiny_model import make_tiny_model

# text that repeats, so prompt lookup (n-gram) finds matches: both engines' speculative-decoding prompts
SPEC_PROMPTS = [
    "the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. the quick brown fox",
    "once upon a time there was a small model. once upon a time there was a small model. once upon a time",
    "a paged attention kernel reads keys and values from pages of a cache. a paged attention kernel reads keys",
    "intel gpus run vllm and sglang with this backend. intel gpus run vllm and sglang",
    "one token at a time, one token at a time, one token at a time,",
    "pages of a cache hold keys and values; pages of a cache hold keys and values; pages of a cache",
    "sliding windows, sinks, softcap and alibi. sliding windows, sinks, softcap and alibi. sliding windows",
    "model model model model model model model model",
]


def make_spec_target(path: str | os.PathLike, *, seed: int = 1, **kw) -> str:
    from safetensors.torch import load_file, save_file

    out = make_tiny_model(path, "llama", seed=seed, **kw)
    f = Path(out) / "model.safetensors"
    t = load_file(str(f))
    e = t["model.embed_tokens.weight"]
    t["model.embed_tokens.weight"] = (e / e.pow(2).mean(-1, keepdim=True).sqrt()).contiguous()
    save_file(t, str(f))
    return out


def make_eagle_draft(
    target: str | os.PathLike, path: str | os.PathLike, engine: str, *, noise: float = 0.0, seed: int = 0
) -> str:
    from safetensors.torch import load_file, save_file

    if engine not in ("vllm", "sglang"):
        raise ValueError(f"engine must be 'vllm' or 'sglang', got {engine!r}")
    src, out = Path(target), Path(path)
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM" if engine == "vllm" else "LlamaForCausalLMEagle"]
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        shutil.copy(src / name, out / name)
    w = load_file(str(src / "model.safetensors"))
    g = torch.Generator().manual_seed(seed)
    hidden = cfg["hidden_size"]
    draft = {}
    for name, t in w.items():
        if not name.startswith("model.layers."):
            continue  # embeddings, final norm and LM head: the target's (shared by the engine)
        short = name[len("model.") :]
        if short == "layers.0.input_layernorm.weight":
            continue  # EAGLE's layer 0 has no input norm
        if noise and t.dim() == 2:
            t = t + torch.randn(t.shape, generator=g) * t.std() * noise
        draft[short] = t.contiguous()
    draft["fc.weight"] = torch.cat([torch.eye(hidden), torch.zeros(hidden, hidden)], dim=1).contiguous()
    if engine == "sglang":
        draft["fc.bias"] = torch.zeros(hidden)
    save_file(draft, str(out / "model.safetensors"))
    return str(out)


if __name__ == "__main__":  # python tests/support/spec_models.py ROOT: writes ROOT/{target,eagle-vllm,eagle-sglang}
    import sys

    root = Path(sys.argv[1])
    tgt = make_spec_target(root / "target")
    print(
        tgt, make_eagle_draft(tgt, root / "eagle-vllm", "vllm"), make_eagle_draft(tgt, root / "eagle-sglang", "sglang")
    )
