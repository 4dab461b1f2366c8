"""The reference provider: the oracle (``kernels.api.oracle``) served as a provider, any device, every feature."""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from ..api.base import KernelProvider, batch_invariant_requested
from ..api.checks import check_varlen
from ..api.dtypes import FLOAT_DTYPES, FP8_DTYPES
from ..api.oracle import attend_one_sequence, attend_rows_exactly, run_paged
from ..api.torch_ops import merge_state_torch, write_kv_torch
from ..api.types import Feature, KVLayout


class ReferenceProvider(KernelProvider):
    name = "reference"
    description = "pure torch, one sequence at a time; the oracle for every other provider"
    devices = frozenset({"cpu", "cuda", "xpu"})
    kv_layouts = frozenset({KVLayout.NHD, KVLayout.HND})  # any strides: pages are gathered by index
    dtypes = frozenset(FLOAT_DTYPES)
    kv_dtypes = frozenset(FLOAT_DTYPES + FP8_DTYPES)
    features = frozenset(Feature)  # every one
    graph_capture_reason = "the reference reads lengths on the host (.tolist()) every call"

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        return run_paged(step, call, q, k_cache, v_cache, out, layer)

    def flash_attn_varlen_func(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        softmax_scale: Optional[float] = None,
        causal: bool = False,
        window_size: Sequence[int] = (-1, -1),
        softcap: float = 0.0,
        sinks: Optional[torch.Tensor] = None,
        alibi_slopes: Optional[torch.Tensor] = None,
        return_softmax_lse: bool = False,
        out: Optional[torch.Tensor] = None,
    ):
        """Non-paged varlen attention: q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv]."""
        cq, ck = check_varlen(
            q,
            k,
            v,
            cu_seqlens_q,
            cu_seqlens_k,
            window_size=window_size,
            causal=causal,
            sinks=sinks,
            alibi_slopes=alibi_slopes,
        )
        scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
        hq = q.shape[1]
        o = torch.zeros(q.shape[0], hq, v.shape[-1], dtype=torch.float32, device=q.device)
        lse = torch.full((hq, q.shape[0]), float("-inf"), dtype=torch.float32, device=q.device)
        attend = attend_rows_exactly if batch_invariant_requested() else attend_one_sequence
        for b in range(len(cq) - 1):
            q0, q1, k0, k1 = cq[b], cq[b + 1], ck[b], ck[b + 1]
            if q1 == q0:
                continue
            o_b, lse_b = attend(
                q[q0:q1].float(),
                k[k0:k1].float(),
                v[k0:k1].float(),
                scale=scale,
                causal=causal,
                window=(int(window_size[0]), int(window_size[1])),
                softcap=softcap,
                sinks=sinks,
                alibi_slopes=alibi_slopes,
            )
            o[q0:q1], lse[:, q0:q1] = o_b, lse_b
        result = o.to(q.dtype)
        if out is not None:
            out.copy_(result)
            result = out
        return (result, lse) if return_softmax_lse else result

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        """o_* [T, H, D], lse_* [H, T] fp32 (natural log), sinks [H] -> (o [T, H, D] o_a.dtype, lse [H, T] fp32)."""
        return merge_state_torch(o_a, lse_a, o_b, lse_b, sinks)

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        """Scatter k/v [T, Hkv, D] into the paged caches (see torch_ops.write_kv_torch)."""
        write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
