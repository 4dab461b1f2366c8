"""Intel Extension for PyTorch's ``ipex.llm.modules.PagedAttention`` (legacy stacks; IPEX is no
longer developed).

Signatures from IPEX ``llm/modules/mha_fusion.py``:
``reshape_and_cache(key, value, key_cache, value_cache, slot_mapping)``,
``single_query_cached_kv_attention(output, query, key_cache, value_cache, head_mapping, scale,
block_tables, context_lens, block_size, max_context_len, alibi_slopes)``,
``flash_attn_varlen_func(output, query, k_cache, v_cache, cu_seq_lens_q, cu_seq_lens_kv,
max_seq_len_q, max_seq_len_kv, scale, is_causal, block_table, alibi_slopes=None)``.
IPEX's paged ops read [num_blocks, num_kv_heads, block_size, head_size] pages; the core's pages
are [num_blocks, block_size, num_kv_heads, head_size], passed as a permuted (strided) view.
Whether IPEX's kernels honour such strides could not be checked without Intel hardware, so this
provider is off unless VLLM_XPU_ATTN_ENABLE_IPEX=1. No window, softcap, sinks, LSE or FP8.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from ..base import KernelProvider
from ..contract import check_paged_call
from .common import try_import

MODULE = "intel_extension_for_pytorch"
ENV_ENABLE = "VLLM_XPU_ATTN_ENABLE_IPEX"


class IpexProvider(KernelProvider):
    name = "ipex"
    description = "IPEX PagedAttention (legacy; opt-in)"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16})
    head_dims = frozenset({64, 80, 96, 128, 256})
    features = frozenset({"alibi", "non_causal"})

    def unavailable_reason(self) -> Optional[str]:
        if os.environ.get(ENV_ENABLE, "0") != "1":
            return (f"disabled by default: IPEX reads head-major pages and stride support for the core's "
                    f"token-major pages is unverified; set {ENV_ENABLE}=1 to opt in")
        return try_import(MODULE)[1]

    @staticmethod
    def _paged():
        mod, why = try_import(MODULE)
        if why:
            raise RuntimeError(why)
        return mod.llm.modules.PagedAttention

    @staticmethod
    def _hnd(cache: torch.Tensor) -> torch.Tensor:
        return cache.permute(0, 2, 1, 3)  # [P, page, H, D] -> [P, H, page, D] view

    def flash_attn_with_kvcache(self, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
                                softmax_scale=None, causal=True, window_size=(-1, -1), softcap=0.0, sinks=None,
                                alibi_slopes=None, k_descale=None, v_descale=None, return_softmax_lse=False, out=None):
        check_paged_call(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, causal=causal,
                         window_size=window_size, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
                         k_descale=k_descale, v_descale=v_descale, out=out, check_values=False)
        if tuple(window_size) != (-1, -1) or softcap > 0 or sinks is not None or return_softmax_lse or k_descale is not None:
            raise ValueError("ipex provider: no window, softcap, sinks, LSE or FP8 (the registry should not route here)")
        pa = self._paged()
        hq, d = q.shape[1], q.shape[2]
        hkv, page = k_cache.shape[2], k_cache.shape[1]
        scale = softmax_scale if softmax_scale is not None else d ** -0.5
        if out is None:
            out = torch.empty(q.shape[0], hq, v_cache.shape[-1], dtype=q.dtype, device=q.device)
        max_k = int(page_table.shape[1] * page)
        if int(max_seqlen_q) == 1 and causal and q.shape[0] == page_table.shape[0]:  # one query per row
            head_mapping = torch.arange(hkv, device=q.device, dtype=torch.int32).repeat_interleave(hq // hkv)
            pa.single_query_cached_kv_attention(out, q, self._hnd(k_cache), self._hnd(v_cache), head_mapping, scale,
                                                page_table.to(torch.int32), cache_seqlens.to(torch.int32), page,
                                                max_k, alibi_slopes)
        else:
            cu_k = torch.nn.functional.pad(torch.cumsum(cache_seqlens, 0, dtype=torch.int32), (1, 0))
            pa.flash_attn_varlen_func(out, q, self._hnd(k_cache), self._hnd(v_cache), cu_seqlens_q.to(torch.int32), cu_k,
                                      int(max_seqlen_q), max_k, scale, causal, page_table.to(torch.int32), alibi_slopes)
        return out

    def merge_state(self, o_a, lse_a, o_b, lse_b):
        raise NotImplementedError("ipex provider returns no LSE, so it never takes part in a cascade")

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        if k_cache.dtype != k.dtype:
            raise TypeError(f"ipex provider: KV cache dtype {k_cache.dtype} must equal k dtype {k.dtype} (no FP8)")
        self._paged().reshape_and_cache(k, v, self._hnd(k_cache), self._hnd(v_cache), slot_mapping)
