"""Correctness check of the peer-kernel wrappers (benchmarks/peers.py) against naive torch.

    TRITON_INTERPRET=1 .venvs/core/bin/python benchmarks/check_peers.py          # CPU, interpreter
    python benchmarks/check_peers.py --device cuda                               # GPU, compiled

Tiny paged shapes (batch 2, 4 q heads / 2 KV heads, head dim 64, page 16, ~40 keys); fp32 and
fp16 under the interpreter (which cannot do bf16 arithmetic), + bf16 on CUDA; on CUDA also a larger case (32/8 heads, D 128, page 64, up to 4k keys). Pages are handed
out in random order and every slot no sequence owns (unused pages, the tail of each last
page) holds NaN, so a kernel that reads a slot it should not shows up as a NaN output.
Exit status 1 if any case is off by more than its tolerance.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
ap.add_argument("--dtypes", default=None,
                help="default: float32,float16 on cpu (interpreter), float32,bfloat16,float16 on cuda")
ap.add_argument("--only", default="", help="comma list of case-name prefixes (vllm, sglang, mla)")
args = ap.parse_args()
if args.device == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import warnings  # numpy noise from the interpreter evaluating masked-out (-inf / NaN) lanes

    warnings.filterwarnings("ignore", category=RuntimeWarning)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402

DEV = torch.device(args.device)


def paged(lens, q_lens, hq, hkv, d, page, dtype, gen, dv=None, shared_kv=False):
    """Random paged cache [num_blocks, page, Hkv, D] (+ NaN in unowned slots) and queries."""
    batch = len(lens)
    per = [math.ceil(n / page) for n in lens]
    n_blocks = sum(per) + 3  # 3 pages nobody owns
    order = torch.randperm(n_blocks, generator=gen).tolist()
    table = torch.full((batch, max(per) + 1), order[-1], dtype=torch.int32)  # pad -> unowned page
    k = torch.full((n_blocks, page, hkv, d), float("nan"))
    v = torch.full((n_blocks, page, hkv, dv or d), float("nan"))
    kd, vd, i = [], [], 0
    for b, n in enumerate(lens):
        kb = torch.randn(n, hkv, d, generator=gen)
        vb = kb[..., : dv] if shared_kv else torch.randn(n, hkv, dv or d, generator=gen)
        for p in range(per[b]):
            blk = order[i]
            i += 1
            table[b, p] = blk
            lo, hi = p * page, min(n, (p + 1) * page)
            k[blk, : hi - lo] = kb[lo:hi]
            v[blk, : hi - lo] = vb[lo:hi]
        kd.append(kb.to(dtype).float())
        vd.append(vb.to(dtype).float())
    q = torch.randn(sum(q_lens), hq, d, generator=gen)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32)
    return (q.to(dtype).to(DEV), k.to(dtype).to(DEV), v.to(dtype).to(DEV), table.to(DEV),
            torch.tensor(lens, dtype=torch.int32, device=DEV), cu.to(DEV), kd, vd)


def reference(q, kd, vd, lens, q_lens, scale, dv=None):
    """Naive fp32 causal attention; the queries are the last q_len tokens of each sequence."""
    hq = q.shape[1]
    outs, start = [], 0
    for b, (n, ql) in enumerate(zip(lens, q_lens)):
        qb = q[start:start + ql].float().cpu()  # [ql, Hq, D]
        start += ql
        rep = hq // kd[b].shape[1]
        kb = kd[b].repeat_interleave(rep, dim=1)  # [n, Hq, D]
        vb = vd[b].repeat_interleave(rep, dim=1)
        s = torch.einsum("qhd,khd->hqk", qb, kb) * scale
        qpos = torch.arange(n - ql, n)[:, None]
        s = s.masked_fill(torch.arange(n)[None, :] > qpos, float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", s.softmax(-1), vb))
    return torch.cat(outs)


RESULTS = []


def record(name, dtype, out, ref, extra=""):
    out = out.float().cpu()
    err = (out - ref).abs().max().item() if torch.isfinite(out).all() else float("nan")
    tol = {torch.float32: 2e-3 if DEV.type == "cpu" else 1e-2, torch.bfloat16: 3e-2,
           torch.float16: 1e-2}[dtype]
    ok = err == err and err <= tol
    RESULTS.append(ok)
    print(f"  {'ok  ' if ok else 'FAIL'} {name:44s} {str(dtype)[6:]:9s} max|err| {err:.2e} "
          f"(tol {tol:.0e}) {extra}", flush=True)


def want(name):
    return not args.only or any(name.startswith(p) for p in args.only.split(","))


def case_vllm(dtype, gen, lens, q_lens, hq, hkv, d, page, label, **kw):
    q, k, v, table, seq, cu, kd, vd = paged(lens, q_lens, hq, hkv, d, page, dtype, gen)
    out = torch.empty_like(q)
    scale = d ** -0.5
    rows = peers.VLLM_MIN_LAUNCH_GRID_SIZE_2D // hkv if kw.get("seq_threshold_3D") is None \
        else kw["seq_threshold_3D"]
    path = "3D+reduce" if max(q_lens) == 1 and len(lens) <= rows else "2D"
    peers.vllm_unified_decode(q, k, v, table, seq, cu, max(q_lens), max(lens), scale, out, **kw)
    record(f"vllm unified {label} [{path}]", dtype, out, reference(q, kd, vd, lens, q_lens, scale))


def case_sglang(dtype, gen, lens, hq, hkv, d, page, label, **kw):
    q_lens = [1] * len(lens)
    q, k, v, table, seq, cu, kd, vd = paged(lens, q_lens, hq, hkv, d, page, dtype, gen)
    out = torch.empty_like(q)
    scale = d ** -0.5
    meta = peers.sglang_decode_metadata(table, seq, page, hq, hkv, d, **kw)
    peers.sglang_decode(q, k, v, meta, scale, out)
    splits = meta.num_kv_splits.tolist()
    kern = "MHA stage1" if hq == hkv else "grouped stage1"
    record(f"sglang decode {label} [{kern}]", dtype, out, reference(q, kd, vd, lens, q_lens, scale),
           f"num_kv_splits {splits} / max {meta.max_kv_splits}")


def case_mla(dtype, gen, lens, h, rank, rope, page, label, **kw):
    q_lens = [1] * len(lens)
    lk = rank + rope
    q, kv, _, table, seq, cu, kd, vd = paged(lens, q_lens, h, 1, lk, page, dtype, gen, dv=rank,
                                             shared_kv=True)
    out = torch.empty((q.shape[0], h, rank), dtype=dtype, device=DEV)
    scale = (128 + rope) ** -0.5  # DeepSeek: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim)
    meta = peers.sglang_decode_metadata(table, seq, page, h, 1, rank, mla=True, **kw)
    peers.sglang_mla_decode(q, kv, meta, scale, out, rank)
    record(f"sglang MLA decode {label} [Lk {lk}, Lv {rank}]", dtype, out,
           reference(q, kd, vd, lens, q_lens, scale), f"max_kv_splits {meta.max_kv_splits}")


def main():
    import triton

    interp = os.environ.get("TRITON_INTERPRET") == "1"
    print(f"check_peers: device {DEV}{' (' + torch.cuda.get_device_name(DEV) + ')' if DEV.type == 'cuda' else ''}, "
          f"torch {torch.__version__}, triton {triton.__version__}, TRITON_INTERPRET={int(interp)}")
    for mod, src in peers.sources().items():
        print(f"  peer {mod:14s} <- {src['wheel']}: {src['path']}")
    peers._import("sgl_extend")  # import smoke only (no wrapper yet)
    dtypes = args.dtypes or ("float32,float16" if interp else "float32,bfloat16,float16")
    if interp and "bfloat16" in dtypes:
        print("  note: the Triton interpreter keeps bf16 as raw uint16 and does arithmetic on the "
              "bits (only casts are emulated), so bf16 results here are garbage by construction")
    t0 = time.time()
    for dname in dtypes.split(","):
        dtype = getattr(torch, dname)
        gen = torch.Generator().manual_seed(0)
        if want("vllm"):
            case_vllm(dtype, gen, [40, 23], [1, 1], 4, 2, 64, 16, "decode")
            case_vllm(dtype, gen, [40, 23], [1, 1], 4, 2, 64, 16, "decode, 3D off",
                      seq_threshold_3D=0)
            case_vllm(dtype, gen, [40, 23], [5, 1], 4, 2, 64, 16, "chunked prefill q[5,1]")
        if want("sglang"):
            case_sglang(dtype, gen, [40, 23], 4, 2, 64, 16, "GQA static splits",
                        static_kv_splits=True)
            case_sglang(dtype, gen, [40, 23], 4, 2, 64, 16, "GQA splits@132 SMs",
                        device_core_count=132)
            case_sglang(dtype, gen, [40, 23], 2, 2, 64, 16, "MHA auto splits")
        if want("mla"):
            case_mla(dtype, gen, [40, 23], 4, 512, 64, 16, "DSV3 dims")
        if DEV.type == "cuda":  # bench-like shapes: many splits, long pages
            if want("vllm"):
                case_vllm(dtype, gen, [1000, 4096, 17, 3000], [1] * 4, 32, 8, 128, 64, "big decode")
                case_vllm(dtype, gen, [1000, 2048], [300, 64], 32, 8, 128, 64, "big prefill")
            if want("sglang"):
                case_sglang(dtype, gen, [1000, 4096, 17, 3000], 32, 8, 128, 64, "big GQA")
            if want("mla"):
                case_mla(dtype, gen, [1000, 4096, 17], 16, 512, 64, 64, "big DSV3 dims")
    print(f"check_peers: {sum(RESULTS)}/{len(RESULTS)} ok in {time.time() - t0:.1f}s")
    sys.exit(0 if all(RESULTS) else 1)


if __name__ == "__main__":
    main()
