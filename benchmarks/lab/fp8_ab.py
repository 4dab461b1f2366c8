"""FP8 vs bf16 decode, two source trees A/B'd in separate processes (H200): paged decode (32 q / 8 KV heads, D 128,
page 64, per-[batch, Hkv] descales) at the three standard shapes and absorbed-MLA decode (latent 512 + 64, page 64,
per-tensor descale), bf16 / e4m3 / e5m2 caches, bf16 queries; per-layer path (plan once, ``run`` per call: what the
engines launch), back-to-back throughput (timing.py); paged decode as % of a device copy measured in the same
process, by bytes read. Each case's max |error| against an fp32 evaluation of the same (dequantised) cache.

    git archive OLD vllm_xpu_attn | tar -x -C /tmp/old
    python benchmarks/lab/fp8_ab.py /tmp/old . [REPS=2] [--tiles] > fp8_ab.jsonl

``--tiles``: the new tree also times candidate "decode_fp8" key tiles (BLOCK_M, BLOCK_N, warps, stages).
"""

import json
import math
import os
import statistics
import subprocess
import sys

PAGED = [(64, 4096), (256, 1024), (8, 32768)]
MLA = [(16, 64, 4096), (128, 64, 4096)]
DTYPES = ("bf16", "e4m3", "e5m2")
# (the PTX-operand form, tuning.FP8_OPERANDS "ptx", holds 104-184 registers where the cast form took 255: wider tiles)
FP8_TILES = [(16, 64, 2, 3), (16, 64, 4, 2), (16, 64, 4, 3), (16, 64, 8, 2), (16, 128, 4, 2), (16, 128, 8, 2),
             (16, 32, 4, 3), (16, 128, 4, 3)]
MLA_ON = os.environ.get("FP8_AB_MLA", "1") != "0"  # FP8_AB_MLA=0: paged decode only; "only": MLA only
PAGED_ON = os.environ.get("FP8_AB_MLA", "1") != "only"
if os.environ.get("FP8_AB_TILES"):  # a JSON list of [BLOCK_M, BLOCK_N, warps, stages] replaces the sweep
    FP8_TILES = [tuple(t) for t in json.loads(os.environ["FP8_AB_TILES"])]


