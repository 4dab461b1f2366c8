"""The device queries that pick a Triton tuning family and size the split-K policy (the only torch here).

``device_family`` maps a torch device to a ``tuning.TUNING`` family; ``compute_units`` counts its SMs or
sub-slices. The tables and every rule that reads them are tuning.py (torch-free, loaded by ci/intel_lowering.py).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from .tuning import TUNING


def device_family(device: torch.device) -> str:
    """The ``TUNING`` key of a device: "cuda_sm90" (sm90+), "cuda", "xpu" or "cpu"."""
    return _family(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _family(dev_type: str, index: Optional[int]) -> str:  # cached: a device query per step is host time
    if dev_type == "cuda":
        major, _ = torch.cuda.get_device_capability(index)
        return "cuda_sm90" if major >= 9 else "cuda"
    return dev_type if dev_type in TUNING else "cuda"


@functools.lru_cache(maxsize=None)
def compute_units(dev_type: str, index: Optional[int]) -> int:
    """SMs (CUDA) or sub-slices (XPU) of a device, queried once."""
    if dev_type == "cuda":
        return torch.cuda.get_device_properties(
            index if index is not None else torch.cuda.current_device()
        ).multi_processor_count
    return getattr(torch.xpu.get_device_properties(index), "gpu_subslice_count", 64)
