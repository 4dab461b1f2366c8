"""Decode over issue #51's wider grid through the engine path, with vLLM's and SGLang's Triton kernels beside it.

    PYTHONPATH=.:benchmarks python benchmarks/bench_decode_grid.py --out DIR      # CUDA (peers: benchmarks/.peers)
    TRITON_INTERPRET=1 PYTHONPATH=.:benchmarks python benchmarks/bench_decode_grid.py --cpu   # dry run

bench_attention.py's decode inputs (bf16, page 64, shuffled pages) at 64 x 4096 with one thing changed per row:
head dim 64 / 256, 16 query / 2 KV heads, a sliding window of 1,024 keys, softcap 30, attention sinks, ALiBi;
plus the plain layer at 64 x 4096 (the baseline row) and at 1 x 131072 (split-K). Ours runs as the engines run
it: ``plan_step`` once per step, then ``LayerRunner.forward`` for each of 32 layers (step time / 32 = the per-layer
figure). The layers cycle over 4 caches, each >= 268 MB (far over the 50 MB L2), so no layer reads from L2 what
the one before it left. % of copy counts the K/V bytes a layer must read (a window reads its 1,024 keys only).
Peers get the same inputs and features: vLLM's ``unified_attention`` (every row) and SGLang's
``decode_attention_fwd`` (no ALiBi or window on its decode path: those rows record why). Each peer's output is
compared with ours (max |diff|) before it is timed; throughput = back-to-back calls, latency = per call + sync.
Writes decode_grid.json and decode_grid.png. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass

import bench_attention as B
import torch

from vllm_xpu_attn.core import LayerRunner, LayerSpec, Mode, StepInputs, plan_step

LAYERS, CACHES = 32, 4
PATH = (
    "plan_step once per step, then LayerRunner.forward per layer over {n} layers cycling over {c} caches; "
    "per-layer figure = step time / {n}"
)


@dataclass(frozen=True)
class Row:
    """One grid point: what differs from the plain layer (32 q / 8 KV heads, D 128, 64 x 4096)."""

    name: str
    batch: int = 64
    ctx: int = 4096
    hq: int = 32
    hkv: int = 8
    d: int = 128
    window: int = -1  # keys a query sees before itself (FlashAttention's window_left); -1 = all
    softcap: float = 0.0
    sinks: bool = False
    alibi: bool = False


GRID = [
    Row("plain"),
    Row("D 64", d=64),
    Row("D 256", d=256),
    Row("16 q / 2 KV heads", hq=16, hkv=2),
    Row("window 1024", window=1023),
    Row("softcap 30", softcap=30.0),
    Row("sinks", sinks=True),
    Row("ALiBi", alibi=True),
    Row("1 x 131072", batch=1, ctx=131072),
]
CPU_GRID = [
    Row(r.name, 2, 64, 4, 2, 64 if r.d == 128 else r.d // 2, min(r.window, 15), r.softcap, r.sinks, r.alibi)
    for r in GRID[:-1]
] + [Row("1 x 512", 1, 512, 4, 2, 64)]


def inputs(r: Row, gen: torch.Generator):
    """q [batch, Hq, D], CACHES (K, V) pairs [pages, PAGE, Hkv, D], page table [batch, pages/seq], seq lens."""
    pages_per = math.ceil(r.ctx / B.PAGE)
    n_pages = r.batch * pages_per
    caches = [
        tuple(torch.randn(n_pages, B.PAGE, r.hkv, r.d, device=B.DEVICE, dtype=B.DTYPE, generator=gen) for _ in "kv")
        for _ in range(CACHES)
    ]
    pt = torch.randperm(n_pages, device=B.DEVICE, generator=gen).to(torch.int32).reshape(r.batch, pages_per)
    q = torch.randn(r.batch, r.hq, r.d, device=B.DEVICE, dtype=B.DTYPE, generator=gen)
    seq = torch.full((r.batch,), r.ctx, device=B.DEVICE, dtype=torch.int32)
    return q, caches, pt, seq


def alibi_slopes(hq: int) -> list[float]:
    """The ALiBi paper's geometric slopes for ``hq`` heads (a power of two here)."""
    return [2.0 ** (-8.0 * (i + 1) / hq) for i in range(hq)]


def ours(r: Row, q, caches, pt, seq, gen) -> tuple[dict, torch.Tensor, dict]:
    """The engine path over LAYERS layers: us per layer (back-to-back steps and per step + sync, / LAYERS), layer 0's
    output, and the feature tensors the peers take."""
    feats = {}
    if r.sinks:
        feats["sinks"] = torch.randn(r.hq, device=B.DEVICE, generator=gen, dtype=torch.float32)
    if r.alibi:
        feats["alibi_slopes"] = torch.tensor(alibi_slopes(r.hq), device=B.DEVICE, dtype=torch.float32)
    spec = LayerSpec(
        num_q_heads=r.hq,
        num_kv_heads=r.hkv,
        head_dim=r.d,
        scale=r.d**-0.5,
        window_left=r.window,
        softcap=r.softcap,
        has_sinks=r.sinks,
        alibi_slopes=tuple(alibi_slopes(r.hq)) if r.alibi else None,
        dtype=B.DTYPE,
        kv_dtype=B.DTYPE,
    )
    runners = [LayerRunner(spec, B.DEVICE, B.PAGE, override="triton") for _ in range(LAYERS)]
    if r.sinks:
        for rn in runners:
            rn.ensure_bound(rn, sinks=feats["sinks"])
    outs = [torch.empty_like(q) for _ in range(LAYERS)]

    def step():
        plan = plan_step(
            StepInputs(
                mode=Mode.DECODE,
                seq_lens=seq,
                max_seqlen_k=r.ctx,
                num_tokens=r.batch,
                page_size=B.PAGE,
                page_table=pt,
                max_seqlen_q=1,
            )
        )
        for i, (rn, o) in enumerate(zip(runners, outs)):
            rn.forward(plan, q, *caches[i % CACHES], o)

    step()
    t_tp = B.TIMERS["throughput"](step, 10) / LAYERS
    t_lat = B.TIMERS["latency"](step, iters=5) / LAYERS
    return {"us": t_tp * 1e6, "us_latency": t_lat * 1e6}, outs[0].clone(), feats


