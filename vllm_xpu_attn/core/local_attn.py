"""Local (chunked) attention virtual batches, as used by Llama-4's iRoPE layers.

A local-attention layer with chunk size C lets a query at position p see only keys in
[C * (p // C), p]. Each sequence's queries are split by chunk into "virtual" sequences,
each attending to its own chunk's keys with an ordinary causal paged call.

vLLM and SGLang do this with numpy on the host. Here it is done on device with a fixed
number of virtual rows per sequence (an upper bound from host ints), padding the unused
rows with zero queries and zero keys, so planning never synchronises.
"""

from __future__ import annotations

from typing import Optional

import torch

from .paging import cdiv, check_page_size, cu_seqlens
from .types import PagedStep


def virtual_rows_per_seq(chunk_size: int, max_seqlen_q: int) -> int:
    """Upper bound on chunks a run of max_seqlen_q consecutive queries can touch."""
    if max_seqlen_q <= 0:
        return 0
    return cdiv(max_seqlen_q - 1, chunk_size) + 1


def local_attention_plans(
    chunk_size: int,
    query_lens: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    page_size: int,
    max_seqlen_q: int,
    swa_page_table: Optional[torch.Tensor] = None,
) -> tuple[PagedStep, Optional[torch.Tensor]]:
    """Virtual-batch plan for local attention.

    query_lens, seq_lens [B] int (device); page_table int [B, max_pages]; host ints otherwise.
    Returns an PagedStep over B * R virtual rows (R = virtual_rows_per_seq), row b*R + r
    holding sequence b's queries that fall in its r-th touched chunk; unused rows are
    empty. Query order is preserved, so the original q/out tensors are used as they are.

    ``swa_page_table`` int [B, >= max_pages]: the same table translated into a hybrid pool's
    sliding-window sub-pool (local layers whose KV lives there); it is gathered by the same
    columns and returned second (None without it), so such layers read their own pool's pages.
    """
    check_page_size(page_size)
    if chunk_size < 1 or chunk_size % page_size:
        raise ValueError(f"attention chunk size {chunk_size} must be a positive multiple of the page size {page_size}")
    device = seq_lens.device
    batch = seq_lens.shape[0]
    rows = virtual_rows_per_seq(chunk_size, max_seqlen_q)
    pages_per_chunk = chunk_size // page_size

    q_len = query_lens.long()[:, None]  # [B, 1]
    k_len = seq_lens.long()[:, None]
    q_start = k_len - q_len  # absolute position of the first query
    chunk0 = torch.div(q_start, chunk_size, rounding_mode="floor")
    chunk = chunk0 + torch.arange(rows, device=device)[None, :]  # [B, R] chunk index of each virtual row
    chunk_lo = chunk * chunk_size
    lo = torch.maximum(q_start, chunk_lo)
    hi = torch.minimum(k_len, chunk_lo + chunk_size)
    v_q = (hi - lo).clamp(min=0)  # queries in this chunk
    v_k = torch.where(v_q > 0, hi - chunk_lo, torch.zeros_like(hi))  # keys: chunk start .. last query

    max_pages = page_table.shape[1]
    cols = (chunk * pages_per_chunk)[..., None] + torch.arange(pages_per_chunk, device=device)  # [B, R, P]
    cols = cols.clamp(0, max(max_pages - 1, 0))  # columns past the row are never read (v_k bounds them)

    def gather(table: torch.Tensor) -> torch.Tensor:
        if not max_pages:
            return torch.zeros(batch * rows, pages_per_chunk, dtype=torch.int32, device=device)
        t = table[:, :max_pages]
        return (
            torch.gather(t[:, None, :].expand(batch, rows, max_pages), 2, cols)
            .reshape(batch * rows, pages_per_chunk)
            .to(torch.int32)
        )

    if swa_page_table is not None and (swa_page_table.shape[0] != batch or swa_page_table.shape[1] < max_pages):
        raise ValueError(f"swa_page_table {list(swa_page_table.shape)} must cover page_table {list(page_table.shape)}")

    v_q, v_k = v_q.reshape(-1), v_k.reshape(-1)
    plan = PagedStep(
        cu_seqlens_q=cu_seqlens(v_q),
        cache_seqlens=v_k.to(torch.int32),
        page_table=gather(page_table),
        max_seqlen_q=min(max_seqlen_q, chunk_size),
        max_seqlen_k=chunk_size,
        page_size=page_size,
    )
    return plan, (gather(swa_page_table) if swa_page_table is not None else None)
