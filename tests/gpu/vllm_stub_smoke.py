"""Drive XpuAttnMetadataBuilder + XpuAttnImpl through the vLLM stand-in (tests/gpu/vllm_stub).

    PYTHONPATH=.:tests/gpu/vllm_stub python tests/gpu/vllm_stub_smoke.py [cpu|cuda]

Builds CommonAttentionMetadata the way vLLM 0.32's V2 runner does for a FULL decode graph
(persistent runner buffers sliced to the padded batch; padded requests: query length 0,
seq_len 0, block-table row 0; padded tokens: slot -1), runs
the KV write and the decode forward, and checks the real rows against a naive reference.
No CUDA graph is captured here; this only proves the stub carries the adapter.
"""

import sys
import types

import torch
import vllm  # the stub
from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.kv_cache_interface import FullAttentionSpec

from vllm_xpu_attn.vllm.backend import XpuAttnBackend, XpuAttnImpl, XpuAttnMetadataBuilder

assert getattr(vllm, "IS_VLLM_STUB", False), "expected the stand-in, found a real vLLM"
dev = torch.device(sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu"))
dtype = torch.float16 if dev.type == "cuda" else torch.float32
Hq, Hkv, D, page, max_reqs, max_tokens, max_len = 8, 2, 64, 16, 16, 64, 256
torch.manual_seed(0)

cfg = VllmConfig(
    model_config=ModelConfig(dtype=dtype, max_model_len=max_len, num_attention_heads=Hq, num_kv_heads=Hkv, head_size=D),
    cache_config=CacheConfig(block_size=page),
    scheduler_config=SchedulerConfig(max_num_seqs=max_reqs, max_num_batched_tokens=max_tokens),
)
spec = FullAttentionSpec(block_size=page, num_kv_heads=Hkv, head_size=D, dtype=dtype)
num_blocks = 128
# the runner's persistent buffers (v1/worker/gpu/input_batch.py InputBuffers, gpu/block_table.py BlockTables)
qsl_buf = torch.zeros(max_reqs + 1, dtype=torch.int32, device=dev)
seq_buf = torch.zeros(max_reqs, dtype=torch.int32, device=dev)
bt_buf = torch.zeros(max_reqs, -(-max_len // page), dtype=torch.int32, device=dev)
slot_buf = torch.full((max_tokens,), -1, dtype=torch.int64, device=dev)

with set_current_vllm_config(cfg):
    builder = XpuAttnMetadataBuilder(spec, ["layer.0"], cfg, dev)
    impl = XpuAttnImpl(Hq, D, D**-0.5, Hkv)
    # the vLLM layer as the impl reads it: its KV scales (1.0 unless FP8; the impl reads them since FP8 KV)
    layer = types.SimpleNamespace(_k_scale=torch.ones(1, device=dev), _v_scale=torch.ones(1, device=dev))
    assert impl.kv_quant_mode.name == "NONE"  # the verbatim AttentionImpl property vLLM's runner reads
    # logical [blocks, heads, page, 2D], stored as the backend declares (vLLM allocates so): LBNHC on accelerators,
    # [blocks, page, heads, 2D] viewed logical; LBHNC on the CPU, the logical shape itself (vLLM's CPU pages)
    layout = XpuAttnBackend.supported_kv_cache_layouts()[0].name
    if layout == "LBNHC":
        kv_cache = torch.zeros(num_blocks, page, Hkv, 2 * D, dtype=dtype, device=dev).transpose(1, 2)
    else:
        assert layout == "LBHNC" and dev.type == "cpu", (layout, dev)
        kv_cache = torch.zeros(num_blocks, Hkv, page, 2 * D, dtype=dtype, device=dev)

    def step(ctx: list[int], n_pad: int) -> None:
        """One decode step: len(ctx) real requests (ctx keys each) padded to an n_pad-request graph."""
        n_real = len(ctx)
        kv_cache.zero_()
        blocks = torch.randperm(num_blocks - 1, device=dev)[: n_real * bt_buf.shape[1]].view(n_real, -1).int() + 1
        bt_buf[:n_real] = blocks
        bt_buf[n_real:] = 0  # padded rows: block 0 (V2 gather kernel zeroes them; V1 writes NULL_BLOCK_ID)
        hist_k = [torch.randn(c, Hkv, D, dtype=dtype, device=dev) for c in ctx]
        hist_v = [torch.randn(c, Hkv, D, dtype=dtype, device=dev) for c in ctx]
        for r, c in enumerate(ctx):  # history, through the impl's KV write
            pos = torch.arange(c, device=dev)
            slots = bt_buf[r, pos // page].long() * page + pos % page
            impl.do_kv_cache_update(layer, hist_k[r], hist_v[r], kv_cache, slots)
        # padded requests: query_start_loc repeats the real token count, seq_len 0
        qsl_buf.copy_(torch.tensor(list(range(n_real + 1)) + [n_real] * (max_reqs - n_real), dtype=torch.int32))
        seq_buf.zero_()
        seq_buf[:n_real] = torch.tensor([c + 1 for c in ctx], dtype=torch.int32)
        slot_buf.fill_(-1)  # padded tokens: PAD_SLOT_ID
        for r, c in enumerate(ctx):
            slot_buf[r] = bt_buf[r, c // page].long() * page + c % page
        new_k = torch.randn(n_pad, Hkv, D, dtype=dtype, device=dev)
        new_v = torch.randn(n_pad, Hkv, D, dtype=dtype, device=dev)
        cam = CommonAttentionMetadata(
            query_start_loc=qsl_buf[: n_pad + 1],
            query_start_loc_cpu=qsl_buf[: n_pad + 1].cpu(),
            seq_lens=seq_buf[:n_pad],
            num_reqs=n_pad,
            num_actual_tokens=n_pad,
            max_query_len=1,
            max_seq_len=max_len,
            block_table_tensor=bt_buf[:n_pad],
            slot_mapping=slot_buf[:n_pad],
            seq_lens_cpu_upper_bound=seq_buf[:n_pad].cpu(),
        )
        md = builder.build(0, cam)
        q = torch.randn(n_pad, Hq, D, dtype=dtype, device=dev)
        out = torch.zeros(n_pad, Hq, D, dtype=dtype, device=dev)
        impl.do_kv_cache_update(layer, new_k, new_v, kv_cache, md.slot_mapping)
        impl.forward(layer, q, new_k, new_v, kv_cache, md, out)
        g = Hq // Hkv
        for r, c in enumerate(ctx):
            k = torch.cat([hist_k[r], new_k[r : r + 1]]).float().repeat_interleave(g, 1)  # [c+1, Hq, D]
            v = torch.cat([hist_v[r], new_v[r : r + 1]]).float().repeat_interleave(g, 1)
            p = torch.softmax(torch.einsum("hd,khd->hk", q[r].float(), k) * D**-0.5, -1)
            err = (out[r].float() - torch.einsum("hk,khd->hd", p, v)).abs().max().item()
            assert err < (2e-2 if dtype == torch.float16 else 1e-4), (r, err)

    # capture-shaped: every request real (V2 capture: num_reqs = num_tokens / uniform_token_count)
    step([37, 5, 100, 64], 4)
    print("capture-shaped decode step (4 of 4 requests real): ok")
    # replay-shaped: 3 real requests in a 4-request graph -> token 3 belongs to no request
    try:
        step([37, 5, 100], 4)
        print("replay-shaped decode step (3 of 4 requests real, 1 orphan padded token): ok")
    except ValueError as e:
        print(f"replay-shaped decode step (3 of 4 real): REFUSED by the kernel contract: {e}")
    print(
        f"ok: stub vllm {vllm.__version__}, device {dev}, providers {impl.runner.providers_used()}, "
        f"cg support {XpuAttnMetadataBuilder.get_cudagraph_support(cfg, spec).name}"
    )
