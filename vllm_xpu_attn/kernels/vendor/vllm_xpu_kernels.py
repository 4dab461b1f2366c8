"""vllm-xpu-kernels' FlashAttention-2 path with a paged KV cache.

From vllm_xpu_kernels 0.1.16.2 ``flash_attn_interface.py``: ``flash_attn_varlen_func(q, k, v,
max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None, ..., softmax_scale,
causal, window_size, softcap, alibi_slopes, ..., block_table, return_softmax_lse, out, ...,
q_descale, k_descale, v_descale, num_splits, fa_version, s_aux, ...)``:
- paged: ``block_table`` + ``seqused_k`` (int32), ``cu_seqlens_k`` must then be None;
- block size: any positive multiple of 16 (``_kv_tile_from_block_size``);
- descales: each "must be view of single scalar tensor" (per-tensor);
- sinks go in as ``s_aux``;
- when a configuration is not compiled into the wheel it *falls back to a slow PyTorch
  reference with only a warning* - so this wrapper declares only what the XPU path of vLLM uses.
Declared conservatively: fp16/bf16 (no fp32), no ALiBi and no softcap (vLLM's XPU flash path
refuses both), head dims 64..256 in steps of 32 plus 80/96/160 (not verifiable from Python).
The KV write is vLLM's ``reshape_and_cache_flash`` custom op where loaded (torch.ops._C_cache_ops).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import KernelProvider
from ..contract import FP8_DTYPES, check_paged_call
from .common import scalar_descale, try_import

MODULE = "vllm_xpu_kernels.flash_attn_interface"


class VllmXpuKernelsProvider(KernelProvider):
    name = "vllm_xpu_kernels"
    description = "vllm-xpu-kernels flash_attn_varlen_func with block_table"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16, *FP8_DTYPES})
    head_dims = frozenset({64, 80, 96, 128, 160, 192, 224, 256})
    features = frozenset({"window", "sinks", "lse", "non_causal"})

    def unavailable_reason(self) -> Optional[str]:
        return try_import(MODULE)[1]

    def page_size_reason(self, page_size: int, phase: str) -> Optional[str]:
        return None if page_size % 16 == 0 else f"block size {page_size} is not a multiple of 16"

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
                                softmax_scale=None, causal=True, window_size=(-1, -1), softcap=0.0, sinks=None,
                                alibi_slopes=None, k_descale=None, v_descale=None, return_softmax_lse=False, out=None):
        check_paged_call(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, causal=causal,
                         window_size=window_size, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
                         k_descale=k_descale, v_descale=v_descale, out=out, check_values=False)
        if alibi_slopes is not None or softcap > 0:
            raise ValueError("vllm_xpu_kernels provider is declared without ALiBi/softcap; use triton or reference")
        mod, why = try_import(MODULE)
        if why:
            raise RuntimeError(why)
        max_k = int(page_table.shape[1] * k_cache.shape[1])  # an upper bound; host value, no sync
        res = mod.flash_attn_varlen_func(
            q, k_cache, v_cache, int(max_seqlen_q), cu_seqlens_q.to(torch.int32), max_k,
            seqused_k=cache_seqlens.to(torch.int32), softmax_scale=softmax_scale, causal=causal,
            window_size=[int(window_size[0]), 0 if causal and int(window_size[1]) != -1 else int(window_size[1])],
            block_table=page_table.to(torch.int32), return_softmax_lse=return_softmax_lse, out=out,
            k_descale=scalar_descale("k_descale", k_descale), v_descale=scalar_descale("v_descale", v_descale),
            s_aux=sinks,
        )
        return res

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
                               alibi_slopes=None, return_softmax_lse=False, out=None):
        if alibi_slopes is not None or softcap > 0:
            raise ValueError("vllm_xpu_kernels provider is declared without ALiBi/softcap; use triton or reference")
        mod, why = try_import(MODULE)
        if why:
            raise RuntimeError(why)
        return mod.flash_attn_varlen_func(
            q, k, v, int(max_seqlen_q), cu_seqlens_q.to(torch.int32), int(max_seqlen_k),
            cu_seqlens_k=cu_seqlens_k.to(torch.int32), softmax_scale=softmax_scale, causal=causal,
            window_size=[int(window_size[0]), int(window_size[1])], return_softmax_lse=return_softmax_lse, out=out,
            s_aux=sinks)

    def merge_state(self, o_a, lse_a, o_b, lse_b):
        from ..reference import ReferenceProvider

        return ReferenceProvider().merge_state(o_a, lse_a, o_b, lse_b)  # no vendor op; small, torch is fine

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        op = getattr(getattr(torch.ops, "_C_cache_ops", None), "reshape_and_cache_flash", None)
        if op is None:
            from ..reference import ReferenceProvider

            return ReferenceProvider().write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        fp8 = k_cache.dtype in FP8_DTYPES
        kv_dtype = {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}.get(k_cache.dtype, "auto")
        one = torch.ones(1, dtype=torch.float32, device=k.device)
        op(k, v, k_cache.view(torch.uint8) if fp8 else k_cache, v_cache.view(torch.uint8) if fp8 else v_cache,
           slot_mapping.long(), kv_dtype, k_scale if k_scale is not None else one, v_scale if v_scale is not None else one)
