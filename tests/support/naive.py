"""A deliberately naive attention, written separately from the reference provider.

Per sequence, per query: keys gathered token by token through the page table, an explicit
visibility list built with plain Python comparisons, fp64 softmax. Slow and obviously
right; the oracle the reference provider is checked against. Shares no code with
vllm_xpu_attn.
"""

from __future__ import annotations

import math
from typing import Optional

import torch


def _descale(d: Optional[torch.Tensor], b: int, kv_head: int) -> float:
    if d is None:
        return 1.0
    if d.numel() == 1:
        return float(d.reshape(-1)[0])
    return float(d[b, kv_head])


def naive_paged_attention(
    q,
    k_cache,
    v_cache,
    page_table,
    cache_seqlens,
    cu_seqlens_q,
    *,
    scale=None,
    causal=True,
    window=(-1, -1),
    softcap=0.0,
    sinks=None,
    alibi=None,
    k_descale=None,
    v_descale=None,
    chunk_size=None,
    allowed=None,
):
    """Returns (out [total_q, Hq, Dv] fp64, lse [Hq, total_q] fp64).

    chunk_size: local attention (a query sees only keys of its own chunk).
    allowed(b, i, j) -> bool: an extra explicit mask (e.g. a speculative-decoding tree).
    """
    total_q, hq, d = q.shape
    page_size, hkv = k_cache.shape[1], k_cache.shape[2]
    group = hq // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = torch.zeros(total_q, hq, v_cache.shape[-1], dtype=torch.float64)
    lse = torch.full((hq, total_q), -math.inf, dtype=torch.float64)
    cu = [int(x) for x in cu_seqlens_q]
    for b in range(len(cu) - 1):
        k_len = int(cache_seqlens[b])
        q_len = cu[b + 1] - cu[b]
        keys, values = [], []
        for t in range(k_len):  # token t lives in page page_table[b, t // page_size] at t % page_size
            page = int(page_table[b, t // page_size])
            keys.append(k_cache[page, t % page_size].double())
            values.append(v_cache[page, t % page_size].double())
        for i in range(q_len):
            row = cu[b] + i
            pos = k_len - q_len + i  # bottom-right aligned query position
            visible = []
            for j in range(k_len):
                ok = True
                if causal and j > pos:
                    ok = False
                if window[0] >= 0 and j < pos - window[0]:
                    ok = False
                if not causal and window[1] >= 0 and j > pos + window[1]:
                    ok = False
                if chunk_size is not None and j < (pos // chunk_size) * chunk_size:
                    ok = False
                if allowed is not None and not allowed(b, i, j):
                    ok = False
                if ok:
                    visible.append(j)
            dist = torch.tensor([abs(pos - j) for j in visible], dtype=torch.float64)
            for h in range(hq):
                g = h // group
                k_vis = (
                    torch.stack([keys[j][g] for j in visible]) if visible else torch.zeros(0, d, dtype=torch.float64)
                )
                v_vis = torch.stack([values[j][g] for j in visible]) if visible else None
                logits = (k_vis @ q[row, h].double()) * _descale(k_descale, b, g) * scale
                if softcap > 0:
                    logits = softcap * torch.tanh(logits / softcap)
                if alibi is not None:
                    logits = logits - float(alibi[h]) * dist
                all_logits = logits.tolist() + ([float(sinks[h])] if sinks is not None else [])
                if not all_logits:
                    continue  # no key, no sink: out 0, lse -inf
                m = max(all_logits)
                if m == -math.inf:
                    continue  # nothing but sinks of -inf: out 0, lse -inf (FlashAttention's empty-row convention)
                denom = sum(math.exp(x - m) for x in all_logits)
                lse[h, row] = m + math.log(denom)
                if visible:
                    p = torch.exp(logits - m) / denom
                    out[row, h] = (p[:, None] * v_vis).sum(0) * _descale(v_descale, b, g)
    return out, lse
