"""Which split count and decode tile take long-context decode to >= 95 % of copy, and where does the rest go?

    PYTHONPATH=.:benchmarks python benchmarks/lab/splitk_sweep.py [--quick] > $OUT/splitk_sweep.jsonl

Issue #51's open question: the engine path reaches 97.9 % of copy at 64x4096 (512 programs of 4,096 keys, no
split) but 82.5 % at 8x32768 (split 8: again 512 programs of 4,096 keys, plus partials and a merge launch) and
78.9 % at 1x131072 on an H100. Same per-program work, so the gap is the split path itself or its count.
For each shape (bf16, 32 q / 8 KV heads, D 128, page 64, shuffled pages; bench_attention's inputs):

1. the shipped configuration, with torch.profiler's CUDA time per kernel (attention vs split merge);
2. split counts {shipped, 4, 8, 16, 32, 64} (where each split keeps >= 512 keys) x decode tiles
   (BLOCK_N, warps, stages), back-to-back throughput as % of this run's copy bandwidth; every candidate's
   output is compared with the shipped one's (max |diff|) before it is timed.

One JSON line per measurement; the last line names the best configuration per shape. Expected reading
(benchmarks/lab/README.md): if the merge kernel is a few us and a larger split count or a wider tile reaches
>= 95 % at 8x32768 / >= 90 % at 1x131072, the fix is `split_count` / the cuda_sm90 decode tile (CUDA only; the
Intel table is untouched); if every candidate stays near 82 %, the split path's partial writes or the program
order (pages of one split read by one program, 8 programs per sequence) are the limit, and the next step is an
Nsight Compute profile of the attention kernel at 8x32768 against 64x4096.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), os.path.dirname(os.path.dirname(HERE))]

import bench_attention as B  # noqa: E402
from bench_attention import paged_inputs  # noqa: E402
from timing import copy_tbps, throughput  # noqa: E402

from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402

SHAPES = [(8, 32768), (1, 131072), (64, 4096), (256, 1024), (2, 65536), (16, 16384)]


def _tuning():
    """The provider's tile table (wherever this tree keeps it) and the device's family key."""
    try:
        from vllm_xpu_attn.kernels.providers.triton import tuning as mod
    except ImportError:
        from vllm_xpu_attn.kernels.providers.triton import tiles as mod
    from vllm_xpu_attn.kernels.providers.triton.tiles import device_family

    return mod.TUNING, device_family(torch.device("cuda"))


def kernel_times(fn, reps: int = 20) -> dict[str, float]:
    """CUDA time per kernel name (us per call) over ``reps`` back-to-back calls."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
        if t:
            out[e.key[:60]] = round(t / reps, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="two shapes, fewer tiles")
    ap.add_argument("--kv", default="bf16", choices=["bf16", "e4m3", "e5m2"],
                    help="cache dtype: an FP8 cache sweeps the decode_fp8 tile (per-tensor descales), and each shape "
                         "first times the bf16 cache with the shipped configuration (the 1.8x target's baseline)")
    ap.add_argument("--shapes", default=None, help="indices into SHAPES, comma-separated")
    ap.add_argument("--feature", default=None, choices=["softcap", "sinks", "alibi", "softcap+sinks"],
                    help="decode with a layer feature (the 64x4096 feature rows of ab_trees sat at 79-82 %% of copy)")
    ap.add_argument("--layer", default=None, choices=["d64", "kv2", "window"],
                    help="bench_decode_grid's rows below 90 %%: head dim 64, 16 q / 2 KV heads, a 1,024-key window")
    args = ap.parse_args()
    if args.layer == "d64":
        B.D = 64
    elif args.layer == "kv2":
        B.HQ, B.HKV = 16, 2
    HKV = B.HKV
    fp8 = {"bf16": None, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[args.kv]
    phase = "decode" if fp8 is None else "decode_fp8"
    t_start = time.time()
    tri = get_provider("triton")
    tuning, fam = _tuning()
    shipped_tile = tuning[fam][phase]
    shipped_split_tile = tuning[fam].get("decode_split")
    shipped_feature_tile = tuning[fam].get("decode_feature")
    bw = copy_tbps()
    print(json.dumps({"device": torch.cuda.get_device_name(), "family": fam, "copy_tbps": round(bw, 3),
                      "kv": args.kv, "feature": args.feature, "layer": args.layer, "phase": phase, "shipped_tile": shipped_tile}), flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    tiles = [(16, n, w, s) for n, w, s in itertools.product([64, 128], [4, 8], [2, 3, 4])]
    if fp8 is not None:
        tiles = [(16, n, w, s) for n, w, s in itertools.product([32, 64, 128], [2, 4, 8], [2, 3, 4])]
    shapes = SHAPES[:2] if args.quick else SHAPES
    if args.shapes:
        shapes = [SHAPES[int(i)] for i in args.shapes.split(",")]
    if args.quick:
        tiles = [t for t in tiles if t[3] != 4]
    best = {}
    for batch, ctx in shapes:
        q, kc, vc, pt, seq, cu = paged_inputs(batch, 1, ctx, gen)
        kw = {}
        if args.feature and "softcap" in args.feature:
            kw["softcap"] = 30.0
        if args.feature and "sinks" in args.feature:
            kw["sinks"] = torch.randn(q.shape[1], device="cuda", generator=gen)
        if args.feature == "alibi":
            kw["alibi_slopes"] = torch.tensor([2 ** (-8 * (i + 1) / q.shape[1]) for i in range(q.shape[1])],
                                              device="cuda")
        if fp8 is not None:
            t16 = min(throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1)) for _ in range(3))
            print(json.dumps({"shape": [batch, ctx], "what": "bf16 shipped (baseline)", "us": round(t16 * 1e6, 2)}))
            scale = torch.ones(1, device="cuda", dtype=torch.float32)
            kc, vc = kc.to(fp8), vc.to(fp8)
            kw.update(k_descale=scale, v_descale=scale)
        if args.layer == "window":
            kw["window_size"] = (1023, 0)
        kv_bytes = 2 * batch * (min(ctx, 1024) if args.layer == "window" else ctx) * HKV * kc.shape[-1] * kc.element_size()
        tuning[fam][phase] = shipped_tile
        if shipped_split_tile is not None:
            tuning[fam]["decode_split"] = shipped_split_tile
        if shipped_feature_tile is not None:
            tuning[fam]["decode_feature"] = shipped_feature_tile
        tri.clear_caches()
        launch = tri.arm_paged if hasattr(tri, "arm_paged") else tri.plan_paged
        ref = tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, **kw).float()
        shipped_splits = None
        try:
            from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep

            step = PagedStep(cu, seq, pt, 1, pt.shape[1] * 64, 64)
            call = LayerConsts.make(q.shape[1], kc.shape[2], q.shape[2])
            shipped_splits = launch(step, call).num_splits
        except Exception as e:  # noqa: BLE001 - older trees name these differently
            shipped_splits = f"? {type(e).__name__}"
        prof = kernel_times(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, **kw))
        t = min(throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, **kw)) for _ in range(3))
        rec = {"shape": [batch, ctx], "what": "shipped", "tile": shipped_tile, "splits": shipped_splits,
               "us": round(t * 1e6, 2), "pct_copy": round(kv_bytes / t / 1e12 / bw * 100, 1), "kernels_us": prof}
        print(json.dumps(rec), flush=True)
        best[f"{batch}x{ctx}"] = rec
        for tile in tiles:
            tuning[fam][phase] = tile
            if phase == "decode":  # the split and feature tiles follow the swept one
                for extra in ("decode_split", "decode_feature"):
                    if extra in tuning[fam]:
                        tuning[fam][extra] = tile
            tri.clear_caches()
            for ns in (1, 2, 4, 8, 16, 32, 64):
                if ctx // ns < 512 or batch * HKV * ns > 8192 or (ns == 1 and batch * HKV < 128):
                    continue
                try:
                    out = tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, num_splits=ns, **kw)
                    err = float((out.float() - ref).abs().max())
                    t = min(throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, num_splits=ns,
                                                                           **kw))
                            for _ in range(3))
                except Exception as e:  # noqa: BLE001 - shared memory etc.
                    print(json.dumps({"shape": [batch, ctx], "tile": tile, "splits": ns, "error": str(e)[:100]}))
                    continue
                pct = kv_bytes / t / 1e12 / bw * 100
                rec = {"shape": [batch, ctx], "tile": tile, "splits": ns, "us": round(t * 1e6, 2),
                       "pct_copy": round(pct, 1), "max_diff_vs_shipped": err}
                print(json.dumps(rec), flush=True)
                if err < 2e-2 and pct > best[f"{batch}x{ctx}"]["pct_copy"]:
                    best[f"{batch}x{ctx}"] = rec
            if time.time() - t_start > 400:  # stay inside one device call
                break
        del q, kc, vc, ref
        torch.cuda.empty_cache()
        if time.time() - t_start > 400:
            print(json.dumps({"stopped": "time", "after_shape": [batch, ctx]}))
            break
    tuning[fam][phase] = shipped_tile
    if shipped_split_tile is not None:
        tuning[fam]["decode_split"] = shipped_split_tile
    print(json.dumps({"copy_tbps": round(bw, 3), "best": best, "wall_s": round(time.time() - t_start, 1)}))


if __name__ == "__main__":
    main()
