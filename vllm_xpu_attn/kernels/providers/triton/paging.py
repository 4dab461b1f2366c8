"""Token table -> page table in one Triton launch (SGLang's step plan on CUDA / Intel XPU).

``core.paging.token_table_to_page_table`` needs, per decode step, a strided gather of each page's first
slot (optionally through SGLang's ``req_pool_indices``) and a shift: two torch ops whose host cost
(~20 us each on the H200 host, benchmarks/bench_host_cost.py) is most of SGLang's ``plan_step``. This
does it in one launch through :class:`FastLaunch`. The result is the same integers as the torch path
(tests/test_plan_step.py and tests/gpu compare them), so choosing between the two changes speed only.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...api import FLAGS
from .launch import FastLaunch, fast_launch_supported
from .signature import token_pages_signature
from .variants import token_pages_variant

_LAUNCHERS: dict[tuple, FastLaunch] = {}  # signature.token_pages_signature -> launcher


def token_pages(
    token_table: torch.Tensor, page_size: int, n_pages: int, row_index: Optional[torch.Tensor]
) -> Optional[torch.Tensor]:
    """int32 [B, n_pages] page ids from token_table [rows, >= n_pages * page_size] int slots (rows picked by
    row_index int [B], else B = rows), or None where this path does not apply (then the caller's torch ops run):
    not a CUDA/XPU tensor, the fast launch unavailable (interpreter, unverified Triton), a non-unit column
    stride, or an index dtype other than int32/int64."""
    dev = token_table.device
    if (
        dev.type not in ("cuda", "xpu")
        or token_table.dim() != 2
        or token_table.stride(1) != 1
        or token_table.dtype not in (torch.int32, torch.int64)
        or (
            row_index is not None
            and (row_index.dtype not in (torch.int32, torch.int64) or row_index.dim() != 1 or row_index.device != dev)
        )
    ):
        return None
    if not fast_launch_supported()[0]:
        return None
    batch = row_index.shape[0] if row_index is not None else token_table.shape[0]
    out = torch.empty(batch, n_pages, dtype=torch.int32, device=dev)
    if batch == 0 or n_pages == 0:
        return out
    rows = row_index if row_index is not None else token_table  # unread without HAS_ROWS
    stride = token_table.stride(0)
    key = token_pages_signature(batch, page_size, token_table, rows, row_index is not None, out, n_pages)
    fl = _LAUNCHERS.get(key)
    if fl is None:
        from .kernels import _token_pages_kernel

        if len(_LAUNCHERS) >= 1024:  # bounded: drop the oldest batch size
            _LAUNCHERS.pop(next(iter(_LAUNCHERS)))
        # unchecked: the key holds every specialisation input (dtypes, alignment, the ints' classes)
        v = token_pages_variant(page_size, row_index is not None)
        fl = _LAUNCHERS[key] = FastLaunch(
            _token_pages_kernel, (batch,), v.constexprs, v.num_warps, v.num_stages, check=False
        )
    fl(token_table, rows, out, FLAGS.buffer(dev), stride, n_pages, token_table.shape[0])
    return out
