"""KV-cache writes: decide what to write where, then let the provider scatter it."""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels.api import KernelProvider, is_fp8


def _check_caches(k_cache: torch.Tensor, v_cache: Optional[torch.Tensor], kv_dtype: Optional[torch.dtype]) -> None:
    """What the providers' write_kv does not compare (O(1), no values read): V's cache with K's, and the
    cache dtype with the layer's configured KV dtype. Ranks, devices and the new rows are the providers' checks."""
    if kv_dtype is not None and k_cache.dtype != kv_dtype:
        raise TypeError(f"KV cache dtype {k_cache.dtype} differs from the layer's configured KV dtype {kv_dtype}")
    if v_cache is not None and (v_cache.dtype != k_cache.dtype or v_cache.shape[:3] != k_cache.shape[:3]):
        raise ValueError(
            f"v_cache {list(v_cache.shape)} {v_cache.dtype} must match k_cache {list(k_cache.shape)} "
            f"{k_cache.dtype} in dtype, pages, page size and KV heads"
        )


def write_kv(
    provider: KernelProvider,
    k: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: Optional[torch.Tensor | float] = None,
    v_scale: Optional[torch.Tensor | float] = None,
    latent: bool = False,
    kv_dtype: Optional[torch.dtype] = None,
) -> None:
    """Write new K/V ([T, Hkv, D]) at ``slot_mapping`` (int [T], slot = page*page_size + offset, <0 skipped).

    k = v = None means the layer shares another layer's KV (cross-layer sharing): nothing to write.
    ``latent``: an MLA latent cache (one row per token, no separate V): v and v_cache are None.
    FP8 caches get k/scale quantised values; scales default to 1.0. ``kv_dtype``: the layer's configured
    cache dtype (``LayerSpec.kv_dtype``), which the cache must have. Every check runs before the first store.
    """
    if k is None and v is None:
        return
    if latent:
        if k is None or v is not None or v_cache is not None:
            raise ValueError("an MLA latent write takes the latent rows as k and no v")
    elif k is None or v is None:
        raise ValueError("k and v must both be given or both be None (cross-layer KV sharing)")
    _check_caches(k_cache, v_cache, kv_dtype)
    if slot_mapping.shape[0] != k.shape[0]:
        # engines pad the token dim (graphs); only the first len(slot_mapping) tokens are real
        k = k[: slot_mapping.shape[0]]
        v = v[: slot_mapping.shape[0]] if v is not None else None
    if not is_fp8(k_cache.dtype):
        k_scale = v_scale = None
    provider.write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
