"""sgl-kernel's FlashAttention-3 API as built for Intel XPU (sgl-kernel-xpu).

Signature and limits from sgl-kernel-xpu ``python/sgl_kernel/flash_attn.py``
(``flash_attn_with_kvcache(q, k_cache, v_cache, k, v, qv, ..., cache_seqlens, ..., page_table,
cu_seqlens_q, cu_seqlens_k_new, max_seqlen_q, max_seqlen_k, ..., q/k/v_descale, softmax_scale,
sinks, causal, window_size, softcap, ..., num_splits, pack_gqa, sm_margin, return_softmax_lse)``)
and the XPU build's known limits: paged decode with page size 64 or 128; head dims
64/96/128/192/256/512; GQA group <= 16; sinks only at head dim 64; FP8 KV with per-tensor float32
descales; no ALiBi parameter; fp16/bf16 only (FA3); ``k``, ``v``, ``cu_seqlens_k_new`` ignored
and ``qv`` unsupported (so never passed).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import KernelProvider, KernelRequest
from ..contract import FP8_DTYPES, check_paged_call
from .common import fa3_window, scalar_descale, try_import

MODULE = "sgl_kernel.flash_attn"


class SglKernelProvider(KernelProvider):
    name = "sgl_kernel"
    description = "sgl-kernel flash_attn (FA3 API) built for Intel XPU"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16, *FP8_DTYPES})
    head_dims = frozenset({64, 96, 128, 192, 256, 512})
    max_gqa_group = 16
    features = frozenset({"window", "softcap", "sinks", "lse", "non_causal"})

    def _module(self):
        mod, _ = try_import(MODULE)
        return mod

    def unavailable_reason(self) -> Optional[str]:
        return try_import(MODULE)[1]

    def page_size_reason(self, page_size: int, phase: str) -> Optional[str]:
        if phase in ("decode", "any") and page_size not in (64, 128):
            return f"page size {page_size}: the XPU build's paged decode needs 64 or 128"
        if page_size not in (64, 128):
            return f"page size {page_size} not in [64, 128]"
        return None

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        r = []
        if req.sinks and req.head_dim != 64:
            r.append(f"sinks only at head dim 64 (got {req.head_dim})")
        return r

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
                                softmax_scale=None, causal=True, window_size=(-1, -1), softcap=0.0, sinks=None,
                                alibi_slopes=None, k_descale=None, v_descale=None, return_softmax_lse=False, out=None):
        check_paged_call(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, causal=causal,
                         window_size=window_size, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
                         k_descale=k_descale, v_descale=v_descale, out=out, check_values=False)
        if alibi_slopes is not None:
            raise ValueError("sgl_kernel flash_attn has no ALiBi parameter; the registry should not route ALiBi here")
        batch, hkv = page_table.shape[0], k_cache.shape[2]
        kd, vd = scalar_descale("k_descale", k_descale), scalar_descale("v_descale", v_descale)
        # the XPU backend passes per-tensor scales expanded to FA3's [batch, num_kv_heads]
        kd = kd.expand(batch, hkv) if kd is not None else None
        vd = vd.expand(batch, hkv) if vd is not None else None
        res = self._module().flash_attn_with_kvcache(
            q=q, k_cache=k_cache, v_cache=v_cache, cache_seqlens=cache_seqlens.to(torch.int32),
            page_table=page_table.to(torch.int32), cu_seqlens_q=cu_seqlens_q.to(torch.int32),
            max_seqlen_q=int(max_seqlen_q), softmax_scale=softmax_scale, causal=causal,
            window_size=fa3_window(window_size, causal), softcap=float(softcap), sinks=sinks,
            k_descale=kd, v_descale=vd, return_softmax_lse=return_softmax_lse,
        )
        o, lse = (res[0], res[1]) if return_softmax_lse else (res, None)
        if out is not None:
            out.copy_(o)
            o = out
        return (o, lse) if return_softmax_lse else o

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
                               alibi_slopes=None, return_softmax_lse=False, out=None):
        if sinks is not None or alibi_slopes is not None:
            raise ValueError("sgl_kernel flash_attn_varlen_func takes neither sinks nor ALiBi")
        res = self._module().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q.to(torch.int32), cu_seqlens_k.to(torch.int32), int(max_seqlen_q), int(max_seqlen_k),
            softmax_scale=softmax_scale, causal=causal, window_size=fa3_window(window_size, causal),
            softcap=float(softcap), return_softmax_lse=return_softmax_lse)
        o, lse = (res[0], res[1]) if return_softmax_lse else (res, None)
        if out is not None:
            out.copy_(o)
            o = out
        return (o, lse) if return_softmax_lse else o

    def merge_state(self, o_a, lse_a, o_b, lse_b):
        # sgl_kernel.merge_state_v2 takes lse as [T, H]; ours are [H, T]
        mod, why = try_import("sgl_kernel")
        if why:
            raise RuntimeError(why)
        o, lse = mod.merge_state_v2(o_a, lse_a.T.contiguous(), o_b, lse_b.T.contiguous())
        return o, lse.T

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        # sgl-kernel has no cache-write op: SGLang's pools write with torch indexing; do the same
        from ..reference import ReferenceProvider

        ReferenceProvider().write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
