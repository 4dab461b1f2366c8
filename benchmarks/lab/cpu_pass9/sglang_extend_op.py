"""SGLang's torch_native extend (its own function, unbound) against our torch_sdpa provider on the same fresh
2,048-token prompt in one process: SmolLM2's shapes (9 query / 3 KV heads, D 64, fp32), q a strided view of a
fused qkv row as the engine hands it, K/V in a token-slot pool (page size 1, SGLang's). Times per call, alternating.

Question (#48, ninth pass): SGLang at one 2,048-token prompt prefilled 1.20x (0.98-1.21, 3 pairs) slower with ours;
is it the attention call?  Run: .venvs/sglang/bin/python benchmarks/lab/cpu_pass9/sglang_extend_op.py"""

import time

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

from vllm_xpu_attn.kernels.api import get_provider

torch.manual_seed(0)
L, Hq, Hkv, D, pool = 2048, 9, 3, 64, 8192
qkv = torch.randn(L, (Hq + 2 * Hkv) * D)
q = qkv[:, : Hq * D].view(L, Hq, D)
k_pool, v_pool = torch.randn(pool, Hkv, D), torch.randn(pool, Hkv, D)
slots = torch.arange(1000, 1000 + L)
req_to_token = torch.zeros(4, pool, dtype=torch.int64)
req_to_token[1, :L] = slots
out_theirs, out_ours = torch.empty(L, Hq, D), torch.empty(L, Hq, D)
lens = torch.tensor([L])


def theirs():
    TorchNativeAttnBackend._run_sdpa_forward_extend(
        None, q, out_theirs, k_pool, v_pool, req_to_token, torch.tensor([1]), lens, torch.tensor([0]), lens,
        scaling=D**-0.5, enable_gqa=True, causal=True,
    )


sdpa = get_provider("torch_sdpa")
page_table = slots.to(torch.int32)[None]


def ours():
    sdpa.flash_attn_with_kvcache(
        q, k_pool[:, None], v_pool[:, None], page_table, lens.to(torch.int32), torch.tensor([0, L], dtype=torch.int32),
        L, causal=True, out=out_ours,
    )


for f in (theirs, ours):
    f()
print("max |diff|", (out_theirs - out_ours).abs().max().item())
for r in range(4):
    for name, f in (("theirs", theirs), ("ours", ours)) if r % 2 == 0 else (("ours", ours), ("theirs", theirs)):
        t = time.perf_counter()
        for _ in range(5):
            f()
        print(name, round((time.perf_counter() - t) / 5 * 1e3, 2), "ms a call", flush=True)
