"""Small torch implementations shared by providers (the oracle's and the vendors' fallbacks-by-design).

Providers that have no kernel of their own for a cache write or a cascade merge use these
directly; no provider calls another provider.
"""

from __future__ import annotations

from typing import Optional

import torch

from .checks import check_write_kv_all, check_write_kv_slots
from .dtypes import is_fp8
from .guard import flag_torch


def merge_state_torch(
    o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor, sinks: Optional[torch.Tensor] = None
):
    """Merge two partial softmax results over disjoint key sets (cascade attention).

    o_* [T, H, D], lse_* [H, T] fp32 (natural log), sinks [H] (joins the denominator once, no value)
    -> (o [T, H, D] o_a.dtype, lse [H, T] fp32, the sink included).
    """
    if o_a.shape != o_b.shape or lse_a.shape != lse_b.shape:
        raise ValueError(
            f"merge_state shapes differ: o {list(o_a.shape)} vs {list(o_b.shape)}, "
            f"lse {list(lse_a.shape)} vs {list(lse_b.shape)}"
        )
    if lse_a.shape != (o_a.shape[1], o_a.shape[0]):
        raise ValueError(f"lse must be [H, T]=[{o_a.shape[1]}, {o_a.shape[0]}], got {list(lse_a.shape)}")
    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    w_a = torch.where(torch.isfinite(lse_a), torch.exp(lse_a.float() - safe), 0.0).T[..., None]  # [T, H, 1]
    w_b = torch.where(torch.isfinite(lse_b), torch.exp(lse_b.float() - safe), 0.0).T[..., None]
    o = o_a.float() * w_a + o_b.float() * w_b
    if sinks is not None:
        with_sink = torch.logaddexp(lse, sinks.float()[:, None].expand_as(lse))
        o = o * torch.exp(lse - with_sink).nan_to_num(0.0).T[..., None]
        lse = with_sink
    return o.to(o_a.dtype), lse


def write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
    """Scatter new keys/values into the paged cache; slot = page * page_size + offset, < 0 = skip.

    k/v [T, Hkv, D] in the model dtype; caches [P, page, Hkv, D] (model dtype or FP8, in which case
    values are divided by k_scale / v_scale and saturated to the FP8 range).
    """
    check_write_kv_all(k, v, k_cache, v_cache, slot_mapping)  # both, before either is written
    num_slots = k_cache.shape[0] * k_cache.shape[1]
    if slot_mapping.device.type == "cpu":
        lo_hi = torch.aminmax(slot_mapping) if slot_mapping.numel() else None
        if lo_hi is not None and int(lo_hi.min) >= 0 and int(lo_hi.max) < num_slots:  # no slot skipped: no mask
            _write_all_cpu(k, v, k_cache, v_cache, slot_mapping.long(), k_scale, v_scale)
            return
        check_write_kv_slots(slot_mapping, num_slots)
        keep = slot_mapping >= 0
    else:  # no host sync: out-of-range slots are skipped and flagged (guard.py), raised at a step boundary
        over = slot_mapping >= num_slots
        keep = (slot_mapping >= 0) & ~over
        flag_torch(3, over, slot_mapping)
    for name, new, cache, scale in (("k", k, k_cache, k_scale), ("v", v, v_cache, v_scale)):
        if new is None:
            continue
        flat = cache.view(-1, *cache.shape[2:])
        slots = slot_mapping[keep].long()
        vals = new[keep]
        if is_fp8(cache.dtype):
            vals = quantize_fp8(vals, cache.dtype, scale)
            flat.view(torch.uint8)[slots] = vals.view(torch.uint8)  # index_put lacks FP8 kernels on some devices
        else:
            flat[slots] = vals


def _write_all_cpu(k, v, k_cache, v_cache, slots, k_scale, v_scale) -> None:
    """write_kv_torch's CPU fast path, every slot in range (checked by the caller): index_copy_, no boolean mask
    (whose nonzero + index + index_put cost ~4x more per layer). k/v [T, Hkv, D], caches [P, page, Hkv, D],
    slots long [T]."""
    for new, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        if new is None:
            continue
        flat = cache.view(-1, *cache.shape[2:])
        if is_fp8(cache.dtype):
            flat.view(torch.uint8).index_copy_(0, slots, quantize_fp8(new, cache.dtype, scale).view(torch.uint8))
        else:
            flat.index_copy_(0, slots, new.to(cache.dtype))


def quantize_fp8(x: torch.Tensor, fp8_dtype: torch.dtype, scale) -> torch.Tensor:
    """x / scale, saturated to the FP8 format's finite range (no inf/nan from overflow)."""
    finfo = torch.finfo(fp8_dtype)
    s = 1.0 if scale is None else scale
    if isinstance(s, torch.Tensor):
        s = s.float().reshape(-1)[0] if s.numel() == 1 else s.float()
    return (x.float() / s).clamp(finfo.min, finfo.max).to(fp8_dtype)
