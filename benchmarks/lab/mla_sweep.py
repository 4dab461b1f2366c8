"""Which tiles could take absorbed-MLA decode toward FlashMLA on the H200 (issue: MLA decode at FlashMLA class)?

A sweep of the MLA kernel's launch tiles (BLOCK_H, BLOCK_N, warps, stages) crossed with its latent tiles
(BLOCK_DC: the scores' chunk over the latent; BLOCK_DV: output columns per program, each column program
recomputing the scores), at the issue's shapes: every candidate with a bf16 latent cache, then the shipped and the
``--top`` fastest of those with e4m3. Every configuration is checked
against an fp32 MQA over the gathered latent rows before it is timed; one JSON line per (config, shape, dtype):
back-to-back us, TFLOP/s (2 x batch x heads x ctx x (576 + 512)), % of the copy bandwidth measured in the same
run, or the error a configuration ends in (shared memory, registers).

    PYTHONPATH=. python benchmarks/lab/mla_sweep.py --shapes 0,1 > mla_sweep.jsonl    # CUDA machine
    PYTHONPATH=. python benchmarks/lab/mla_sweep.py --config '[[64, 64, 8, 2], [0, 256]]'   # one config, all shapes
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/lab/mla_sweep.py --cpu          # dry check, tiny sizes

The provider's tile tables (tuning.TUNING, tuning.MLA_LATENT_TILES) are set per configuration and its kept launch
configurations cleared in between; the shipped entries are restored at the end. ``benchmarks/lab/gpu_mla.sh``
is the device call that runs this and profiles the shipped and the fastest configuration under Nsight Compute.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # timing.py

from vllm_xpu_attn.kernels.api import PagedStep, LayerConsts, get_provider  # noqa: E402
from vllm_xpu_attn.kernels.api import LayerTensors  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton import tiles, tuning  # noqa: E402

D_C, D_R, PAGE = 512, 64, 64
SCALE = 192 ** -0.5
# (heads, batch, ctx): the table
SHAPES = [(128, 64, 4096), (16, 64, 4096), (128, 256, 1024), (128, 8, 32768), (16, 1, 8192)]
# wide (>= 64 heads: compute-bound, heads are the dots' M) and narrow (16 heads: bandwidth-bound) candidates
WIDE = [(bh, bn, w, st) for bh, bn, w, st in itertools.product((64, 128), (32, 64), (4, 8), (1, 2))
        if not (bh == 128 and w == 4)] + [(32, 64, 4, 2), (32, 32, 4, 3)]
NARROW = [(16, 32, 4, 2), (16, 64, 4, 2), (16, 64, 4, 3), (16, 32, 2, 3), (16, 128, 4, 2), (16, 64, 8, 2)]
LATENT = [(0, 0), (0, 256), (128, 256)]  # (BLOCK_DC, BLOCK_DV); 0 = the whole latent (fused)


def case(h: int, b: int, ctx: int, kv: str, device: str, g: torch.Generator):
    """Inputs, the fp32 reference [b, h, D_C] and the FLOP count of one decode step."""
    pages = b * -(-ctx // PAGE)
    cache = torch.randn(pages, PAGE, 1, D_C + D_R, device=device, generator=g) * 0.3
    cache = cache.to(torch.float8_e4m3fn) if kv == "e4m3" else cache.bfloat16()
    q = (torch.randn(b, h, D_C + D_R, device=device, generator=g) * 0.3).bfloat16()
    table = torch.randperm(pages, device=device, generator=g).to(torch.int32).reshape(b, -1)
    lens = torch.full((b,), ctx, dtype=torch.int32, device=device)
    rows = cache[table.long()].reshape(b, -1, D_C + D_R)[:, :ctx].float()
    p = torch.softmax(torch.einsum("bhd,bkd->bhk", q.float(), rows) * SCALE, -1)
    ref = torch.einsum("bhk,bkc->bhc", p, rows[..., :D_C])
    return dict(q=q, cache=cache, table=table, lens=lens, ref=ref, flop=2 * b * h * ctx * (D_C + D_R + D_C),
                nbytes=b * ctx * (D_C + D_R) * cache.element_size())


def run_one(c: dict, h: int, b: int, ctx: int, device: str, timed: bool, n: int) -> dict:
    step = PagedStep(torch.arange(b + 1, dtype=torch.int32, device=device), c["lens"], c["table"], 1, ctx, PAGE)
    call = LayerConsts.make(h, 1, D_C + D_R, D_C, softmax_scale=SCALE, mla=True)
    launch = get_provider("triton").arm_paged(step, call)
    out = torch.empty(b, h, D_C, dtype=torch.bfloat16, device=device)
    kw = {}
    if c["cache"].dtype == torch.float8_e4m3fn:
        one = torch.ones(1, device=device)
        kw["layer"] = LayerTensors.make(call, device=device, kv_dtype=c["cache"].dtype, k_descale=one, v_descale=one)

    def fn():
        return launch.run(c["q"], c["cache"], c["cache"][..., :D_C], out, **kw)

    fn()
    if not timed:
        fn()  # the profiled launch (the first one compiled)
    err = (out.float() - c["ref"]).abs().max().item()
    row = {"err": err, "splits": getattr(launch, "num_splits", None)}
    # what was launched (the tile tables are read when the launch is planned): the check that a config took
    variants = getattr(get_provider("triton"), "launched_variants", None)  # older trees (ab_mla.py) lack it
    launched = variants("_mla_attn_kernel") if variants else []
    keys = ("BLOCK_H", "BLOCK_N", "BLOCK_DC", "BLOCK_DV")
    row["launched"] = sorted({tuple(v.get(k) for k in keys) for v in launched})
    if timed:
        from timing import throughput

        t = min(throughput(fn, n=n) for _ in range(3))
        row.update(us=round(t * 1e6, 2), tflops=round(c["flop"] / t / 1e12, 1), tbps=round(c["nbytes"] / t / 1e12, 3))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu", action="store_true", help="dry check in the Triton interpreter: tiny shapes, no timing")
    ap.add_argument("--dtypes", default="bf16,e4m3")
    ap.add_argument("--shapes", default=None, help="indices into SHAPES, comma-separated (default: all)")
    ap.add_argument("--n", type=int, default=20, help="back-to-back calls per timing")
    ap.add_argument("--config", default=None, help='one configuration only, JSON [[BLOCK_H, BLOCK_N, warps, stages], '
                    '[BLOCK_DC, BLOCK_DV]] or "shipped"')
    ap.add_argument("--top", type=int, default=4, help="later dtypes: the shipped + the first dtype's K fastest")
    ap.add_argument("--profile", action="store_true", help="no timing: the launch twice (for ncu --launch-skip 1)")
    a = ap.parse_args()
    device = "cpu" if a.cpu else "cuda"
    fam = tiles.device_family(torch.device(device))
    shapes, wide, narrow, latent = SHAPES, WIDE, NARROW, LATENT
    if a.cpu:  # the interpreter: small heads/contexts and two configs per kind, to check the script itself
        shapes = [(64, 2, 96), (16, 1, 130)]
        wide, narrow, latent = [(32, 16, 1, 1)], [(16, 16, 1, 1)], [(0, 0), (128, 256)]
    if a.shapes is not None:
        shapes = [shapes[int(i)] for i in a.shapes.split(",")]
    saved_t = dict(tuning.TUNING[fam])
    saved_l = dict(tuning.MLA_LATENT_TILES[fam])
    g = torch.Generator(device=device).manual_seed(0)
    if not a.cpu:
        from timing import copy_tbps

        print(json.dumps({"copy_tbps": copy_tbps(back_to_back=True, n=20), "family": fam,
                          "shipped": {k: saved_t.get(k) for k in ("mla_decode", "mla_wide")},
                          "shipped_latent": saved_l, "device": torch.cuda.get_device_name()}), flush=True)
    try:
        for h, b, ctx in shapes:
            phase = "mla_wide" if h >= 64 else "mla_decode"
            first = []  # the first dtype's results at this shape: the later dtypes time its top configurations
            for i, kv in enumerate(a.dtypes.split(",")):
                c = case(h, b, ctx, kv, device, g)
                cands = [("shipped", tuple(saved_t[phase][:4]), tuple(saved_l[phase]))]
                if a.config not in (None, "shipped"):
                    t_, l_ = json.loads(a.config)
                    cands = [("config", tuple(t_), tuple(l_))]
                elif a.config is None and i == 0:
                    cands += [("sweep", t, lat) for t in (wide if h >= 64 else narrow) for lat in latent
                              if (t, lat) != cands[0][1:]]
                elif a.config is None:
                    timed = sorted((r for r in first if r.get("ok") and r["tag"] == "sweep"),
                                   key=lambda r: r.get("us", 0.0))
                    cands += [("sweep", tuple(r["tiles"]), tuple(r["latent"])) for r in timed[:a.top]]
                for tag, t, lat in cands:
                    tuning.TUNING[fam][phase] = tuple(t) + tuple(saved_t[phase][4:])
                    tuning.MLA_LATENT_TILES[fam][phase] = tuple(lat)
                    get_provider("triton").clear_caches()  # kept launch configurations hold their tiles
                    row = {"tag": tag, "shape": [h, b, ctx], "kv": kv, "tiles": list(t), "latent": list(lat)}
                    t0 = time.time()
                    try:
                        row.update(run_one(c, h, b, ctx, device, timed=not (a.cpu or a.profile), n=a.n))
                        row["ok"] = row["err"] < (0.1 if kv == "e4m3" else 0.02)
                    except Exception as e:  # noqa: BLE001 - a tile that does not fit is a result, not a crash
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                    row["wall_s"] = round(time.time() - t0, 1)
                    print(json.dumps(row), flush=True)
                    if i == 0:
                        first.append(row)
                del c
                if device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        tuning.TUNING[fam].update(saved_t)
        tuning.MLA_LATENT_TILES[fam].update(saved_l)
        get_provider("triton").clear_caches()


if __name__ == "__main__":
    main()
