"""Encoder / cross-attention plans (encoder-decoder models).

Layout both engines use: a request's encoder tokens occupy the first ``encoder_len``
entries of its token table and the decoder tokens follow at a page-aligned offset.
"""

from __future__ import annotations

import torch

from .paging import cdiv, check_page_size, cu_seqlens, token_table_to_page_table
from .types import AttnPlan


def encoder_plan(
    encoder_lens: torch.Tensor,
    token_table: torch.Tensor,
    page_size: int,
    max_encoder_len: int,
    query_lens: torch.Tensor,
    max_seqlen_q: int,
) -> AttnPlan:
    """Cross-attention: each request's decoder queries over all of its encoder keys (non-causal).

    encoder_lens [B] int (device), token_table [B, >= max_encoder_len] int slots,
    query_lens [B] decoder queries this step. Host ints otherwise.
    """
    return AttnPlan(
        cu_seqlens_q=cu_seqlens(query_lens),
        cache_seqlens=encoder_lens.to(torch.int32),
        page_table=token_table_to_page_table(token_table, page_size, max_encoder_len),
        max_seqlen_q=int(max_seqlen_q),
        max_seqlen_k=int(max_encoder_len),
        page_size=page_size,
    )


def decoder_token_table(token_table: torch.Tensor, encoder_offset: int, page_size: int) -> torch.Tensor:
    """The decoder part of a request's token table, which starts after the encoder tokens."""
    check_page_size(page_size)
    if encoder_offset % page_size:
        raise ValueError(
            f"encoder token offset {encoder_offset} is not a multiple of the page size {page_size}: "
            f"decoder tokens must start on a page boundary (pad the encoder to {cdiv(encoder_offset, page_size) * page_size})"
        )
    return token_table[:, encoder_offset:]


def shift_token_table(token_table: torch.Tensor, offsets: torch.Tensor, width: int) -> torch.Tensor:
    """Row b of the result is token_table[b, offsets[b] : offsets[b] + width] (clamped at the edge).

    For decoder self-attention of encoder-decoder models whose encoder tokens (a different
    count per request) precede the decoder tokens in each row. Sync-free (a gather).
    """
    cols = offsets.long()[:, None] + torch.arange(width, device=token_table.device)[None, :]
    return token_table.gather(1, cols.clamp(max=max(token_table.shape[1] - 1, 0)))
