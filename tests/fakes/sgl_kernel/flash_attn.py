"""Fake of sgl-kernel-xpu python/sgl_kernel/flash_attn.py: same signatures, XPU-build limits asserted."""
from typing import Optional, Union

import torch

from _common import record

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None,
                            max_seqlen_q=None, max_seqlen_k=None, rotary_seqlens=None, q_descale=None, k_descale=None,
                            v_descale=None, softmax_scale=None, sinks=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False):
    assert k is None and v is None and cu_seqlens_k_new is None, "XPU build ignores k/v/cu_seqlens_k_new: never pass"
    assert qv is None, "qv unsupported on XPU"
    assert q.dtype in (torch.float16, torch.bfloat16), f"FA3 q dtype {q.dtype}"
    assert page_table is not None and page_table.dtype == torch.int32, "page_table must be int32 page ids"
    assert cache_seqlens.dtype == torch.int32 and cu_seqlens_q.dtype == torch.int32
    assert k_cache.dim() == 4 and k_cache.shape[1] in (64, 128), f"paged KV page size {k_cache.shape[1]} not 64/128"
    assert k_cache.stride(-1) == 1 and v_cache.stride(-1) == 1
    assert q.shape[-1] in (64, 96, 128, 192, 256, 512), f"head dim {q.shape[-1]}"
    assert q.shape[1] // k_cache.shape[2] <= 16, "GQA group > 16"
    assert sinks is None or q.shape[-1] == 64, "sinks only at head dim 64"
    assert isinstance(window_size, tuple) and len(window_size) == 2
    for name, d in (("k_descale", k_descale), ("v_descale", v_descale)):
        if d is not None:
            assert k_cache.dtype in FP8, f"{name} with non-FP8 cache"
            assert d.dtype == torch.float32 and d.shape == (page_table.shape[0], k_cache.shape[2]), f"{name} {d.shape}"
            assert d.numel() == 0 or bool((d == d.reshape(-1)[0]).all()), "per-tensor scales only"
    record("sgl_kernel", "flash_attn_with_kvcache", page=k_cache.shape[1])
    from vllm_xpu_attn.kernels import get_provider

    kd = k_descale[:1, :1].reshape(1).contiguous() if k_descale is not None and k_descale.numel() else None
    vd = v_descale[:1, :1].reshape(1).contiguous() if v_descale is not None and v_descale.numel() else None
    return get_provider("reference").flash_attn_with_kvcache(
        q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap, sinks=sinks, k_descale=kd, v_descale=vd,
        return_softmax_lse=return_softmax_lse)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                           v_descale=None, window_size=(-1, -1), softcap=0.0, num_splits=1, pack_gqa=None, sm_margin=0,
                           return_softmax_lse=False):
    assert cu_seqlens_q.dtype == torch.int32 and cu_seqlens_k.dtype == torch.int32
    assert q.dtype in (torch.float16, torch.bfloat16)
    record("sgl_kernel", "flash_attn_varlen_func")
    from vllm_xpu_attn.kernels import get_provider

    return get_provider("reference").flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                                            max_seqlen_k, softmax_scale, causal, window_size, softcap,
                                                            return_softmax_lse=return_softmax_lse)
