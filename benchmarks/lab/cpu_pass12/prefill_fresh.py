"""A fresh prompt's causal attention on the CPU: vLLM's CPU_ATTN op over pages vs torch's flash CPU kernel over the
step's own K/V rows, in one process, alternating (SmolLM2-135M's heads: Hq 9, Hkv 3, D 64, fp32).

    PYTHONPATH=. .venvs/vllm/bin/python benchmarks/lab/cpu_pass12/prefill_fresh.py [--threads 2] [--reps 7]

Prints per shape: median ms of each and max |difference| of the outputs (both against the same fp64 oracle).
"""

import argparse
import statistics
import time

import torch

from vllm_xpu_attn.kernels.providers import vllm_cpu

HQ, HKV, D, PAGE = 9, 3, 64, 128


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--shapes", default="512,1x2048,2x2048")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    o = vllm_cpu.ops()
    assert o.why is None, o.why
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    scale = D**-0.5
    for shape in a.shapes.split(","):
        n, L = (int(x) for x in shape.split("x")) if "x" in shape else (1, int(shape))
        T = n * L
        g = torch.Generator().manual_seed(0)
        q = torch.randn(T, HQ, D, generator=g)
        k = torch.randn(T, HKV, D, generator=g)
        v = torch.randn(T, HKV, D, generator=g)
        pages = (L + PAGE - 1) // PAGE
        P = n * pages + 1
        kc = torch.zeros(P, HKV, PAGE, D)
        vc = torch.zeros(P, HKV, PAGE, D)
        table = torch.arange(1, P, dtype=torch.int32).view(n, pages)
        slots = torch.cat([table[i].repeat_interleave(PAGE)[:L].long() * PAGE + torch.arange(L) % PAGE for i in range(n)])
        isa = o.isa_for(torch.float32, PAGE, D)
        o.write.default(k, v, kc, vc, slots, isa)
        cu = torch.arange(0, T + 1, L, dtype=torch.int32)
        lens = torch.full((n,), L, dtype=torch.int32)
        meta_kw = dict(num_req=n, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, seq_lens=lens, dtype=torch.float32,
                       query_start_loc=cu, casual=True, window_size=-1, isa_hint=isa, enable_kv_split=o.split_kv)
        out_v = torch.empty(T, HQ, D)

        def run_vllm():
            meta = o.meta.default(*[meta_kw.get(x) for x in o.meta_names])
            kw = dict(query=q, key_cache=kc, value_cache=vc, output=out_v, query_start_loc=cu, seq_lens=lens,
                      scale=scale, causal=True, alibi_slopes=None, sliding_window_size=-1, block_table=table,
                      softcap=0.0, scheduler_metadata=meta, s_aux=None)
            o.attn.default(*[kw.get(x) for x in o.attn_names])

        out_t = torch.empty(T, HQ, D)

        def run_torch():
            for i in range(n):
                r = slice(i * L, (i + 1) * L)
                res = flash(q[r].unsqueeze(0).transpose(1, 2), k[r].unsqueeze(0).transpose(1, 2),
                            v[r].unsqueeze(0).transpose(1, 2), 0.0, True, scale=scale)[0]
                out_t[r].copy_(res[0].transpose(0, 1))

        tv, tt = [], []
        run_vllm(); run_torch()
        for _ in range(a.reps):
            for fn, acc in ((run_vllm, tv), (run_torch, tt)):
                t0 = time.perf_counter(); fn(); acc.append((time.perf_counter() - t0) * 1e3)
        # fp64 oracle on the first prompt
        qq, kk, vv = (x[:L].double().transpose(0, 1) for x in (q, k, v))
        kk, vv = kk.repeat_interleave(HQ // HKV, 0), vv.repeat_interleave(HQ // HKV, 0)
        s = qq @ kk.transpose(1, 2) * scale
        s.masked_fill_(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
        ref = (s.softmax(-1) @ vv).transpose(0, 1)
        ev = (out_v[:L].double() - ref).abs().max().item()
        et = (out_t[:L].double() - ref).abs().max().item()
        mv, mt = statistics.median(tv), statistics.median(tt)
        print(f"{n}x{L}: vllm {mv:.1f} ms (range {min(tv):.1f}-{max(tv):.1f})  torch flash {mt:.1f} ms "
              f"(range {min(tt):.1f}-{max(tt):.1f})  torch/vllm {mt / mv:.2f}x  err vllm {ev:.1e} torch {et:.1e}",
              flush=True)


if __name__ == "__main__":
    main()
