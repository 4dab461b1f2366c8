"""torch's fused CPU flash-attention op on one fresh 2,048-token causal prompt (SmolLM2: 9 query / 3 KV heads, D 64,
fp32), by the layout of its inputs: which one makes SGLang's torch_native extend (46 ms) faster than ours (68 ms)?
Run: python benchmarks/lab/cpu_pass9/sdpa_layouts.py (any venv with torch)."""

import time

import torch
import torch.nn.functional as F

torch.manual_seed(0)
L, Hq, Hkv, D = 2048, 9, 3, 64
op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
qkv = torch.randn(L, (Hq + 2 * Hkv) * D)
q_rows = qkv[:, : Hq * D].view(L, Hq, D)
k_rows, v_rows = torch.randn(L, Hkv, D), torch.randn(L, Hkv, D)
q_view = q_rows.transpose(0, 1).unsqueeze(0)  # [1, Hq, L, D], strided (ours)
q_cont = q_view.contiguous()
k_view, v_view = k_rows.transpose(0, 1).unsqueeze(0), v_rows.transpose(0, 1).unsqueeze(0)  # [1, Hkv, L, D]
k_cont, v_cont = k_view.contiguous(), v_view.contiguous()
k_rep, v_rep = k_cont.repeat_interleave(Hq // Hkv, 1), v_cont.repeat_interleave(Hq // Hkv, 1)
s = D**-0.5
cases = {
    "op q view, kv view (GQA in the op)": lambda: op(q_view, k_view, v_view, 0.0, True, scale=s),
    "op q contiguous, kv view": lambda: op(q_cont, k_view, v_view, 0.0, True, scale=s),
    "op q contiguous, kv contiguous": lambda: op(q_cont, k_cont, v_cont, 0.0, True, scale=s),
    "op q view, kv repeated to Hq": lambda: op(q_view, k_rep, v_rep, 0.0, True, scale=s),
    "op q contiguous, kv repeated to Hq": lambda: op(q_cont, k_rep, v_rep, 0.0, True, scale=s),
    "F.sdpa enable_gqa, q contiguous, kv view": lambda: F.scaled_dot_product_attention(
        q_cont, k_view, v_view, is_causal=True, scale=s, enable_gqa=True),
    "repeat kv + op, q view (the repeat timed)": lambda: op(
        q_view, k_view.repeat_interleave(Hq // Hkv, 1), v_view.repeat_interleave(Hq // Hkv, 1), 0.0, True, scale=s),
}
ref = cases["op q contiguous, kv repeated to Hq"]()[0]
for name, f in cases.items():
    print(f"{name}: max |diff| {(f()[0] - ref).abs().max().item():.1e}")
for r in range(3):
    for name, f in cases.items():
        t = time.perf_counter()
        for _ in range(5):
            f()
        print(f"rep {r} {name}: {(time.perf_counter() - t) / 5 * 1e3:.1f} ms", flush=True)
