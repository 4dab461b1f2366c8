"""Paging logic both engines need, as pure functions of tensors plus host ints.

No function here reads a device tensor's values on the host: every data-dependent size
comes in as a host int from the engine (which keeps CPU copies of sequence lengths), so
the decode path plans without a device-to-host synchronisation.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import torch

from ..kernels.api import device_op, flag_torch


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cu_seqlens(lens: torch.Tensor) -> torch.Tensor:
    """[B] lengths -> int32 [B+1] exclusive prefix sums starting at 0."""
    if lens.dim() != 1:
        raise ValueError(f"lengths must be 1-D [batch], got shape {list(lens.shape)}")
    return torch.nn.functional.pad(torch.cumsum(lens, dim=0, dtype=torch.int32), (1, 0))


def check_page_size(page_size: int) -> int:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1:
        raise ValueError(f"page size must be an int >= 1, got {page_size!r}")
    return page_size


def token_table_to_page_table(
    token_table: torch.Tensor, page_size: int, max_seqlen_k: int, row_index: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """Token-granularity request->slot table to a page table.

    token_table [B, >= max_seqlen_k] int (slot of each token; SGLang's req_to_token rows) ->
    int32 [B, cdiv(max_seqlen_k, page_size)] page ids: slot of each page's first token // page_size.
    With ``row_index`` int [B], token_table is the whole pool and request b reads row row_index[b]
    (only the pages' first slots are gathered). Assumes the engine allocates whole pages (slots of a
    page are consecutive), as both do.
    """
    check_page_size(page_size)
    if token_table.dim() != 2:
        raise ValueError(f"token table must be [batch, max_context], got shape {list(token_table.shape)}")
    if max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_k must be >= 0, got {max_seqlen_k}")
    if max_seqlen_k > token_table.shape[1]:
        raise ValueError(
            f"max_seqlen_k={max_seqlen_k} exceeds the token table's {token_table.shape[1]} columns (max context length)"
        )
    n_pages = cdiv(max_seqlen_k, page_size)
    if row_index is not None and row_index.dim() != 1:
        raise ValueError(f"token rows must be [batch], got shape {list(row_index.shape)}")
    token_pages = device_op("token_pages", token_table.device.type)  # one launch instead of two torch ops
    if token_pages is not None:
        pages = token_pages(token_table, page_size, n_pages, row_index)
        if pages is not None:
            return pages
    firsts = token_table[:, : n_pages * page_size : page_size]  # strided: first token of each page
    if row_index is not None:
        pool_rows = token_table.shape[0]
        if firsts.device.type == "cpu":  # values readable for free: refuse a row outside the pool
            if row_index.numel() and (int(row_index.min()) < 0 or int(row_index.max()) >= pool_rows):
                bad = int(torch.nonzero((row_index < 0) | (row_index >= pool_rows))[0, 0])
                raise ValueError(
                    f"token_rows[{bad}]={int(row_index[bad])} is outside the token table's {pool_rows} rows"
                )
            firsts = firsts.index_select(0, row_index)  # [B, n_pages]: one gather of the strided columns
        else:  # no host sync: such a request reads row 0, is flagged, and gets page -1 (answered with NaN rows)
            bad = (row_index < 0) | (row_index >= pool_rows)
            flag_torch(4, bad, row_index)
            firsts = firsts.index_select(0, row_index.clamp(0, max(pool_rows - 1, 0))).masked_fill_(bad[:, None], -1)
    if page_size == 1:
        pages = firsts  # slots are pages: no kernel at all
    elif page_size & (page_size - 1) == 0:
        shift = page_size.bit_length() - 1  # one plain elementwise kernel (slots are >= 0)
        # in place on our own gathered copy (no second allocation), never on a view of the engine's table
        pages = firsts.bitwise_right_shift_(shift) if row_index is not None else firsts >> shift
    else:
        pages = torch.div(firsts, page_size, rounding_mode="floor")
    return pages if pages.dtype == torch.int32 else pages.to(torch.int32)


def flat_slots_to_page_table(
    slots: torch.Tensor, cu_seqlens_k: torch.Tensor, page_size: int, max_seqlen_k: int
) -> torch.Tensor:
    """Concatenated per-token slots to a page table (transformers' continuous batching: ``read_index``).

    slots int [total_k]: the slot of every key of every sequence, sequence b's keys at
    ``slots[cu_seqlens_k[b]:cu_seqlens_k[b+1]]`` in position order; cu_seqlens_k int [B+1] ->
    int32 [B, cdiv(max_seqlen_k, page_size)] page ids (slot of each page's first token // page_size; 0 past a
    sequence's end). Assumes whole pages (token j of a sequence at offset j % page_size of its page). No host sync.
    """
    check_page_size(page_size)
    if slots.dim() != 1 or cu_seqlens_k.dim() != 1:
        raise ValueError(
            f"slots must be [total_k] and cu_seqlens_k [batch + 1], got {list(slots.shape)} and "
            f"{list(cu_seqlens_k.shape)}"
        )
    bs = cu_seqlens_k.shape[0] - 1
    n_pages = cdiv(max(int(max_seqlen_k), 0), page_size)
    if bs <= 0 or n_pages == 0 or slots.numel() == 0:
        return torch.zeros(max(bs, 0), n_pages, dtype=torch.int32, device=slots.device)
    starts = torch.arange(n_pages, device=slots.device, dtype=torch.int64) * page_size  # [n_pages]
    lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int64)
    valid = starts[None, :] < lens[:, None]  # [B, n_pages]
    idx = (cu_seqlens_k[:-1].to(torch.int64)[:, None] + starts[None, :]).clamp_(0, slots.numel() - 1)
    pages = torch.div(slots[idx], page_size, rounding_mode="floor")
    return torch.where(valid, pages, torch.zeros_like(pages)).to(torch.int32)


def swa_translate(
    token_table: torch.Tensor, mapping: Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]
) -> torch.Tensor:
    """Hybrid SWA pools: full-pool slot ids -> SWA-pool slot ids (before page striding).

    ``mapping`` is the pool's full->swa index tensor, or its translate function (SGLang's
    ``translate_loc_from_full_to_swa``). Returns int64 like the input's slots.
    """
    if callable(mapping) and not isinstance(mapping, torch.Tensor):
        return mapping(token_table)
    return mapping[token_table.long()]
