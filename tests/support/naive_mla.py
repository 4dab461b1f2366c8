"""Naive multi-head latent attention from the DeepSeek-V2 paper's equations (arXiv 2405.04434, sec. 2.1),
written without the absorption trick and sharing no code with vllm_xpu_attn.

Per token t of a sequence (eqs. 9-19, attention part; the projections that make the inputs are the
caller's):
    c_KV_t                      latent KV, [d_c]                      (eq. 9,  d_c = kv_lora_rank)
    k_C_t,i = W_UK_i c_KV_t     per-head key, no RoPE, [d_h]          (eq. 10, d_h = qk_nope_head_dim)
    v_C_t,i = W_UV_i c_KV_t     per-head value, [d_v]                 (eq. 11)
    k_R_t                       decoupled RoPE key, shared by heads   (eq. 15, post-RoPE)
    k_t,i  = [k_C_t,i ; k_R_t]                                        (eq. 16)
    q_t,i  = [q_C_t,i ; q_R_t,i]                                      (eq. 14, post-RoPE)
    o_t,i  = sum_{j<=t} softmax_j(q_t,i . k_j,i / sqrt(d_h + d_R)) v_C_j,i   (eq. 17, causal)
Scale default 1/sqrt(d_h + d_R); engines may pass another (YaRN mscale), so it is a parameter.
"""

from __future__ import annotations

import math
from typing import Optional

import torch


def naive_mla(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    c_kv: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    q_start: int,
    scale: Optional[float] = None,
) -> torch.Tensor:
    """One sequence. q_nope [Lq, H, d_h], q_rope [Lq, H, d_R] for the tokens at positions q_start..q_start+Lq-1;
    c_kv [Lk, d_c], k_rope [Lk, d_R] for every token 0..Lk-1 the sequence has (prefix + new);
    w_uk [H, d_h, d_c], w_uv [H, d_v, d_c] (k_C = W_UK c, v_C = W_UV c). Returns o [Lq, H, d_v] fp64."""
    lq, h, d_h = q_nope.shape
    d_r = q_rope.shape[-1]
    scale = 1.0 / math.sqrt(d_h + d_r) if scale is None else scale
    qn, qr, c, kr = (x.double() for x in (q_nope, q_rope, c_kv, k_rope))
    wuk, wuv = w_uk.double(), w_uv.double()
    out = torch.zeros(lq, h, wuv.shape[1], dtype=torch.float64)
    for t in range(lq):
        pos = q_start + t
        for i in range(h):
            keys = []
            for j in range(pos + 1):  # causal: token j <= pos
                k_c = wuk[i] @ c[j]  # eq. 10
                k = torch.cat([k_c, kr[j]])  # eq. 16
                keys.append(k)
            q = torch.cat([qn[t, i], qr[t, i]])  # eq. 14
            s = torch.stack([q @ k for k in keys]) * scale
            p = torch.softmax(s, dim=0)
            vals = torch.stack([wuv[i] @ c[j] for j in range(pos + 1)])  # eq. 11
            out[t, i] = p @ vals  # eq. 17
    return out
