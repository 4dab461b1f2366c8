"""Cost of the batch-invariant mode of the Triton provider (H200): the same calls with and without it.

    python benchmarks/bench_batch_invariant.py --out benchmarks/out   # writes batch_invariant.json + .png

bf16, head dim 128, 32 query / 8 KV heads, page 64, shuffled pages (the shapes of bench_attention.py).
Reports throughput of back-to-back calls (CUDA events around 20 calls) and latency per call (host clock
around one call + synchronize, median of 20), side by side in one run; see timing.py. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os

import torch

from timing import throughput, wall_latency
from vllm_xpu_attn.kernels.api import get_provider

HQ, HKV, D, PAGE = 32, 8, 128, 64
CASES = [("decode 64x4096", 64, 1, 4096), ("decode 256x1024", 256, 1, 1024), ("decode 8x32768", 8, 1, 32768),
         ("prefill 1x8192 causal", 1, 8192, 8192), ("extend 16x512 on 2048", 16, 512, 2560)]


def layout(batch, q_len, k_len, g):
    pages = -(-k_len // PAGE)
    perm = torch.randperm(batch * pages, generator=g)
    table = perm.view(batch, pages).to(torch.int32).cuda()
    kc = torch.randn(batch * pages, PAGE, HKV, D, generator=g).to(torch.bfloat16).cuda()
    vc = torch.randn_like(kc)
    q = torch.randn(batch * q_len, HQ, D, generator=g).to(torch.bfloat16).cuda()
    lens = torch.full((batch,), k_len, dtype=torch.int32).cuda()
    cu = (torch.arange(batch + 1, dtype=torch.int32) * q_len).cuda()
    return q, kc, vc, table, lens, cu, q_len


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tri = get_provider("triton")
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, batch, q_len, k_len in CASES:
        args = layout(batch, q_len, k_len, g)
        res = {"case": name}
        for mode in (False, True):
            fn = lambda: tri.flash_attn_with_kvcache(*args, causal=True, batch_invariant=mode)  # noqa: E731
            t = throughput(fn, n=20)
            lat = wall_latency(fn, n=20)
            res["invariant" if mode else "default"] = {"s_per_call_back_to_back": t, "s_latency_per_call": lat}
        res["cost_x"] = res["invariant"]["s_per_call_back_to_back"] / res["default"]["s_per_call_back_to_back"]
        rows.append(res)
        print(f"{name:24s} default {res['default']['s_per_call_back_to_back'] * 1e6:9.1f} us  invariant "
              f"{res['invariant']['s_per_call_back_to_back'] * 1e6:9.1f} us  x{res['cost_x']:.2f}", flush=True)
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows},
                  open(os.path.join(a.out, "batch_invariant.json"), "w"), indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3.5))
        ax.bar(range(len(rows)), [r["cost_x"] for r in rows])
        ax.set_xticks(range(len(rows)), [r["case"] for r in rows], rotation=20, fontsize=8)
        ax.set_ylabel("invariant / default time")
        ax.axhline(1.0, color="k", lw=0.5)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "batch_invariant.png"), dpi=120)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
