"""Serving throughput through transformers' continuous batching: this backend vs transformers' own CB attention.

    python benchmarks/bench_transformers_cb.py --model DIR --out RESULT.json [--requests 256] [--tokens 128]
                                               [--repeats 2] [--dtype bfloat16] [--plot RESULT.png]

One process, one model, the same ``generate_batch`` settings for both (page 64, CUDA graphs off: this adapter
turns them off, so transformers' own runs without them too; greedy, EOS disabled so every request generates
``--tokens``). Requests: SmolLM2's chat prompts (tests/support/real_model.py and tests/gpu/gpu_transformers_cb.py),
cycled to ``--requests``, all submitted at once. The two backends alternate ``--repeats`` times (ABAB: the
machine is shared and noisy); tokens/s = generated tokens / wall time of the whole batch (throughput of
back-to-back steps, not latency per request). One untimed warm-up run each first (Triton compiles, CB sizes its
cache).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "tests" / "gpu"))


def run_once(model, prompts, impl: str, tokens: int) -> float:
    from transformers import GenerationConfig

    import vllm_xpu_attn.transformers_cb as xa

    model.set_attn_implementation(impl)
    gen = GenerationConfig(max_new_tokens=tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cfg = xa.cb_config(page_size=64, use_cuda_graph=False)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cfg, progress_bar=False)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    n = sum(len(r.generated_tokens) for r in res.values())
    if any(r.error for r in res.values()) or n != tokens * len(prompts):
        raise RuntimeError(f"{impl}: {n} tokens generated, {tokens * len(prompts)} expected")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import vllm_xpu_attn.transformers_cb as xa
    from gpu_transformers_cb import prompt_ids

    xa.register()
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype)).to("cuda").eval()
    base = prompt_ids(tok, 32)
    prompts = [base[i % len(base)] for i in range(a.requests)]
    backends = {"xpu_attn": xa.NAME, "transformers_cb_sdpa": "sdpa"}
    for impl in backends.values():  # warm-up
        run_once(model, prompts[:8], impl, 8)
    walls: dict[str, list[float]] = {k: [] for k in backends}
    for _ in range(a.repeats):
        for name, impl in backends.items():
            walls[name].append(run_once(model, prompts, impl, a.tokens))
    gen_tokens = a.requests * a.tokens
    result = {
        "what": "transformers continuous batching (generate_batch), all requests at once, greedy, EOS disabled",
        "model": Path(a.model).name, "dtype": a.dtype, "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "transformers": transformers.__version__, "requests": a.requests,
        "new_tokens": a.tokens, "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
        "cuda_graphs": False, "page_size": 64, "order": "ABAB", "wall_s": walls,
        "tokens_per_s": {k: [gen_tokens / w for w in v] for k, v in walls.items()},
        "best_tokens_per_s": {k: gen_tokens / min(v) for k, v in walls.items()},
    }
    b = result["best_tokens_per_s"]
    result["ratio_ours_over_own"] = b["xpu_attn"] / b["transformers_cb_sdpa"]
    Path(a.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("tokens_per_s", "ratio_ours_over_own")}, indent=1))
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.2))
        names = list(b)
        ax.bar(names, [b[n] for n in names], color=["tab:blue", "tab:gray"])
        for i, n in enumerate(names):
            ax.scatter([i] * len(result["tokens_per_s"][n]), result["tokens_per_s"][n], color="k", s=10, zorder=3)
        ax.set_ylabel("generated tokens / s")
        ax.set_title(f"{result['model']} {a.dtype}, {a.requests} requests x {a.tokens} tokens\n"
                     f"{result['device']}, transformers {result['transformers']} CB, no graphs", fontsize=8)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
