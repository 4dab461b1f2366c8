"""The oracle: pure torch attention over a paged KV cache, written for obviousness, not speed.

One sequence at a time, fp32 math, explicit masks; every value check of the contract runs here (it
synchronises; that is fine for an oracle). The reference provider serves layers with it, and the vendor
wrappers' start-up probes judge a library's answer by ``paged_attention``.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .base import KernelProvider
from .checks import check_paged_values


def _descale_for(descale: Optional[torch.Tensor], b: int) -> Optional[torch.Tensor]:
    """Descale for sequence b, shaped to broadcast over [keys, Hkv, D]."""
    if descale is None:
        return None
    if descale.numel() == 1:
        return descale.reshape(1, 1, 1)
    return descale[b].reshape(1, -1, 1)  # [batch, Hkv] -> per kv head


def _to_f32(x: torch.Tensor, descale: Optional[torch.Tensor]) -> torch.Tensor:
    x = x.float()
    return x * descale if descale is not None else x


def attend_one_sequence(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    causal: bool,
    window: tuple[int, int],
    softcap: float,
    sinks: Optional[torch.Tensor],
    alibi_slopes: Optional[torch.Tensor],
    q_start: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention for one sequence, queries aligned to the end of the keys (or starting at key ``q_start``).

    q [Lq, Hq, D] fp32, k [Lk, Hkv, D] fp32, v [Lk, Hkv, Dv] fp32 -> (o [Lq, Hq, Dv] fp32, lse [Hq, Lq] fp32).
    A query that sees no key (and has no sink) gets o = 0, lse = -inf.
    """
    lq, hq, _ = q.shape
    lk, hkv, _ = k.shape
    group = hq // hkv
    k = k.repeat_interleave(group, dim=1)  # query head h reads kv head h // group
    v = v.repeat_interleave(group, dim=1)

    s = torch.einsum("qhd,khd->hqk", q, k) * scale  # [Hq, Lq, Lk]
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)

    q_pos = torch.arange(lq, device=q.device) + (lk - lq if q_start is None else q_start)  # bottom-right aligned
    k_pos = torch.arange(lk, device=q.device)
    rel = k_pos[None, :] - q_pos[:, None]  # [Lq, Lk]: key position relative to the query
    if alibi_slopes is not None:
        s = s - alibi_slopes.float()[:, None, None] * rel.abs()[None]

    left, right = window
    if causal:
        right = 0
    visible = torch.ones(lq, lk, dtype=torch.bool, device=q.device)
    if left >= 0:
        visible &= rel >= -left
    if right >= 0:
        visible &= rel <= right
    s = s.masked_fill(~visible[None], float("-inf"))

    if sinks is not None:
        sink_col = sinks.float()[:, None, None].expand(hq, lq, 1)
        lse = torch.logsumexp(torch.cat([s, sink_col], dim=-1), dim=-1)  # [Hq, Lq]
    else:
        lse = torch.logsumexp(s, dim=-1)
    finite = torch.isfinite(lse)
    p = torch.where(finite[..., None], torch.exp(s - lse.masked_fill(~finite, 0.0)[..., None]), 0.0)
    o = torch.einsum("hqk,khd->qhd", p, v)
    return o, lse


def attend_rows_exactly(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    causal: bool,
    window: tuple[int, int],
    softcap: float,
    sinks: Optional[torch.Tensor],
    alibi_slopes: Optional[torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """``attend_one_sequence`` one query row at a time over exactly the keys that row sees.

    Same shapes and semantics; the arithmetic of a row depends on that row and its keys only.
    """
    lq, lk = q.shape[0], k.shape[0]
    left, right = window
    if causal:
        right = 0
    o = torch.zeros(lq, q.shape[1], v.shape[-1], device=q.device)
    lse = torch.full((q.shape[1], lq), float("-inf"), device=q.device)
    for i in range(lq):
        pos = lk - lq + i
        lo = max(pos - left, 0) if left >= 0 else 0
        hi = max(min(pos + right + 1, lk) if right >= 0 else lk, lo)
        o[i : i + 1], lse[:, i : i + 1] = attend_one_sequence(
            q[i : i + 1],
            k[lo:hi],
            v[lo:hi],
            scale=scale,
            causal=causal,
            window=window,
            softcap=softcap,
            sinks=sinks,
            alibi_slopes=alibi_slopes,
            q_start=pos - lo,
        )
    return o, lse


def run_paged(step, call, q, k_cache, v_cache, out, layer):
    """Each query row over its visible keys, one sequence at a time, in fp32. With ``batch_invariant``
    each row is computed over exactly its visible keys, one row at a time, so its bits do not depend
    on the other rows of its chunk or batch (a batched matmul's blocking would change with them).
    The oracle checks every value of the step too (synchronising)."""
    page_table, cache_seqlens, cu_seqlens_q = step.page_table, step.cache_seqlens, step.cu_seqlens_q
    check_paged_values(
        page_table, cache_seqlens, cu_seqlens_q, step.max_seqlen_q, q.shape[0], step.page_size, k_cache.shape[0]
    )
    softmax_scale, causal, window_size, softcap = call.softmax_scale, call.causal, call.window, call.softcap
    return_softmax_lse = call.return_lse
    sinks, alibi_slopes, k_descale, v_descale = layer.sinks, layer.alibi_slopes, layer.k_descale, layer.v_descale
    page_size = k_cache.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    window = (int(window_size[0]), int(window_size[1]))
    total_q, hq = q.shape[:2]
    o = torch.zeros(total_q, hq, v_cache.shape[-1], dtype=torch.float32, device=q.device)
    lse = torch.full((hq, total_q), float("-inf"), dtype=torch.float32, device=q.device)
    cu = cu_seqlens_q.tolist()
    invariant = call.batch_invariant
    for b, k_len in enumerate(cache_seqlens.tolist()):
        q0, q1 = cu[b], cu[b + 1]
        if q1 == q0:
            continue
        pages = page_table[b, : -(-k_len // page_size)].long()
        k = k_cache[pages].flatten(0, 1)[:k_len]  # [k_len, Hkv, D]
        v = v_cache[pages].flatten(0, 1)[:k_len]
        # slots a row does not see may hold anything (engines reuse pages that left a window): 0 x NaN in
        # a batched p @ v would leak them, so rows then take exactly their own keys
        k, v = _to_f32(k, _descale_for(k_descale, b)), _to_f32(v, _descale_for(v_descale, b))
        exact = invariant or not bool(torch.isfinite(v).all())
        o_b, lse_b = (attend_rows_exactly if exact else attend_one_sequence)(
            q[q0:q1].float(),
            k,
            v,
            scale=scale,
            causal=causal,
            window=window,
            softcap=softcap,
            sinks=sinks,
            alibi_slopes=alibi_slopes,
        )
        o[q0:q1], lse[:, q0:q1] = o_b, lse_b
    real = cu[-1] if cu else 0
    out[:real].copy_(o[:real])  # rows after cu_seqlens_q[-1] are padding: left alone
    return (out, lse) if return_softmax_lse else out


class _Oracle(KernelProvider):
    """The oracle behind the one-call contract (every input check of ``probe_call``, no capability gate)."""

    name = "oracle"

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        return run_paged(step, call, q, k_cache, v_cache, out, layer)


def paged_attention(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, **kw):
    """The oracle as a function, with ``flash_attn_with_kvcache``'s arguments (vendor probes judge a library
    by it): q [total_q, Hq, D], caches [pages, page, Hkv, D|Dv] -> out [total_q, Hq, Dv] (, lse)."""
    return _Oracle().probe_call(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, **kw)
