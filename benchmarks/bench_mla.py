"""Absorbed-MLA decode on the GPU: ours (Triton MLA kernel) next to SGLang's Triton MLA decode, one run.

    python3 benchmarks/extract_peers.py            # once, where the sglang wheel is installed
    PYTHONPATH=. python benchmarks/bench_mla.py    # carry benchmarks/.peers to the GPU machine

DeepSeek-V2/V3 sizes: kv_lora_rank 512, rope 64 (latent rows of 576 bf16), page 64, shuffled pages.
Correctness first: each shape's output vs an fp32 MQA over the gathered latent rows. Then decode bandwidth =
latent bytes read (sum of lengths x 576 x 2) / time, as % of the device copy bandwidth measured in the
same run; throughput of back-to-back calls (CUDA events over a batch) and latency per call (one call +
synchronize) reported separately, plus device time alone (``*_device_us``: the calls queued behind a GPU sleep,
timing.queued_throughput), what an engine replaying a CUDA graph sees where a small shape's host launch cost
exceeds its kernel time (16 heads x 1 x 8192). Writes $OUT/mla_decode.json (or benchmarks/out/) and a plot.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # timing, peers: siblings in benchmarks/
from timing import (  # noqa: E402
    copy_tbps,
    host_per_call,
    queued_throughput,
    sleep_cycles_per_second,
    throughput,
    wall_latency,
)

from vllm_xpu_attn import core  # noqa: E402

D_C, D_R, PAGE = 512, 64, 64
SHAPES = [(128, 64, 4096), (16, 64, 4096), (128, 8, 32768), (128, 256, 1024), (16, 1, 8192)]  # (heads, batch, ctx)
SWEEP = [(16, 32, 4, 2), (32, 32, 4, 2), (32, 32, 8, 2), (64, 32, 8, 2), (64, 16, 4, 2), (64, 64, 8, 2),
         (32, 64, 4, 3), (64, 32, 4, 2)]


def sweep(g) -> dict:
    """Time the MLA kernel's tile candidates (BLOCK_H, BLOCK_N, warps, stages) on two decode shapes and
    report the fastest in the JSON; the shipped tiles are restored, so the table after it measures what ships."""
    from vllm_xpu_attn.kernels.api import get_provider
    from vllm_xpu_attn.kernels.providers.triton.tiles import TUNING, device_family

    fam = device_family(torch.device("cuda"))
    res = {}
    for h, b, ctx in [(128, 64, 4096), (16, 64, 4096)]:
        which = "mla_wide" if h >= 64 else "mla_decode"
        pages = b * (ctx // PAGE)
        cache = (torch.randn(pages, PAGE, 1, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
        table = torch.randperm(pages, device="cuda", generator=g).to(torch.int32).reshape(b, -1)
        lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        q = (torch.randn(b, h, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
        spec = core.LayerSpec.for_mla(h, core.MLADims(D_C, D_R, 128, 128), 192 ** -0.5, dtype=torch.bfloat16,
                                      kv_dtype=torch.bfloat16)
        runner = core.LayerRunner(spec, "cuda", PAGE, override="triton")
        out = torch.empty(b, h, D_C, dtype=torch.bfloat16, device="cuda")
        saved = TUNING[fam][which]
        for cfg in SWEEP:
            TUNING[fam][which] = cfg
            get_provider("triton").clear_caches()  # kept launch configurations hold the tiles they were made with
            plan = core.plan_step(core.StepInputs(core.Mode.DECODE, lens, ctx, b, PAGE, page_table=table))
            try:
                t = throughput(lambda: runner.forward_mla(plan, q, cache, out), n=20)
                res.setdefault(str(cfg), {})[f"H{h}"] = t * 1e6
            except Exception as e:  # noqa: BLE001 - a tile that does not compile (resources) is reported
                res.setdefault(str(cfg), {})[f"H{h}"] = f"{type(e).__name__}: {str(e)[:120]}"
        TUNING[fam][which] = saved  # the shipped tile table is what the table below measures
        get_provider("triton").clear_caches()
    best = {f"H{h}": min((c for c in res if isinstance(res[c].get(f"H{h}"), float)), key=lambda c: res[c][f"H{h}"])
            for h in (128, 16)}
    print(json.dumps({"sweep_us": res, "best": best}), flush=True)
    return {"sweep_us": res, "best": best, "shipped": {k: TUNING[fam][k] for k in ("mla_decode", "mla_wide")}}


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    tuned = sweep(g) if os.environ.get("VXA_MLA_SWEEP", "0") == "1" else None
    bw = copy_tbps(back_to_back=True, n=20)
    cps = sleep_cycles_per_second()

    def device_time(fn, prefix: str, nbytes: int) -> dict:
        """Device seconds per call with the host out of the picture, and whether the calls were queued ahead."""
        host = min(host_per_call([fn], n=20, repeats=3, warmup=2))
        t, ahead = queued_throughput([fn], 20, host, cps)
        return {f"{prefix}_device_us": t * 1e6, f"{prefix}_device_pct_copy": 100 * nbytes / t / 1e12 / bw,
                f"{prefix}_device_queued_ahead": ahead, f"{prefix}_host_us": host * 1e6}
    rows = []
    for h, b, ctx in SHAPES:
        pages = b * (ctx // PAGE)
        cache = (torch.randn(pages, PAGE, 1, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
        table = torch.randperm(pages, device="cuda", generator=g).to(torch.int32).reshape(b, -1)
        lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
        q = (torch.randn(b, h, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
        scale = 192 ** -0.5
        dims = core.MLADims(D_C, D_R, 128, 128)
        spec = core.LayerSpec.for_mla(h, dims, scale, dtype=torch.bfloat16, kv_dtype=torch.bfloat16)
        runner = core.LayerRunner(spec, "cuda", PAGE, override="triton")
        plan = core.plan_step(core.StepInputs(core.Mode.DECODE, lens, ctx, b, PAGE, page_table=table))
        out = torch.empty(b, h, D_C, dtype=torch.bfloat16, device="cuda")
        ours = lambda: runner.forward_mla(plan, q, cache, out)  # noqa: E731
        ours()
        launch = next(iter(plan.launches.values()))
        ref = torch.empty(b, h, D_C, dtype=torch.float32, device="cuda")
        for i in range(b):  # fp32 MQA over the gathered latent rows (MLA's absorbed decode, written plainly)
            rows_i = cache[table[i].long()].reshape(-1, D_C + D_R)[:ctx].float()
            p = torch.softmax(q[i].float() @ rows_i.T * scale, dim=-1)
            ref[i] = p @ rows_i[:, :D_C]
        err = (out.float() - ref).abs().max().item()
        row = dict(heads=h, batch=b, ctx=ctx, mla_kernel=bool(getattr(launch, "mla_decode", False)),
                   splits=getattr(launch, "num_splits", None), max_err_vs_fp32=err)
        nbytes = b * ctx * (D_C + D_R) * 2
        t = throughput(ours, n=20)
        row.update(ours_us=t * 1e6, ours_tbps=nbytes / t / 1e12, ours_pct_copy=100 * nbytes / t / 1e12 / bw,
                   ours_latency_us=wall_latency(ours, n=10) * 1e6)
        row.update(device_time(ours, "ours", nbytes))
        try:
            import peers

            meta = peers.sglang_decode_metadata(table, lens, PAGE, h, 1, D_C, mla=True)
            out2 = torch.empty_like(out)
            sgl = lambda: peers.sglang_mla_decode(q, cache, meta, scale, out2, D_C)  # noqa: E731
            sgl()
            t2 = throughput(sgl, n=20)
            row.update(sglang_us=t2 * 1e6, sglang_tbps=nbytes / t2 / 1e12, sglang_pct_copy=100 * nbytes / t2 / 1e12 / bw,
                       sglang_latency_us=wall_latency(sgl, n=10) * 1e6,
                       sglang_max_err_vs_fp32=(out2.float() - ref).abs().max().item())
            row.update(device_time(sgl, "sglang", nbytes))
        except Exception as e:  # noqa: BLE001 - report, do not hide
            row["sglang_error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(row), flush=True)
        rows.append(row)
        del cache
        torch.cuda.empty_cache()
    # absorbed extend (chunked prefill / verify shapes) at real sizes: correctness only
    ext = []
    for h, b, prefix, ql in [(128, 4, 2048, 64), (16, 3, 700, 5), (128, 2, 0, 33)]:
        ctx = prefix + ql
        per = -(-ctx // PAGE)
        cache = (torch.randn(b * per, PAGE, 1, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
        table = torch.randperm(b * per, device="cuda", generator=g).to(torch.int32).reshape(b, per)
        q = (torch.randn(b * ql, h, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
        spec = core.LayerSpec.for_mla(h, core.MLADims(D_C, D_R, 128, 128), 192 ** -0.5, dtype=torch.bfloat16,
                                      kv_dtype=torch.bfloat16)
        runner = core.LayerRunner(spec, "cuda", PAGE, override="triton")
        inp = core.StepInputs(core.Mode.EXTEND, torch.full((b,), ctx, dtype=torch.int32, device="cuda"), ctx, b * ql,
                              PAGE, page_table=table, query_lens=torch.full((b,), ql, dtype=torch.int32, device="cuda"),
                              max_seqlen_q=ql)
        plan = core.plan_step(inp)
        out = runner.forward_mla(plan, q, cache)
        err = 0.0
        for i in range(b):
            rows_i = cache[table[i].long()].reshape(-1, D_C + D_R)[:ctx].float()
            qi = q[i * ql:(i + 1) * ql].float()  # [ql, H, 576]
            s_ = torch.einsum("thd,kd->thk", qi, rows_i) * 192 ** -0.5
            pos = torch.arange(ql, device="cuda") + prefix
            s_ = s_.masked_fill(torch.arange(ctx, device="cuda")[None, None, :] > pos[:, None, None], float("-inf"))
            want = torch.einsum("thk,kc->thc", torch.softmax(s_, -1), rows_i[:, :D_C])
            err = max(err, (out[i * ql:(i + 1) * ql].float() - want).abs().max().item())
        launch = next(iter(plan.launches.values()))
        ext.append(dict(heads=h, batch=b, prefix=prefix, q_len=ql, mla_kernel=bool(launch.mla_decode), max_err_vs_fp32=err))
        print(json.dumps(ext[-1]), flush=True)
    res = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_tbps=bw, rows=rows, extend=ext, tile_sweep=tuned,
               date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               note="bf16, kv_lora_rank 512 + rope 64, page 64, shuffled pages, decode (one query per sequence)")
    out_dir = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "out")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "mla_decode.json"), "w") as f:
        json.dump(res, f, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [f"H{r['heads']} {r['batch']}x{r['ctx']}" for r in rows]
        x = range(len(rows))
        plt.figure(figsize=(8, 4))
        plt.bar([i - 0.2 for i in x], [r["ours_pct_copy"] for r in rows], 0.4, label="vllm-xpu-attn Triton MLA")
        plt.bar([i + 0.2 for i in x], [r.get("sglang_pct_copy", 0) for r in rows], 0.4, label="SGLang Triton MLA")
        plt.xticks(list(x), labels, rotation=20)
        plt.ylabel("% of copy bandwidth (back-to-back)")
        plt.legend()
        plt.tight_layout()
        plt.savefig(os.path.join(out_dir, "mla_decode.png"), dpi=120)
    except ImportError:
        print("plot skipped: no matplotlib")


if __name__ == "__main__":
    main()
