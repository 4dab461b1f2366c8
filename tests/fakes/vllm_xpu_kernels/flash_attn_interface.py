"""Fake of vllm_xpu_kernels 0.1.16.2 flash_attn_interface.flash_attn_varlen_func (signature copied)."""
from typing import Optional

import torch

from _common import record


def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None,
                           q_v=None, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size: Optional[list] = None, softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, return_softmax_lse=False, out=None,
                           scheduler_metadata=None, q_descale=None, k_descale=None, v_descale=None, num_splits=0,
                           fa_version=2, s_aux=None, num_splits_kv=None, is_mix_batch=True, host_kv_lens=None):
    assert cu_seqlens_k is not None or seqused_k is not None, "cu_seqlens_k or seqused_k must be provided"
    assert cu_seqlens_k is None or seqused_k is None, "cu_seqlens_k and seqused_k cannot be provided at the same time"
    assert block_table is None or seqused_k is not None, "when enable block_table, seqused_k is needed"
    assert q.dtype in (torch.float16, torch.bfloat16)
    for name, d in (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)):
        if d is not None:
            assert d.untyped_storage().nbytes() == d.element_size(), f"{name} must be view of single scalar tensor"
    if window_size is not None:
        assert len(window_size) == 2
    from vllm_xpu_attn.kernels import get_provider

    ref = get_provider("reference")
    if block_table is not None:
        assert block_table.dtype == torch.int32 and seqused_k.dtype == torch.int32 and cu_seqlens_q.dtype == torch.int32
        assert k.dim() == 4 and k.shape[1] % 16 == 0, f"block size {k.shape[1]} not a multiple of 16"
        assert max_seqlen_k >= block_table.shape[1] * k.shape[1] or max_seqlen_k > 0
        record("vllm_xpu_kernels", "paged", block=k.shape[1])
        res = ref.flash_attn_with_kvcache(q, k, v, block_table, seqused_k, cu_seqlens_q, max_seqlen_q,
                                          softmax_scale=softmax_scale, causal=causal,
                                          window_size=tuple(window_size or (-1, -1)), softcap=softcap, sinks=s_aux,
                                          alibi_slopes=alibi_slopes, k_descale=k_descale, v_descale=v_descale,
                                          return_softmax_lse=return_softmax_lse, out=out)
    else:
        record("vllm_xpu_kernels", "varlen")
        res = ref.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                         softmax_scale, causal, tuple(window_size or (-1, -1)), softcap, s_aux,
                                         alibi_slopes, return_softmax_lse=return_softmax_lse, out=out)
    return res