def peer_runs(r: Row, q, k, v, pt, seq, feats) -> dict:
    """name -> (callable, output buffer) for each peer that takes the row's features, or name -> reason."""
    peers, why = B._peers()
    if peers is None:
        return {"peers": why}
    cu = torch.arange(0, r.batch + 1, device=B.DEVICE, dtype=torch.int32)
    scale = r.d**-0.5
    runs: dict = {}
    out_v = torch.full_like(q, float("nan"))  # an element a peer leaves unwritten shows as NaN
    runs["vllm_unified"] = (
        lambda: peers.vllm_unified_decode(
            q,
            k,
            v,
            pt,
            seq,
            cu,
            1,
            r.ctx,
            scale,
            out_v,
            softcap=r.softcap,
            sliding_window=None if r.window < 0 else r.window + 1,
            sinks=feats.get("sinks"),
            alibi_slopes=feats.get("alibi_slopes"),
        ),
        out_v,
    )
    if r.alibi or r.window >= 0:
        runs["sglang_decode"] = "SGLang's decode kernel has no ALiBi / sliding-window form (its SWA is a pool)"
    else:
        meta = peers.sglang_decode_metadata(pt, seq, B.PAGE, r.hq, r.hkv, r.d)
        out_s = torch.full_like(q, float("nan"))
        runs["sglang_decode"] = (
            lambda: peers.sglang_decode(q, k, v, meta, scale, out_s, logit_cap=r.softcap, sinks=feats.get("sinks")),
            out_s,
        )
    return runs


def measure(r: Row, gen, copy) -> dict:
    q, caches, pt, seq = inputs(r, gen)
    keys = r.ctx if r.window < 0 else min(r.ctx, r.window + 1)
    kv_bytes = 2 * r.batch * keys * r.hkv * r.d * caches[0][0].element_size()
    row = {**r.__dict__, "kv_bytes": kv_bytes, "path": PATH.format(n=LAYERS, c=CACHES)}
    t, out, feats = ours(r, q, caches, pt, seq, gen)
    row.update(t)
    if copy:
        row["pct_copy"] = 100 * kv_bytes / (t["us"] * 1e-6) / 1e12 / copy
        row["pct_copy_latency"] = 100 * kv_bytes / (t["us_latency"] * 1e-6) / 1e12 / copy
    if B.DEVICE != "cpu":
        for name, run in peer_runs(r, q, *caches[0], pt, seq, feats).items():
            if isinstance(run, str):
                row[f"{name}_error"] = run
                continue
            fn, buf = run
            try:
                fn()
                row[f"{name}_max_abs_diff"] = float((buf.float() - out.float()).abs().max())
                row[f"{name}_us"] = B.throughput(fn) * 1e6
                row[f"{name}_us_latency"] = B.event_latency(fn) * 1e6
                if copy:
                    row[f"{name}_pct_copy"] = 100 * kv_bytes / (row[f"{name}_us"] * 1e-6) / 1e12 / copy
            except Exception as e:  # noqa: BLE001 - record, never hide
                row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    return row


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in res["rows"] if "pct_copy" in r]
    names = [r["name"] for r in rows]
    fig, ax = plt.subplots(figsize=(11, 4))
    width = 0.27
    for i, (key, label) in enumerate(
        [
            ("pct_copy", "ours (engine path)"),
            ("vllm_unified_pct_copy", "vLLM Triton"),
            ("sglang_decode_pct_copy", "SGLang Triton"),
        ]
    ):
        ax.bar([j + (i - 1) * width for j in range(len(rows))], [r.get(key, 0) for r in rows], width, label=label)
    ax.axhline(90, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(rows)), names, rotation=20, ha="right")
    ax.set_ylabel("% of copy bandwidth (K+V bytes read)")
    ax.set_title(f"Decode, bf16, page 64, back-to-back ({res['device']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="output dir (default: $OUT, else benchmarks/out)")
    ap.add_argument("--cpu", action="store_true", help="dry run in the Triton interpreter on tiny shapes")
    a = ap.parse_args()
    global LAYERS
    grid = GRID
    if a.cpu:
        B.use_cpu()
        B.TIMERS.update(throughput=B._host_throughput, latency=B._host_latency)
        LAYERS, grid = 2, CPU_GRID
    out_dir = a.out or os.environ.get("OUT") or "benchmarks/out"
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator(device=B.DEVICE).manual_seed(0)
    copy = None if a.cpu else B.copy_tbps()
    res = {
        "device": "cpu (Triton interpreter: times mean nothing)" if a.cpu else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "copy_tbps": copy,
        "rows": [],
    }
    t0 = time.time()
    for r in grid:
        try:
            row = measure(r, gen, copy)
        except Exception as e:  # noqa: BLE001 - record, never hide
            row = {"name": r.name, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        res["rows"].append(row)
        print(json.dumps(row), f"[{time.time() - t0:.0f} s]", flush=True)
        with open(os.path.join(out_dir, "decode_grid.json"), "w") as f:
            json.dump(res, f, indent=1)
        if not a.cpu:
            torch.cuda.empty_cache()
    try:
        plot(res, os.path.join(out_dir, "decode_grid.png"))
    except Exception as e:  # noqa: BLE001 - the JSON is written
        print(f"plot failed: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
