"""Shared helpers of the vendor wrappers."""

from __future__ import annotations

import importlib
from typing import Optional

import torch


def try_import(module: str) -> tuple[Optional[object], Optional[str]]:
    """(module, None) or (None, why it is unavailable)."""
    try:
        return importlib.import_module(module), None
    except Exception as e:  # ImportError, or a library that fails to load its native part
        return None, f"{module} not importable ({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"


def scalar_descale(name: str, t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Vendor FP8 paths take one per-tensor float32 scale; refuse per-head descales loudly."""
    if t is None:
        return None
    if t.numel() != 1:
        raise ValueError(f"{name}: this vendor kernel takes a per-tensor FP8 scale, got shape {list(t.shape)}; "
                         "use the triton or reference provider for per-head descales")
    return t.reshape(1).float()


def fa3_window(window_size, causal: bool) -> tuple[int, int]:
    left, right = int(window_size[0]), int(window_size[1])
    return (left, 0 if causal and right != -1 else right)
