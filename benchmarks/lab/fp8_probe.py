"""FP8 (e4m3) vs bf16 paged decode on the GPU: time per call (back-to-back) at the standard shapes, bytes/s.

    python benchmarks/lab/fp8_probe.py [--one SHAPE_INDEX DTYPE] [--tile B,N,W,S] [--chunk-dv N] [--dtypes bf16,e4m3]
        [--out FILE]   (32 q / 8 KV heads, D 128, page 64)

``--chunk-dv N``: FP8 decode's output-column programs (tuning.PAGED_D_TILES "decode_fp8_d128" = (0, N); bf16 rows
keep the whole width): each program reads all of K (the sibling's read is an L2 hit when they run together) and N
columns of V; the FP8 (16, 64, 2, 3) tile holds 168 registers at N = 64 against 250 (cuda_aot.py).
"""

import argparse, json, math, os, sys
import torch

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(_BENCH))
sys.path.insert(0, _BENCH)  # the package's repository; timing.py
from timing import throughput  # noqa: E402
from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402

HQ, HKV, D, PAGE = 32, 8, 128, 64
SHAPES = [(64, 4096), (256, 1024), (8, 32768)]


def inputs(batch, k_len, dtype, gen):
    pages_per = math.ceil(k_len / PAGE)
    n = batch * pages_per
    kc = torch.randn(n, PAGE, HKV, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    vc = torch.randn_like(kc)
    if dtype != torch.bfloat16:
        kc, vc = kc.to(dtype), vc.to(dtype)
    pt = torch.randperm(n, device="cuda", generator=gen).to(torch.int32).reshape(batch, pages_per)
    q = torch.randn(batch, HQ, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    seq = torch.full((batch,), k_len, device="cuda", dtype=torch.int32)
    cu = torch.arange(0, batch + 1, device="cuda", dtype=torch.int32)
    return q, kc, vc, pt, seq, cu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("SHAPE", "DTYPE"), help="run one shape once (for ncu)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tile", default=None, help='"BLOCK_M,BLOCK_N,WARPS,STAGES": the decode_fp8 tile for this run')
    ap.add_argument("--chunk-dv", type=int, default=0, help="FP8 decode's CHUNK_DV at D 128 (0: the shipped table)")
    ap.add_argument("--dtypes", default="bf16,e4m3,e5m2")
    a = ap.parse_args()
    prov = get_provider("triton")
    from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
    from vllm_xpu_attn.kernels.providers.triton.tuning import PAGED_D_TILES, TUNING

    fam = device_family(torch.device("cuda"))
    if a.tile:
        TUNING[fam]["decode_fp8"] = tuple(int(x) for x in a.tile.split(","))
    if a.chunk_dv:
        PAGED_D_TILES.setdefault(fam, {})["decode_fp8_d128"] = (0, a.chunk_dv)
    gen = torch.Generator(device="cuda").manual_seed(0)
    dts = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    shapes = SHAPES if a.one is None else [SHAPES[int(a.one[0])]]
    names = a.dtypes.split(",") if a.one is None else [a.one[1]]
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    copy = 2 * x.numel() / throughput(lambda: y.copy_(x), 20) / 1e12
    del x, y
    res = {"copy_TBps": copy, "rows": []}
    for b, k in shapes:
        for name in names:
            dt = dts[name]
            q, kc, vc, pt, seq, cu = inputs(b, k, dt, gen)
            kw = {}
            if dt != torch.bfloat16:
                kw = dict(
                    k_descale=torch.full((b, HKV), 0.5, device="cuda"),
                    v_descale=torch.full((b, HKV), 0.25, device="cuda"),
                )
            out = torch.empty(b, HQ, D, device="cuda", dtype=torch.bfloat16)
            fn = lambda: prov.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, out=out, **kw)
            if a.one is not None:
                fn()
                torch.cuda.synchronize()
                fn()
                torch.cuda.synchronize()
                return
            t = min(throughput(fn) for _ in range(3))
            byts = 2 * b * k * HKV * D * kc.element_size()
            row = {
                "tile": a.tile,
                "chunk_dv": a.chunk_dv,
                "batch": b,
                "ctx": k,
                "dtype": name,
                "us": t * 1e6,
                "TBps": byts / t / 1e12,
                "pct_copy": 100 * byts / t / 1e12 / copy,
            }
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
    if a.out:
        open(a.out, "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
