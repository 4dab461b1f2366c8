"""A/B of two source trees' paged kernels in separate processes (H200): dense decode and prefill at the standard
shapes plus the features and head dims whose code paths differ (softcap, sinks, ALiBi, D 256, D 64).

    git archive OLD vllm_xpu_attn | tar -x -C /tmp/old
    python benchmarks/lab/ab_trees.py /tmp/old . [REPS=2] > ab.jsonl   # one JSON line per (rep, tree, case)

Each tree runs in its own process (its own kernels.py, tiles and launch code: a constexpr one tree lacks cannot
cross), alternating old/new per rep (the machine is shared); back-to-back throughput (timing.py), decode as % of
a 256 MB device copy measured in the same process, prefill as TFLOP/s. The summary (medians, new/old time) goes
to stderr. bf16, page 64, shuffled pages, causal.
"""

import json
import math
import os
import statistics
import subprocess
import sys

# (name, batch, q_len, k_len, q heads, kv heads, head dim, feature)
CASES = [
    ("dec 64x4096", 64, 1, 4096, 32, 8, 128, None), ("dec 256x1024", 256, 1, 1024, 32, 8, 128, None),
    ("dec 8x32768", 8, 1, 32768, 32, 8, 128, None), ("dec 64x4096 softcap", 64, 1, 4096, 32, 8, 128, "softcap"),
    ("dec 64x4096 sinks", 64, 1, 4096, 32, 8, 128, "sinks"),
    ("dec 64x4096 softcap+sinks", 64, 1, 4096, 32, 8, 128, "softcap+sinks"),
    ("dec d256 64x4096", 64, 1, 4096, 16, 8, 256, None), ("dec 64x4096 alibi", 64, 1, 4096, 32, 8, 128, "alibi"),
    ("dec 8x32768 alibi", 8, 1, 32768, 32, 8, 128, "alibi"), ("pre 1x8192 alibi", 1, 8192, 8192, 32, 8, 128, "alibi"),
    ("pre 16x512 on 2048 alibi", 16, 512, 2560, 32, 8, 128, "alibi"), ("pre 1x8192", 1, 8192, 8192, 32, 8, 128, None),
    ("pre 16x512 on 2048", 16, 512, 2560, 32, 8, 128, None),
    ("pre 1x8192 softcap+sinks", 1, 8192, 8192, 32, 8, 128, "softcap+sinks"),
    ("pre d256 1x4096", 1, 4096, 4096, 16, 8, 256, None),
    ("dec d64 64x4096", 64, 1, 4096, 64, 8, 64, None), ("pre d64 1x8192", 1, 8192, 8192, 64, 8, 64, None),
]


def one_tree(tree: str, label: str) -> None:
    """Time every case with ``tree``'s package (this process imports it first on sys.path)."""
    sys.path[:0] = [os.path.abspath(tree), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    import torch

    import vllm_xpu_attn
    from timing import throughput

    assert vllm_xpu_attn.__file__.startswith(os.path.abspath(tree)), vllm_xpu_attn.__file__
    try:
        from vllm_xpu_attn.kernels.api import get_provider
    except ImportError:  # a tree from before kernels/api (up to 6d00e72)
        from vllm_xpu_attn.kernels import get_provider

    tri = get_provider("triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    buf = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy_tbps = 2 * buf.numel() / throughput(lambda: buf.clone(), n=20) / 1e12
    del buf
    for name, batch, q_len, k_len, hq, hkv, d, feat in CASES:
        pages = math.ceil(k_len / 64)
        kc = torch.randn(batch * pages, 64, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        vc = torch.randn_like(kc)
        pt = torch.randperm(batch * pages, device="cuda", generator=gen).to(torch.int32).reshape(batch, pages)
        q = torch.randn(batch * q_len, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        seq = torch.full((batch,), k_len, device="cuda", dtype=torch.int32)
        cu = torch.arange(0, batch * q_len + 1, q_len, device="cuda", dtype=torch.int32)
        kw = {}
        if feat and "softcap" in feat:
            kw["softcap"] = 30.0
        if feat and "sinks" in feat:
            kw["sinks"] = torch.randn(hq, device="cuda", generator=gen)
        if feat == "alibi":
            kw["alibi_slopes"] = torch.tensor([2 ** (-8 * (i + 1) / hq) for i in range(hq)], device="cuda")
        t = throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len, causal=True, **kw),
                       n=20 if q_len > 1 else 50)
        if q_len == 1:
            val = {"pct_copy": round(100 * 2 * kc.numel() * kc.element_size() / t / 1e12 / copy_tbps, 1)}
        else:
            pairs = q_len * (k_len - q_len) + q_len * (q_len + 1) / 2  # bottom-right causal
            val = {"tflops": round(4 * d * hq * batch * pairs / t / 1e12, 1)}
        print(json.dumps({"tree": label, "case": name, "us": round(t * 1e6, 1), **val}), flush=True)
        del q, kc, vc


def main() -> None:
    if sys.argv[1] == "--one":
        one_tree(sys.argv[2], sys.argv[3])
        return
    old, new = sys.argv[1], sys.argv[2]
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    rows = []
    for rep in range(reps):
        for tree, label in ((old, "old"), (new, "new")):
            out = subprocess.run([sys.executable, __file__, "--one", tree, label], check=True, capture_output=True,
                                 text=True).stdout
            for line in out.splitlines():
                rows.append(dict(json.loads(line), rep=rep))
                print(json.dumps(rows[-1]), flush=True)
    for name, *_ in CASES:
        o = statistics.median(r["us"] for r in rows if r["case"] == name and r["tree"] == "old")
        n = statistics.median(r["us"] for r in rows if r["case"] == name and r["tree"] == "new")
        print(f"{name:28s} old {o:9.1f} us  new {n:9.1f} us  new/old time {n / o:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
