"""Cost of the kernels' bounds guards (kernels/api/guard.py): this tree's Triton attention vs the same provider
without the guards (the package at git ``--before``), in one process, side by side, rounds alternating.

    python3 benchmarks/bench_guards.py --prep          # on a machine with git: export the package before
    python3 benchmarks/bench_guards.py --out DIR       # on the GPU (carry benchmarks/.peers)

The standard shapes of bench_attention.py (Hq 32, Hkv 8, D 128, bf16, page 64): decode 64 x 4096,
256 x 1024, 8 x 32768 and causal prefill 1 x 8192. Both packages launch through their per-layer hot path
(arm_paged once, then LayerTensors-free ``run``), so the figure is device time per call of back-to-back
launches (CUDA events around 50 calls; 10 for prefill), median of the rounds; and latency per call (CUDA events
around one call + sync, median of 5). timing.py has both.
Writes guards.json and guards.png.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BEFORE = "4ed5896"  # the package before the guards
HQ, HKV, D, PAGE = 32, 8, 128, 64
CASES = [("decode 64x4096", 64, 1, 4096), ("decode 256x1024", 256, 1, 1024), ("decode 8x32768", 8, 1, 32768),
         ("prefill 1x8192 causal", 1, 8192, 8192)]


def export(ref: str) -> str:
    """git archive <ref> vllm_xpu_attn -> benchmarks/.peers/vxa_guard_<ref>/vxa_before (renamed package: its
    imports are relative, so both packages load in one process)."""
    root = os.path.join(HERE, ".peers", f"vxa_guard_{ref}")
    dest = os.path.join(root, "vxa_before")
    if os.path.isfile(os.path.join(dest, "__init__.py")):
        return root
    blob = subprocess.run(["git", "-C", REPO, "archive", ref, "vllm_xpu_attn"], check=True, capture_output=True).stdout
    os.makedirs(root, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(root)  # noqa: S202 - our own repository's archive
    os.rename(os.path.join(root, "vllm_xpu_attn"), dest)
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default=BEFORE)
    ap.add_argument("--prep", action="store_true", help="export the package before and exit")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--report-diff", action="store_true",
                    help="print the outputs' max difference instead of asserting them bitwise equal (A/B vs any commit)")
    ap.add_argument("--decode-only", action="store_true", help="time the decode cases only")
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(HERE, "out"))
    a = ap.parse_args()
    root = os.path.join(HERE, ".peers", f"vxa_guard_{a.before}")
    if a.prep or not os.path.isdir(root):
        root = export(a.before)
        if a.prep:
            print(f"exported to {root}")
            return
    sys.path.insert(0, REPO)
    sys.path.insert(0, root)
    import torch

    from timing import event_latency, throughput

    pkgs = {"guarded": importlib.import_module("vllm_xpu_attn.kernels"),
            "unguarded": importlib.import_module("vxa_before.kernels")}
    contract = {"guarded": importlib.import_module("vllm_xpu_attn.kernels.api"),
                "unguarded": importlib.import_module("vxa_before.kernels.api")}
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "before": a.before,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rounds": a.rounds, "cases": []}
    for name, batch, q_len, k_len in CASES:
        if a.decode_only and q_len > 1:
            continue
        pages_per = -(-k_len // PAGE)
        kc = torch.randn(batch * pages_per, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        vc = torch.randn_like(kc)
        pt = torch.randperm(batch * pages_per, device="cuda", generator=gen).to(torch.int32).reshape(batch, pages_per)
        q = torch.randn(batch * q_len, HQ, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        seq = torch.full((batch,), k_len, device="cuda", dtype=torch.int32)
        cu = torch.arange(0, batch * q_len + 1, q_len, device="cuda", dtype=torch.int32)
        runs, outs = {}, {}
        for which in pkgs:
            c = contract[which]
            step = c.PagedStep(cu, seq, pt, q_len, k_len, PAGE)
            call = c.LayerConsts.make(HQ, HKV, D, causal=True)
            launch = pkgs[which].get_provider("triton").arm_paged(step, call)
            out = torch.empty(batch * q_len, HQ, D, device="cuda", dtype=torch.bfloat16)
            runs[which] = (lambda la=launch, o=out: la.run(q, kc, vc, o))
            outs[which] = out
        for fn in runs.values():  # compile + arm the hot path
            fn()
            fn()
        torch.cuda.synchronize()
        if a.report_diff:  # comparing with an older package whose kernel may round differently
            print(name, "max |diff|", (outs["guarded"].float() - outs["unguarded"].float()).abs().max().item(), flush=True)
        else:
            assert torch.equal(outs["guarded"], outs["unguarded"]), f"{name}: the guards changed the output"
        tp = {w: [] for w in runs}
        lat = {w: [] for w in runs}
        n = 50 if q_len == 1 else 10
        for r in range(a.rounds):
            for which in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
                fn = runs[which]  # warmed above: no warm-up calls inside a round
                tp[which].append(throughput(fn, n, warmup=0) * 1e6)
                lat[which].append(event_latency(fn, iters=5, warmup=0) * 1e6)
        row = {"case": name, "batch": batch, "q_len": q_len, "k_len": k_len,
               "us_back_to_back": tp, "us_latency": lat,
               "ratio_back_to_back": round(statistics.median(tp["guarded"]) / statistics.median(tp["unguarded"]), 4),
               "ratio_latency": round(statistics.median(lat["guarded"]) / statistics.median(lat["unguarded"]), 4)}
        res["cases"].append(row)
        print(json.dumps({k: row[k] for k in ("case", "ratio_back_to_back", "ratio_latency")}),
              {w: round(statistics.median(v), 1) for w, v in tp.items()}, flush=True)
        del kc, vc, q
        torch.cuda.empty_cache()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "guards.json"), "w") as f:
        json.dump(res, f, indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        names = [r["case"] for r in res["cases"]]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [r["ratio_back_to_back"] for r in res["cases"]], 0.4, label="back-to-back")
        ax.bar([i + 0.2 for i in x], [r["ratio_latency"] for r in res["cases"]], 0.4, label="latency per call")
        ax.axhline(1.02, color="red", lw=0.8, ls="--", label="+2 %")
        ax.set_xticks(list(x), names, fontsize=8)
        ax.set_ylim(0.9, 1.1)
        ax.set_ylabel("guarded / unguarded time")
        ax.set_title(f"bounds guards, {res['device']} (median of {a.rounds} rounds)", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "guards.png"), dpi=120)
    except ImportError:
        pass
    print("wrote", os.path.join(a.out, "guards.json"))


if __name__ == "__main__":
    main()
