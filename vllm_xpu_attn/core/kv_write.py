"""KV-cache writes: decide what to write where, then let the provider scatter it."""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels.base import KernelProvider
from ..kernels.contract import KV_DTYPES, is_fp8


def check_kv_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, spec_kv_dtype: torch.dtype) -> None:
    """Configuration-time check of an engine-allocated cache: [P, page, Hkv, D] each, one dtype."""
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(
            f"KV cache must be [num_pages, page_size, num_kv_heads, head_dim] per K and V, got "
            f"{list(k_cache.shape)} / {list(v_cache.shape)}"
        )
    if k_cache.dtype not in KV_DTYPES:
        raise TypeError(f"KV cache dtype {k_cache.dtype} unsupported (float32/float16/bfloat16/float8_e4m3fn/float8_e5m2)")
    if v_cache.dtype != k_cache.dtype or v_cache.shape[:3] != k_cache.shape[:3]:
        raise ValueError(f"v_cache {list(v_cache.shape)} {v_cache.dtype} must match k_cache {list(k_cache.shape)} "
                         f"{k_cache.dtype} in dtype, pages, page size and KV heads")
    if v_cache.device != k_cache.device:
        raise ValueError(f"v_cache is on {v_cache.device} but k_cache is on {k_cache.device}")
    if k_cache.dtype != spec_kv_dtype:
        raise TypeError(f"KV cache dtype {k_cache.dtype} differs from the layer's configured KV dtype {spec_kv_dtype}")


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
) -> None:
    """Write new K/V ([T, Hkv, D]) at ``slot_mapping`` (int [T], slot = page*page_size + offset, <0 skipped).

    k = v = None means the layer shares another layer's KV (cross-layer sharing): nothing to write.
    ``latent``: an MLA latent cache (one row per token, no separate V): v and v_cache are None.
    FP8 caches get k/scale quantised values; scales default to 1.0.
    """
    if k is None and v is None:
        return
    if latent:
        if k is None or v is not None or v_cache is not None:
            raise ValueError("an MLA latent write takes the latent rows as k and no v")
    elif k is None or v is None:
        raise ValueError("k and v must both be given or both be None (cross-layer KV sharing)")
    if slot_mapping.shape[0] != k.shape[0]:
        # engines pad the token dim (graphs); only the first len(slot_mapping) tokens are real
        k = k[: slot_mapping.shape[0]]
        v = v[: slot_mapping.shape[0]] if v is not None else None
    if not is_fp8(k_cache.dtype):
        k_scale = v_scale = None
    provider.write_kv(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
