"""Prefill / extend over an FP8 (e4m3) KV cache, one source tree per process (issue #51: does the PTX-operand form,
tuning.FP8_OPERANDS "ptx", change prefill over FP8 caches?). 32 q / 8 KV heads, D 128, page 64, bf16 queries,
per-[batch, Hkv] descales; one-call API, back-to-back throughput; each case checked against an fp32 evaluation
of the dequantised cache first (max |error|).

    python benchmarks/lab/fp8_prefill_ab.py TREE LABEL     (prints one JSON line per case)
"""

import json
import math
import os
import sys

sys.path[:0] = [os.path.abspath(sys.argv[1]), os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
import torch  # noqa: E402
from timing import throughput  # noqa: E402

from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402

HQ, HKV, D, PAGE = 32, 8, 128, 64
CASES = [("prefill 1x8192", 1, 8192, 8192), ("extend 16x512 on 2048", 16, 512, 2560)]


def main() -> None:
    prov = get_provider("triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, batch, q_len, k_len in CASES:
        for dt in (torch.bfloat16, torch.float8_e4m3fn):
            per = math.ceil(k_len / PAGE)
            kc = torch.randn(batch * per, PAGE, HKV, D, device="cuda", generator=gen).to(dt)
            vc = torch.randn(batch * per, PAGE, HKV, D, device="cuda", generator=gen).to(dt)
            pt = torch.randperm(batch * per, device="cuda", generator=gen).to(torch.int32).reshape(batch, per)
            q = torch.randn(batch * q_len, HQ, D, device="cuda", generator=gen).bfloat16()
            seq = torch.full((batch,), k_len, device="cuda", dtype=torch.int32)
            cu = torch.arange(0, batch + 1, device="cuda", dtype=torch.int32) * q_len
            kw = {}
            if dt != torch.bfloat16:
                kw = dict(k_descale=torch.rand(batch, HKV, device="cuda", generator=gen) + 0.5,
                          v_descale=torch.rand(batch, HKV, device="cuda", generator=gen) + 0.5)
            out = torch.empty_like(q)
            fn = lambda: prov.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len, causal=True, out=out, **kw)  # noqa: E731
            fn()
            # the first sequence against fp32
            ks = kw.get("k_descale", torch.ones(batch, HKV, device="cuda"))[0]
            vs = kw.get("v_descale", torch.ones(batch, HKV, device="cuda"))[0]
            kk = kc[pt[0].long()].reshape(-1, HKV, D)[:k_len].float() * ks[None, :, None]
            vv = vc[pt[0].long()].reshape(-1, HKV, D)[:k_len].float() * vs[None, :, None]
            kk, vv = kk.repeat_interleave(HQ // HKV, 1), vv.repeat_interleave(HQ // HKV, 1)
            last = min(q_len, 256)  # the sequence's last queries (the longest rows)
            rows = q[q_len - last : q_len].float()
            s = torch.einsum("thd,khd->htk", rows, kk) * D**-0.5
            pos = torch.arange(k_len - last, k_len, device="cuda")
            s = s.masked_fill(torch.arange(k_len, device="cuda")[None, None, :] > pos[None, :, None], float("-inf"))
            want = torch.einsum("htk,khd->thd", torch.softmax(s, -1), vv)
            err = (out[q_len - last : q_len].float() - want).abs().max().item()
            t = min(throughput(fn, n=20) for _ in range(3))
            flops = 4 * batch * HQ * D * sum(k_len - q_len + i + 1 for i in range(q_len))
            print(json.dumps({"tree": sys.argv[2], "case": name, "kv": str(dt).split(".")[-1], "us": round(t * 1e6, 1),
                              "tflops": round(flops / t / 1e12, 1), "max_err": round(err, 5)}), flush=True)
            del kc, vc, q, out, want, s, kk, vv


if __name__ == "__main__":
    main()
