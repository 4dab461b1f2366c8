"""Whether the prefill kernel reads K/V tiles by tensor descriptor (TMA), and the scratch allocator that needs.

Per step (``step_takes_descriptors``: device, Triton, tiles, head dims, grid size) and per layer
(``desc_layer_ok``: the caches' strides and alignment). Descriptors need Triton's global-scratch allocator
set in the launching thread's context (``ensure_scratch_allocator``).
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from .tuning import TUNING, cdiv, pow2

# query dtypes the descriptor kernel takes: fp32 (the IEEE-dot path) spills at 128-row descriptor tiles, so it
# takes the pointer kernel of the same tiles
DESC_DTYPES = (torch.bfloat16, torch.float16)

# descriptor scratch per launch = programs x 2 x 128 B (16 MiB at this bound); larger grids (a long chunk in a
# big mixed batch) take the pointer kernel rather than a large transient allocation per layer
DESC_MAX_PROGRAMS = 1 << 16


@functools.lru_cache(maxsize=None)
def cuda_major(index: Optional[int]) -> int:
    """Compute-capability major of a CUDA device (descriptors are tuned for Hopper, sm90, only)."""
    return torch.cuda.get_device_capability(index)[0]


@functools.lru_cache(maxsize=None)
def descriptors_supported() -> bool:
    """Device-side tensor descriptors and the scratch allocator they need: Triton >= 3.4 (3.3 has neither
    ``tl.make_tensor_descriptor`` nor a ContextVar allocator)."""
    import triton.language as tl
    from triton.runtime import _allocation

    return (
        hasattr(tl, "make_tensor_descriptor")
        and hasattr(_allocation._allocator, "get")
        and hasattr(_allocation, "NullAllocator")
    )


def step_takes_descriptors(
    forced: Optional[bool],
    device: torch.device,
    family: str,
    *,
    prefill: bool,
    invariant: bool,
    mla: bool,
    page_size: int,
    head_dim: int,
    v_head_dim: int,
    batch: int,
    rows_per_seq: int,
    kv_heads: int,
) -> bool:
    """Whether a step's prefill reads K/V by descriptor: ``forced`` (True/False), else Hopper (sm90) CUDA; a
    Triton with descriptors; a family with a pointer-load fallback; plain prefill (not batch-invariant, not
    MLA); key blocks inside one page; power-of-two head dims <= 128; and a grid of at most DESC_MAX_PROGRAMS
    programs (batch x row tiles of ``rows_per_seq`` query rows x ``kv_heads``)."""
    tiles = TUNING[family]
    if not (
        (forced if forced is not None else family == "cuda_sm90" and cuda_major(device.index) == 9)
        and descriptors_supported()
        and "prefill_ptr" in tiles
        and prefill
        and not invariant
        and not mla
        and page_size % tiles["prefill"][1] == 0
        and head_dim == pow2(head_dim) <= 128
        and v_head_dim == pow2(v_head_dim) <= 128
    ):
        return False
    # Triton allocates descriptor scratch per program on every launch: bounded here
    return batch * cdiv(rows_per_seq, tiles["prefill"][0]) * kv_heads <= DESC_MAX_PROGRAMS


def desc_layer_ok(k_cache: torch.Tensor, v_cache: torch.Tensor, page: int) -> bool:
    """Whether a layer's [pages, page, Hkv, D] caches can be read by tensor descriptor as [slots, columns]:
    pages laid end to end (stride(0) = page x stride(1)), every head inside its slot's row (a head-major cache
    permuted to this shape is not), 16-byte aligned base and row/head strides (TMA's rules), and slot rows
    indexable in int32."""
    for c in (k_cache, v_cache):
        st, elt = c.stride(), c.element_size()
        if (
            st[0] != page * st[1]
            or st[3] != 1
            or (c.shape[2] - 1) * st[2] + c.shape[3] > st[1]
            or (st[1] * elt) % 16
            or (st[2] * elt) % 16
            or c.data_ptr() % 16
            or c.shape[0] * page >= 2**31
        ):
            return False
    return True


_ALLOCATION = None  # triton.runtime._allocation, imported on first use


def ensure_scratch_allocator() -> None:
    """Device-side tensor descriptors need Triton's global-scratch allocator (the launcher asks it for 128
    bytes per descriptor per program on every launch). Where the calling thread's context has none set,
    set torch's caching allocator (what Triton's own tests use); one set by the engine is left alone."""
    global _ALLOCATION
    if _ALLOCATION is None:
        from triton.runtime import _allocation

        _ALLOCATION = _allocation
    if isinstance(_ALLOCATION._allocator.get(), _ALLOCATION.NullAllocator):
        _ALLOCATION._allocator.set(_torch_scratch)


def _torch_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    """int8 [size] on the current CUDA device (Triton's allocator signature; torch aligns to >= 512 B)."""
    return torch.empty(size, dtype=torch.int8, device=torch.device("cuda", torch.cuda.current_device()))
