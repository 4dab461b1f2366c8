"""FP8 KV decode through the engine path against bf16 in the same run (issue #51's FP8 table).

    PYTHONPATH=.:benchmarks python benchmarks/bench_fp8_engine.py --out DIR      # CUDA
    TRITON_INTERPRET=1 PYTHONPATH=.:benchmarks python benchmarks/bench_fp8_engine.py --cpu   # dry run

bench_attention.py's decode shapes (bf16 q, 32 q / 8 KV heads, D 128, page 64, shuffled pages) through
``plan_step`` once per step + ``LayerRunner.forward`` per layer over 32 layers' own caches: a bf16 cache, then
e4m3 and e5m2 caches with per-tensor descales (``ensure_bound(k_scale=, v_scale=)``, vLLM's and SGLang's path)
and e4m3 with per-head [batch, Hkv] descales (``bind``). Each FP8 row: us per layer (back-to-back steps / layers),
the speed-up over bf16 in this run, % of copy by the bytes it reads, and its output against the one-call API on
the same cache and descales (bitwise). Writes fp8_engine.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import torch

import bench_attention as B
from vllm_xpu_attn.core import LayerRunner, LayerSpec, Mode, StepInputs, plan_step
from vllm_xpu_attn.kernels.api import get_provider

KINDS = [
    ("bf16", None, None),
    ("e4m3", "float8_e4m3fn", "tensor"),
    ("e5m2", "float8_e5m2", "tensor"),
    ("e4m3 per-head", "float8_e4m3fn", "head"),
]


def run_kind(name: str, fp8: str | None, descale: str | None, batch: int, ctx: int, gen, layers: int, tri) -> dict:
    q, kc, vc, pt, seq, cu = B.paged_inputs(batch, 1, ctx, gen)
    kv_dtype = getattr(torch, fp8) if fp8 else B.DTYPE
    caches = [(kc, vc)] + [(torch.randn_like(kc), torch.randn_like(vc)) for _ in range(layers - 1)]
    caches = [(k.to(kv_dtype), v.to(kv_dtype)) for k, v in caches]
    spec = LayerSpec(
        num_q_heads=B.HQ, num_kv_heads=B.HKV, head_dim=B.D, scale=1.0 / math.sqrt(B.D), dtype=B.DTYPE, kv_dtype=kv_dtype
    )
    runners = [LayerRunner(spec, B.DEVICE, B.PAGE, override="triton") for _ in range(layers)]
    kw = {}
    if descale == "tensor":
        scales = [torch.full((1,), 0.5 + 0.01 * i, device=B.DEVICE) for i in range(layers)]
        for rn, s in zip(runners, scales):
            rn.ensure_bound(rn, k_scale=s, v_scale=s)
        kw = dict(k_descale=scales[0], v_descale=scales[0])
    elif descale == "head":
        scales = [torch.rand(batch, B.HKV, device=B.DEVICE, generator=gen) + 0.5 for _ in range(layers)]
        for rn, s in zip(runners, scales):
            rn.bind(k_descale=s, v_descale=s)
        kw = dict(k_descale=scales[0], v_descale=scales[0])
    outs = [torch.empty_like(q) for _ in range(layers)]

    def step():
        plan = plan_step(
            StepInputs(
                mode=Mode.DECODE,
                seq_lens=seq,
                max_seqlen_k=ctx,
                num_tokens=batch,
                page_size=B.PAGE,
                page_table=pt,
                max_seqlen_q=1,
            )
        )
        for rn, (k, v), o in zip(runners, caches, outs):
            rn.forward(plan, q, k, v, o)

    step()
    ref = tri.flash_attn_with_kvcache(q, caches[0][0], caches[0][1], pt, seq, cu, 1, **kw)
    kv_bytes = 2 * batch * ctx * B.HKV * B.D * caches[0][0].element_size()
    t = B.TIMERS["throughput"](step, 10) / layers
    return {
        "kv": name,
        "batch": batch,
        "context": ctx,
        "us": t * 1e6,
        "kv_bytes": kv_bytes,
        "bitwise_equal_one_call": bool(torch.equal(outs[0], ref)),
        "max_abs_diff_vs_one_call": float((outs[0].float() - ref.float()).abs().max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="output dir (default: $OUT, else benchmarks/out)")
    ap.add_argument("--cpu", action="store_true", help="dry run in the Triton interpreter on tiny shapes")
    a = ap.parse_args()
    if a.cpu:
        B.use_cpu()
        B.TIMERS.update(throughput=B._host_throughput, latency=B._host_latency)
    out_dir = a.out or os.environ.get("OUT") or "benchmarks/out"
    os.makedirs(out_dir, exist_ok=True)
    tri = get_provider("triton")
    gen = torch.Generator(device=B.DEVICE).manual_seed(0)
    copy = None if a.cpu else B.copy_tbps()
    res = {
        "device": "cpu (Triton interpreter: times mean nothing)" if a.cpu else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "copy_tbps": copy,
        "path": B.ENGINE_PATH.format(n=B.LAYERS),
        "rows": [],
    }
    for batch, ctx in B.DECODE:
        base = None
        for name, fp8, descale in KINDS:
            try:
                row = run_kind(name, fp8, descale, batch, ctx, gen, B.LAYERS, tri)
            except Exception as e:  # noqa: BLE001 - record, never hide
                row = {"kv": name, "batch": batch, "context": ctx, "error": f"{type(e).__name__}: {str(e)[:200]}"}
            if "us" in row:
                base = row["us"] if name == "bf16" else base
                row["speedup_vs_bf16"] = base / row["us"] if base else None
                if copy:
                    row["pct_copy"] = 100 * row["kv_bytes"] / (row["us"] * 1e-6) / 1e12 / copy
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
            if not a.cpu:
                torch.cuda.empty_cache()
    with open(os.path.join(out_dir, "fp8_engine.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