def one_tree(tree: str, label: str, tiles: bool) -> None:
    sys.path[:0] = [os.path.abspath(tree), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    import torch

    import vllm_xpu_attn
    from timing import throughput

    assert vllm_xpu_attn.__file__.startswith(os.path.abspath(tree)), vllm_xpu_attn.__file__
    from vllm_xpu_attn.kernels.api import PagedStep, LayerConsts, get_provider
    from vllm_xpu_attn.kernels.api import LayerTensors
    from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
    from vllm_xpu_attn.kernels.providers.triton.tuning import TUNING

    tri = get_provider("triton")
    fam = device_family(torch.device("cuda"))
    dts = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    gen = torch.Generator(device="cuda").manual_seed(0)
    buf = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy = 2 * buf.numel() / throughput(lambda: buf.clone(), n=20) / 1e12
    del buf
    hq, hkv, d, page = 32, 8, 128, 64
    for batch, ctx in PAGED if PAGED_ON else []:
        for name in DTYPES:
            pages = batch * math.ceil(ctx / page)
            kc = torch.randn(pages, page, hkv, d, device="cuda", generator=gen).to(dts[name])
            vc = torch.randn(pages, page, hkv, d, device="cuda", generator=gen).to(dts[name])
            pt = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).reshape(batch, -1)
            q = torch.randn(batch, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
            seq = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
            cu = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
            call = LayerConsts.make(hq, hkv, d)
            kw = {}
            if name != "bf16":
                kw = dict(k_descale=torch.rand(batch, hkv, device="cuda", generator=gen) + 0.5,
                          v_descale=torch.rand(batch, hkv, device="cuda", generator=gen) + 0.5)
            layer = LayerTensors.make(call, device=q.device, kv_dtype=dts[name], batch=batch, **kw)
            step = PagedStep(cu, seq, pt, 1, pt.shape[1] * page, page)
            out = torch.empty(batch, hq, d, device="cuda", dtype=torch.bfloat16)
            byts = 2 * batch * ctx * hkv * d * kc.element_size()
            # fp32 oracle over the gathered, dequantised rows
            ks = kw.get("k_descale", torch.ones(batch, hkv, device="cuda"))
            vs = kw.get("v_descale", torch.ones(batch, hkv, device="cuda"))
            kk = kc[pt.long()].reshape(batch, -1, hkv, d)[:, :ctx].float() * ks[:, None, :, None]
            vv = vc[pt.long()].reshape(batch, -1, hkv, d)[:, :ctx].float() * vs[:, None, :, None]
            kk, vv = kk.repeat_interleave(hq // hkv, 2), vv.repeat_interleave(hq // hkv, 2)
            s = torch.einsum("bhd,bkhd->bhk", q.float(), kk) * d ** -0.5
            want = torch.einsum("bhk,bkhd->bhd", torch.softmax(s, -1), vv)
            del kk, vv, s
            cands = [None] + (FP8_TILES if tiles and name != "bf16" else [])
            saved = TUNING[fam].get("decode_fp8")
            for cfg in cands:
                if cfg is not None:
                    TUNING[fam]["decode_fp8"] = cfg
                tri.clear_caches()
                launch = tri.arm_paged(step, call)
                run = lambda: launch.run(q, kc, vc, out, layer=layer)  # noqa: E731
                run()
                err = (out.float() - want).abs().max().item()
                t = min(throughput(run, n=50) for _ in range(3))
                print(json.dumps({"tree": label, "case": f"paged {batch}x{ctx}", "dtype": name,
                                  "tile": cfg or (saved if name != "bf16" else TUNING[fam]["decode"]),
                                  "us": round(t * 1e6, 1), "pct_copy": round(100 * byts / t / 1e12 / copy, 1),
                                  "max_err": round(err, 5), "sweep": cfg is not None}), flush=True)
            if saved is not None:
                TUNING[fam]["decode_fp8"] = saved
            else:  # a family without its own FP8 tile: leave none behind
                TUNING[fam].pop("decode_fp8", None)
            tri.clear_caches()
            del kc, vc, q, want
    d_c, d_r = 512, 64
    for h, batch, ctx in MLA if MLA_ON else []:
        for name in DTYPES:
            pages = batch * (ctx // page)
            cache = (torch.randn(pages, page, 1, d_c + d_r, device="cuda", generator=gen) * 2).to(dts[name])
            pt = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).reshape(batch, -1)
            q = (torch.randn(batch, h, d_c + d_r, device="cuda", generator=gen) * 0.3).bfloat16()
            seq = torch.full((batch,), ctx, device="cuda", dtype=torch.int32)
            cu = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
            scale = 192 ** -0.5
            call = LayerConsts.make(h, 1, d_c + d_r, d_c, softmax_scale=scale, mla=True)
            kw = {} if name == "bf16" else dict(k_descale=torch.tensor([0.375], device="cuda"),
                                                v_descale=torch.tensor([0.375], device="cuda"))
            layer = LayerTensors.make(call, device=q.device, kv_dtype=dts[name], **kw)
            step = PagedStep(cu, seq, pt, 1, pt.shape[1] * page, page)
            out = torch.empty(batch, h, d_c, device="cuda", dtype=torch.bfloat16)
            tri.clear_caches()
            launch = tri.arm_paged(step, call)
            run = lambda: launch.run(q, cache, cache[..., :d_c], out, layer=layer)  # noqa: E731
            run()
            ds = 0.375 if kw else 1.0
            errs = []
            for i in range(0, batch, 8):
                rows = cache[pt[i].long()].reshape(-1, d_c + d_r)[:ctx].float() * ds
                p = torch.softmax(q[i].float() @ rows.T * scale, -1)
                errs.append((out[i].float() - p @ rows[:, :d_c]).abs().max().item())
            t = min(throughput(run, n=20) for _ in range(3))
            print(json.dumps({"tree": label, "case": f"mla {h}x{batch}x{ctx}", "dtype": name,
                              "us": round(t * 1e6, 1), "max_err": round(max(errs), 5)}), flush=True)
            del cache, q


def main() -> None:
    if sys.argv[1] == "--one":
        one_tree(sys.argv[2], sys.argv[3], sys.argv[4] == "1")
        return
    args = [a for a in sys.argv[1:] if a != "--tiles"]
    old, new = args[0], args[1]
    reps = int(args[2]) if len(args) > 2 else 2
    rows = []
    for rep in range(reps):
        for tree, label in ((old, "old"), (new, "new")):
            tiles = "1" if ("--tiles" in sys.argv and label == "new" and rep == 0) else "0"
            out = subprocess.run([sys.executable, __file__, "--one", tree, label, tiles], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout  # the child's errors reach stderr
            for line in out.splitlines():
                rows.append(dict(json.loads(line), rep=rep))
                print(json.dumps(rows[-1]), flush=True)
    keys = sorted({(r["case"], r["dtype"]) for r in rows}, key=lambda k: (k[0], DTYPES.index(k[1])))
    for case, dt in keys:
        def med(label):
            return statistics.median(r["us"] for r in rows if r["case"] == case and r["dtype"] == dt
                                     and r["tree"] == label and not r.get("sweep"))
        o, n = med("old"), med("new")
        print(f"{case:22s} {dt:5s} old {o:8.1f} us  new {n:8.1f} us  new/old {n / o:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
