"""Compile stalls while serving: a serving-like step sequence on a cold Triton cache, with and without warm-up.

    PYTHONPATH=. python3 benchmarks/bench_compile_stalls.py       # CUDA; -> $OUT/compile_stalls.json (+ .png),
                                                                  #    else benchmarks/out/

Each mode runs in its own process with an empty TRITON_CACHE_DIR (cold: nothing compiled on disk or in memory):
  warmup  the package as shipped: the first call of a layer kind compiles every variant it can launch
          (vllm_xpu_attn/kernels/providers/triton/warmup.py)
  off     the same with that warm-up switched off (TritonProvider.warm_once replaced by a no-op): what a step
          shape met for the first time while serving costs

Layer kinds (bf16 q, page 64, 32 q / 8 KV heads, D 128): plain; FP8 e4m3 cache; window 1024 + sinks + softcap;
and absorbed MLA (16 heads, latent 512 + rope 64, one cache).
Engine start-up is modelled as one prefill step and one decode step per layer kind (what an engine's profiling
and warm-up runs launch); its wall time is the start-up compile time. Then 60 serving steps, each over every
layer kind: decode at batch 1..256 and contexts up to 32k keys (split-K from batch x heads < 2 x SMs), prefill
chunks, mixed prefill + decode, spec-decode verify (4 query rows per sequence). A step's time: wall time of its
calls + synchronize; ``compiled``: the kernels Triton compiled during it (its in-memory caches). A stall: a step
slower than 20x the median step of the same mode and > 100 ms.
Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HQ, HKV, D, PAGE = 32, 8, 128, 64
KINDS = ("plain", "fp8", "window+sinks+softcap", "mla")
MLA_HQ, MLA_D, MLA_DV = 16, 576, 512  # DeepSeek-V3 absorbed MLA, 128 heads over 8 ranks


def serving_steps() -> list[dict]:
    """60 steps: (name, q lens, context lens), as a serving engine meets them after start-up."""
    import random

    rnd = random.Random(0)
    steps = []
    for i in range(60):
        kind = ("decode", "decode", "decode", "prefill", "mixed", "verify")[i % 6]
        if kind == "decode":
            b = rnd.choice([1, 2, 4, 7, 16, 32, 64, 128, 256])
            ctx = rnd.choice([512, 2048, 8192, 32768]) if b <= 16 else rnd.choice([512, 1024, 2048])
            steps.append(dict(kind=kind, q=[1] * b, k=[ctx - j for j in range(b)]))
        elif kind == "prefill":
            n = rnd.choice([256, 1024, 2048])
            steps.append(dict(kind=kind, q=[n], k=[n]))
        elif kind == "mixed":
            b = rnd.choice([4, 16, 64])
            steps.append(dict(kind=kind, q=[512] + [1] * b, k=[1024] + [rnd.choice([256, 4096]) for _ in range(b)]))
        else:
            b = rnd.choice([1, 8, 32])
            steps.append(dict(kind=kind, q=[4] * b, k=[rnd.choice([1024, 16384]) for _ in range(b)]))
    return steps


def child(mode: str, out_path: str) -> None:
    import torch

    from vllm_xpu_attn.kernels.api import PagedStep, LayerConsts, get_provider

    prov = get_provider("triton")
    if mode == "off":
        type(prov).warm_once = lambda *a, **k: None
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    max_ctx = 32768
    pages = 256 * 2048 // PAGE + max_ctx // PAGE + 8
    caches = {}
    mla_call = LayerConsts.make(MLA_HQ, 1, MLA_D, MLA_DV, mla=True)
    for kind in KINDS:
        if kind == "mla":
            kv = torch.randn(pages, PAGE, 1, MLA_D, device=dev, dtype=torch.bfloat16, generator=g)
            caches[kind] = (kv, kv[..., :MLA_DV])
            continue
        dt = torch.float8_e4m3fn if kind == "fp8" else torch.bfloat16
        k = torch.randn(pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16, generator=g).to(dt)
        v = torch.randn(pages, PAGE, HKV, D, device=dev, dtype=torch.bfloat16, generator=g).to(dt)
        caches[kind] = (k, v)
    sinks = torch.randn(HQ, device=dev, dtype=torch.float32, generator=g)
    one = torch.ones(1, device=dev, dtype=torch.float32)

    def step(qlens: list[int], klens: list[int]) -> None:
        b = len(qlens)
        width = -(-max(klens) // PAGE)
        table = torch.randint(0, pages, (b, width), device=dev, dtype=torch.int32, generator=g)
        cu = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), device=dev, dtype=torch.int32)
        seq = torch.tensor(klens, device=dev, dtype=torch.int32)
        q = torch.randn(sum(qlens), HQ, D, device=dev, dtype=torch.bfloat16, generator=g)
        for kind in KINDS:
            kc, vc = caches[kind]
            if kind == "mla":
                qm = torch.randn(sum(qlens), MLA_HQ, MLA_D, device=dev, dtype=torch.bfloat16, generator=g)
                plan = PagedStep(cu, seq, table, max(qlens), width * PAGE, PAGE)
                prov.arm_paged(plan, mla_call).run(qm, kc, vc, torch.empty(len(qm), MLA_HQ, MLA_DV, device=dev,
                                                                            dtype=torch.bfloat16))
                continue
            kw = {}
            if kind == "fp8":
                kw = dict(k_descale=one, v_descale=one)
            elif kind != "plain":
                kw = dict(window_size=(1023, 0), sinks=sinks, softcap=30.0)
            prov.flash_attn_with_kvcache(q, kc, vc, table, seq, cu, max(qlens), **kw)

    from vllm_xpu_attn.kernels.providers.triton import kernels as K

    jits = [getattr(K, n) for n in dir(K) if hasattr(getattr(K, n), "device_caches")]

    def compiled() -> int:  # kernels Triton has compiled in this process (its in-memory caches)
        return sum(len(c[0]) for fn in jits for c in fn.device_caches.values())

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step([256], [256])  # the engine's start-up: a prefill and a decode step per layer kind
    step([1] * 8, [300] * 8)
    torch.cuda.synchronize()
    startup = time.perf_counter() - t0
    n0 = n_startup = compiled()
    times = []
    for s in serving_steps():
        t = time.perf_counter()
        step(s["q"], s["k"])
        torch.cuda.synchronize()
        n = compiled()
        times.append(dict(kind=s["kind"], batch=len(s["q"]), max_ctx=max(s["k"]), s=time.perf_counter() - t,
                          compiled=n - n0))
        n0 = n
    json.dump(dict(mode=mode, startup_s=startup, startup_compiled=n_startup, steps=times), open(out_path, "w"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.out)
    out_dir = os.environ.get("OUT") or os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    res = {}
    for mode in ("warmup", "off"):
        with tempfile.TemporaryDirectory() as cache, tempfile.NamedTemporaryFile(suffix=".json") as f:
            env = dict(os.environ, TRITON_CACHE_DIR=cache)
            subprocess.run([sys.executable, __file__, "--child", mode, "--out", f.name], env=env, check=True)
            r = json.load(open(f.name))
        ts = sorted(s["s"] for s in r["steps"])
        med = ts[len(ts) // 2]
        stalls = [s for s in r["steps"] if s["s"] > max(20 * med, 0.1)]
        r.update(median_step_s=med, stalls=stalls, n_stalls=len(stalls), stall_s=sum(s["s"] for s in stalls),
                 compiled_while_serving=sum(s["compiled"] for s in r["steps"]))
        res[mode] = r
        print(f"{mode}: start-up {r['startup_s']:.1f} s ({r['startup_compiled']} kernels compiled), median step "
              f"{med * 1e3:.2f} ms, {r['compiled_while_serving']} kernels compiled while serving, {len(stalls)} "
              f"stalls ({r['stall_s']:.1f} s): " + ", ".join(
                  f"{s['kind']} b{s['batch']} ctx{s['max_ctx']} {s['s']:.2f}s ({s['compiled']} compiled)"
                  for s in stalls), flush=True)
    import torch

    res["device"] = torch.cuda.get_device_name()
    res["layer_kinds"] = dict(heads=f"{HQ}/{HKV}", head_dim=D, page=PAGE, kinds=KINDS)
    path = os.path.join(out_dir, "compile_stalls.json")
    json.dump(res, open(path, "w"), indent=1)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 3.5))
        for mode in ("off", "warmup"):
            ax.plot([s["s"] * 1e3 for s in res[mode]["steps"]], marker="o", ms=3,
                    label=f"{mode}: start-up {res[mode]['startup_s']:.0f} s, {res[mode]['n_stalls']} stalls")
        ax.set_yscale("log")
        ax.set_xlabel("serving step (after start-up)")
        ax.set_ylabel(f"step time, ms ({len(KINDS)} layer kinds)")
        ax.set_title(f"Cold Triton cache, {res['device']}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(path.replace(".json", ".png"), dpi=120)
    except ImportError:
        pass
    print("wrote", path)


if __name__ == "__main__":
    main()
