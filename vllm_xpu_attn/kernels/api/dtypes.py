"""The dtypes of the contract: which float and FP8 types q and the KV cache may have, and their names."""

from __future__ import annotations

from typing import Optional

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = tuple(
    d for d in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)) if d is not None
)
KV_DTYPES = FLOAT_DTYPES + FP8_DTYPES
INDEX_DTYPES = (torch.int32, torch.int64)

_DTYPE_NAMES = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    **{d: str(d).replace("torch.", "") for d in FP8_DTYPES},
}


def dtype_name(d: torch.dtype) -> str:
    return _DTYPE_NAMES.get(d, str(d).replace("torch.", ""))


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


def fp8_descale(kv_dtype: torch.dtype, scale: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The kernels' descale [1] fp32 for an engine's per-tensor KV scale: the scale itself for an FP8 cache
    (the stored value times it is the real one), None for a 16/32-bit cache or no scale (= 1)."""
    if not is_fp8(kv_dtype) or scale is None:
        return None
    return scale.reshape(1).float()
