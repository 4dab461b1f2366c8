"""Does the MLA page-block kernel (_mla_page_kernel, issue #49) beat the shipped MLA kernel on the GPU?

Times absorbed-MLA decode per candidate (kernel form x launch tiles x split count; tuning.MLA_KERNEL_FORM:
"gather" = _mla_attn_kernel, what cuda_sm90 ships; "page" / "tma" = _mla_page_kernel with pointer / tensor-descriptor
K/V loads; "ahead" = _mla_page_kernel with the scores one key block ahead, QK^T computed once per 64-head tile)
next to SGLang's Triton MLA decode, at the issue's shapes: 128 heads x 64 x 4096, 16 x 64 x 4096, 16 x 1 x 8192,
bf16 and FP8 e4m3 latent caches. Every candidate is checked against an fp32 MQA over the gathered
latent rows (mla_sweep.case) before it is timed; one JSON line per (shape, kv, candidate): back-to-back us,
TFLOP/s (2 x batch x heads x ctx x (576 + 512)), TB/s of latent bytes and % of the copy bandwidth measured in the same
run, the kernel that ran, or the error a candidate ends in. The last line ("summary") is the table of the fastest
per (shape, kv) against the issue's targets.

    PYTHONPATH=. python benchmarks/lab/mla_new.py > mla_new.jsonl              # CUDA machine (gpu_mla_new.sh)
    PYTHONPATH=. python benchmarks/lab/mla_new.py --only 0 --kv bf16          # one shape
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/lab/mla_new.py --cpu    # dry check, tiny sizes

The warm-up is off (XPU_ATTN_WARMUP=0: only the launched variant compiles); the provider's tables are set per
candidate and restored at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("XPU_ATTN_WARMUP", "0")  # compile only what each candidate launches

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # mla_sweep
sys.path.insert(0, os.path.join(HERE, ".."))  # timing, peers

from mla_sweep import D_C, D_R, PAGE, SCALE, case  # noqa: E402

from vllm_xpu_attn.kernels.api import LayerConsts, LayerTensors, PagedStep, get_provider  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton import tiles, tuning  # noqa: E402

SHAPES = [(128, 64, 4096), (16, 64, 4096), (16, 1, 8192)]  # (heads, batch, ctx): the targets
# (form, (BLOCK_H, BLOCK_N, warps, stages), split count or None = the policy's); the first of each list is shipped
WIDE = {
    "bf16": [
        ("gather", (64, 64, 8, 2), None),
        ("ahead", (64, 32, 8, 2), None),
        ("ahead", (64, 16, 8, 2), None),
        ("ahead", (64, 16, 8, 3), None),
        ("tma", (64, 64, 8, 2), None),
        ("gather", (64, 32, 8, 2), None),
    ],
    "e4m3": [
        ("gather", (64, 64, 8, 2), None),
        ("ahead", (64, 32, 8, 2), None),
        ("tma", (64, 64, 8, 2), None),
    ],
}
NARROW = {
    "bf16": [
        ("tma", (16, 32, 4, 2), None),
        ("page", (16, 32, 4, 2), None),
        # more key blocks in flight per SM (the h16 profile: DRAM 71 %, a scoreboard wait on memory at 2 blocks
        # of 4 warps): a third stage (3 x 36 KB: still 2 blocks per SM), or 64-key blocks
        ("tma", (16, 32, 4, 3), None),
        ("page", (16, 32, 4, 3), None),
        ("tma", (16, 64, 4, 2), None),
        ("page", (16, 64, 4, 2), None),
        ("tma", (16, 32, 8, 2), None),
        ("gather", (16, 32, 4, 2), None),
        ("ahead", (16, 32, 4, 2), None),
    ],
    "e4m3": [
        ("gather", (16, 32, 4, 2), None),
        ("tma", (16, 32, 4, 2), None),
        ("page", (16, 16, 4, 2), None),
    ],
}
# batch 1: the policy's split count (8 at 8192 keys) leaves most SMs idle; more splits of fewer keys
SMALL = {
    "bf16": [("gather", (16, 32, 4, 2), None)]
    + [("tma", (16, 32, 4, 2), s) for s in (None, 16, 32, 64, 128)]
    + [("gather", (16, 32, 4, 2), 32)],
    "e4m3": [("gather", (16, 32, 4, 2), None), ("tma", (16, 32, 4, 2), 32)],
}
CANDIDATES = {0: WIDE, 1: NARROW, 2: SMALL}
# the targets: TFLOP/s at 128 heads, % of copy at 16 heads
TARGETS = {(128, 64, 4096): ("tflops", 450.0), (16, 64, 4096): ("pct_copy", 85.0), (16, 1, 8192): ("pct_copy", 60.0)}


def run(c: dict, h: int, b: int, ctx: int, device: str, splits, timed: bool, n: int) -> dict:
    """One decode step of case ``c`` through the provider as its tables stand: error vs fp32, the kernel that ran
    (name, descriptor loads, split count) and, when ``timed``, back-to-back us / TFLOP/s / TB/s."""
    prov = get_provider("triton")
    step = PagedStep(torch.arange(b + 1, dtype=torch.int32, device=device), c["lens"], c["table"], 1, ctx, PAGE)
    call = LayerConsts.make(h, 1, D_C + D_R, D_C, softmax_scale=SCALE, mla=True)
    launch = prov.arm_paged(step, call, num_splits=splits)
    out = torch.empty(b, h, D_C, dtype=torch.bfloat16, device=device)
    kw = {}
    if c["cache"].dtype == torch.float8_e4m3fn:
        one = torch.ones(1, device=device)
        kw["layer"] = LayerTensors.make(call, device=device, kv_dtype=c["cache"].dtype, k_descale=one, v_descale=one)

    def fn():
        return launch.run(c["q"], c["cache"], c["cache"][..., :D_C], out, **kw)

    fn()
    row = {"err": (out.float() - c["ref"]).abs().max().item(), "splits": launch.num_splits}
    page_runs = prov.launched_variants("_mla_page_kernel")
    row["kernel"] = "_mla_page_kernel" if page_runs else "_mla_attn_kernel"
    row["desc"] = sorted({bool(v["USE_DESC"]) for v in page_runs})
    row["ahead"] = sorted({bool(v["AHEAD"]) for v in page_runs})
    if timed:
        from timing import throughput

        t = min(throughput(fn, n=n) for _ in range(3))
        row.update(us=round(t * 1e6, 2), tflops=round(c["flop"] / t / 1e12, 1), tbps=round(c["nbytes"] / t / 1e12, 3))
        row.update(device_time(fn, c, n))
    return row


def device_time(fn, c: dict, n: int) -> dict:
    """Device time alone (calls queued behind a GPU sleep, timing.queued_throughput): what an engine replaying a
    CUDA graph sees where the host's launch cost exceeds the kernel's (16 heads x 1 x 8192)."""
    from timing import host_per_call, queued_throughput, sleep_cycles_per_second

    host = min(host_per_call([fn], n=n, repeats=3, warmup=2))
    t, ahead = queued_throughput([fn], n, host, sleep_cycles_per_second())
    return dict(dev_us=round(t * 1e6, 2), dev_tbps=round(c["nbytes"] / t / 1e12, 3), dev_queued=ahead,
                host_us=round(host * 1e6, 2))  # fmt: skip


def sglang(c: dict, h: int, device: str, n: int) -> dict:
    """SGLang's Triton MLA decode (benchmarks/peers.py, the engine's own kernel) on the same inputs."""
    import peers
    from timing import throughput

    cache = c["cache"]
    meta = peers.sglang_decode_metadata(c["table"], c["lens"], PAGE, h, 1, D_C, mla=True)
    out = torch.empty(c["q"].shape[0], h, D_C, dtype=torch.bfloat16, device=device)

    def fn():
        return peers.sglang_mla_decode(c["q"], cache, meta, SCALE, out, D_C)

    fn()
    t = min(throughput(fn, n=n) for _ in range(3))
    return dict(err=(out.float() - c["ref"]).abs().max().item(), us=round(t * 1e6, 2),
                tflops=round(c["flop"] / t / 1e12, 1), tbps=round(c["nbytes"] / t / 1e12, 3),
                **device_time(fn, c, n))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="dry check in the Triton interpreter: tiny shapes, no timing")
    ap.add_argument("--only", default=None, help="indices into SHAPES, comma-separated (default: all)")
    ap.add_argument("--kv", default="bf16,e4m3")
    ap.add_argument("--n", type=int, default=20, help="back-to-back calls per timing")
    ap.add_argument("--budget", type=float, default=300.0, help="seconds: later candidates are skipped past it")
    ap.add_argument("--pick", default=None, help='one candidate, "FORM:BH,BN,WARPS,STAGES" (e.g. "tma:64,64,8,2")')
    ap.add_argument("--profile", action="store_true", help="no timing, no peer: each launch twice (for ncu)")
    ap.add_argument("--splits", default=None, help="with --pick: forced split counts, comma-separated")
    a = ap.parse_args()
    device = "cpu" if a.cpu else "cuda"
    fam = tiles.device_family(torch.device(device))
    shapes = SHAPES if not a.cpu else [(64, 2, 96), (16, 2, 80), (16, 1, 130)]
    idx = range(len(shapes)) if a.only is None else [int(i) for i in a.only.split(",")]
    saved_t = {k: dict(v) for k, v in tuning.TUNING.items()}
    saved_f = {k: dict(v) for k, v in tuning.MLA_KERNEL_FORM.items()}
    g = torch.Generator(device=device).manual_seed(0)
    bw = None
    if not a.cpu:
        from timing import copy_tbps

        bw = copy_tbps(back_to_back=True, n=20)
        print(json.dumps({"copy_tbps": bw, "family": fam, "device": torch.cuda.get_device_name(),
                          "torch": torch.__version__, "shipped_form": saved_f.get(fam)}), flush=True)  # fmt: skip
    t_start, rows = time.time(), []
    try:
        for i in idx:
            h, b, ctx = shapes[i]
            phase = tuning.mla_phase(h)
            for kv in a.kv.split(","):
                c = case(h, b, ctx, kv, device, g)
                cands = CANDIDATES[i][kv]
                if a.pick:
                    f_, t_ = a.pick.split(":")
                    forced = [int(x) for x in a.splits.split(",")] if a.splits else [None]
                    cands = [(f_, tuple(int(x) for x in t_.split(",")), n) for n in forced]
                for form, til, splits in cands:
                    row = {"shape": [h, b, ctx], "kv": kv, "form": form, "tiles": list(til), "forced_splits": splits}
                    if a.cpu:  # the interpreter's tiles, the candidate's form and split count
                        til = tuning.TUNING["cpu"][phase][:4]
                    if time.time() - t_start > a.budget:
                        row["skipped"] = "budget"
                        print(json.dumps(row), flush=True)
                        continue
                    tuning.TUNING[fam][phase] = tuple(til) + tuple(saved_t[fam][phase][4:])
                    tuning.MLA_KERNEL_FORM[fam] = dict(saved_f.get(fam, {}), **{phase: form})
                    get_provider("triton").clear_caches()  # kept launch configurations hold their tables
                    t0 = time.time()
                    try:
                        row.update(run(c, h, b, ctx, device, splits, timed=not (a.cpu or a.profile), n=a.n))
                        if a.profile:
                            run(c, h, b, ctx, device, splits, timed=False, n=a.n)  # the profiled launch
                        row["ok"] = row["err"] < (0.1 if kv == "e4m3" else 0.02)
                        if bw and "tbps" in row:
                            row["pct_copy"] = round(100 * row["tbps"] / bw, 1)
                            row["dev_pct_copy"] = round(100 * row["dev_tbps"] / bw, 1)
                    except Exception as e:  # noqa: BLE001 - a candidate that does not fit is a result
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    row["wall_s"] = round(time.time() - t0, 1)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                if not (a.cpu or a.profile):
                    row = {"shape": [h, b, ctx], "kv": kv, "form": "sglang"}
                    try:
                        row.update(sglang(c, h, device, a.n))
                        row["ok"] = row["err"] < (0.1 if kv == "e4m3" else 0.02)
                        row["pct_copy"] = round(100 * row["tbps"] / bw, 1)
                        row["dev_pct_copy"] = round(100 * row["dev_tbps"] / bw, 1)
                    except Exception as e:  # noqa: BLE001 - a missing peer is reported, not fatal
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                del c
                if device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        for k in saved_t:
            tuning.TUNING[k].clear()
            tuning.TUNING[k].update(saved_t[k])
        tuning.MLA_KERNEL_FORM.clear()
        tuning.MLA_KERNEL_FORM.update(saved_f)
        get_provider("triton").clear_caches()
    print(json.dumps({"summary": summary(rows)}), flush=True)


def summary(rows: list[dict]) -> list[dict]:
    """Per (shape, kv): the shipped (first gather row), the fastest checked page-kernel row and SGLang, with the
    issue's target for bf16 and, for e4m3, the time per token against bf16's fastest."""
    out = []
    best_bf16 = {}
    for key in dict.fromkeys((tuple(r["shape"]), r["kv"]) for r in rows):
        mine = [r for r in rows if (tuple(r["shape"]), r["kv"]) == key and r.get("ok") and "us" in r]
        shipped = next((r for r in mine if r["form"] == "gather"), None)
        new = min((r for r in mine if r["form"] in ("page", "tma", "ahead")), key=lambda r: r["us"], default=None)
        sgl = next((r for r in mine if r["form"] == "sglang"), None)
        brief = lambda r: r and {k: r.get(k) for k in ("form", "tiles", "splits", "us", "tflops", "pct_copy")}  # noqa: E731
        row = {
            "shape": list(key[0]),
            "kv": key[1],
            "shipped": brief(shipped),
            "new_best": brief(new),
            "sglang": brief(sgl),
        }
        fastest = min((r["us"] for r in mine if r["form"] != "sglang"), default=None)
        if key[1] == "bf16":
            best_bf16[key[0]] = fastest
            metric, goal = TARGETS.get(key[0], (None, None))
            if metric and new:
                met = "met" if (new.get(metric) or 0) >= goal else "not met"
                row["target"] = f"{metric} >= {goal}: new {new.get(metric)} -> {met}"
        elif fastest and best_bf16.get(key[0]):
            row["e4m3_over_bf16_time"] = round(fastest / best_bf16[key[0]], 3)  # <= 1: at least as fast per token
        if shipped and new:
            row["new_over_shipped_time"] = round(new["us"] / shipped["us"], 3)
        out.append(row)
    return out


if __name__ == "__main__":
    main()
