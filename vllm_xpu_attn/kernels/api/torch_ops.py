"""Small torch implementations shared by providers (the oracle's and the vendors' fallbacks-by-design).

Providers that have no kernel of their own for a cache write or a cascade merge use these
directly; no provider calls another provider.
"""

from __future__ import annotations

import threading
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
        slots = slots_in_range(slot_mapping, num_slots)
        if slots is not None:  # no slot skipped: no mask
            _write_all_cpu(k, v, k_cache, v_cache, slots, k_scale, v_scale)
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
        slots = slot_mapping[keep].long()
        vals = new[keep]
        if is_fp8(cache.dtype):  # index_put lacks FP8 kernels on some devices: stored as bytes
            vals = quantize_fp8(vals, cache.dtype, scale).view(torch.uint8)
            cache = cache.view(torch.uint8)
        _put_rows(cache, slots, vals)


def _slot_rows(cache: torch.Tensor) -> Optional[torch.Tensor]:
    """cache [P, page, Hkv, D] as [P * page, Hkv, D] (a view) where a slot's row is one stride apart from the next
    (NHD pages); None for head-major (HND) pages, whose slots are not."""
    if cache.stride(0) == cache.shape[1] * cache.stride(1):
        return cache.view(-1, cache.shape[2], cache.shape[3])
    return None


def _put_rows(cache: torch.Tensor, slots: torch.Tensor, vals: torch.Tensor) -> None:
    """cache [P, page, Hkv, D] rows at ``slots`` (long [T], all in range) := vals [T, Hkv, D], any page layout."""
    if vals.dtype != cache.dtype:
        vals = vals.to(cache.dtype)
    flat = _slot_rows(cache)
    if flat is not None:
        flat.index_copy_(0, slots, vals)
    else:
        page = cache.shape[1]
        cache.index_put_((torch.div(slots, page, rounding_mode="floor"), slots.remainder(page)), vals)


# this thread's last verdict of slots_in_range: (slot_mapping, its version, data_ptr, num_slots, long slots or None)
_SLOTS = threading.local()


def slots_in_range(slot_mapping: torch.Tensor, num_slots: int) -> Optional[torch.Tensor]:
    """A CPU slot_mapping [T] as int64 when every slot lies in [0, num_slots) (none skipped, none out of range), else
    None (empty, some < 0, or some >= num_slots: the caller's masked path checks and names them).

    Once per step, not per layer: every layer of a step writes the same slot_mapping tensor, so the verdict is kept
    for that tensor object while its version counter, data pointer and ``num_slots`` are unchanged (an in-place
    change of its values, through any view, bumps the version: checked again). Inference tensors have no version
    counter: checked every call. The check itself: one ``aminmax`` (~2 us a layer with its host reads)."""
    memo = getattr(_SLOTS, "last", None)
    inference = slot_mapping.is_inference()
    if not inference:
        ver, ptr = slot_mapping._version, slot_mapping.data_ptr()
        if memo is not None and memo[0] is slot_mapping and memo[1] == ver and memo[2] == ptr and memo[3] == num_slots:
            return memo[4]
    slots = None
    if slot_mapping.numel():
        lo, hi = torch.aminmax(slot_mapping)
        if int(lo) >= 0 and int(hi) < num_slots:
            slots = slot_mapping.long()
    if not inference:
        _SLOTS.last = (slot_mapping, ver, ptr, num_slots, slots)
    return slots


def _write_all_cpu(k, v, k_cache, v_cache, slots, k_scale, v_scale) -> None:
    """write_kv_torch's CPU fast path, every slot in range (checked by the caller): index_copy_, no boolean mask
    (whose nonzero + index + index_put cost ~4x more per layer). k/v [T, Hkv, D], caches [P, page, Hkv, D],
    slots long [T]. The fewest ops (each ~1-2 us of dispatch at batch 1): a flat view, and a cast only where the
    dtypes differ."""
    fp8 = is_fp8(k_cache.dtype)
    for new, cache, scale in ((k, k_cache, k_scale), (v, v_cache, v_scale)):
        if new is None:
            continue
        if fp8:
            _put_rows(cache.view(torch.uint8), slots, quantize_fp8(new, cache.dtype, scale).view(torch.uint8))
        else:
            _put_rows(cache, slots, new if new.dtype == cache.dtype else new.to(cache.dtype))


def quantize_fp8(x: torch.Tensor, fp8_dtype: torch.dtype, scale) -> torch.Tensor:
    """x / scale, saturated to the FP8 format's finite range (no inf/nan from overflow)."""
    finfo = torch.finfo(fp8_dtype)
    s = 1.0 if scale is None else scale
    if isinstance(s, torch.Tensor):
        s = s.float().reshape(-1)[0] if s.numel() == 1 else s.float()
    return (x.float() / s).clamp(finfo.min, finfo.max).to(fp8_dtype)
