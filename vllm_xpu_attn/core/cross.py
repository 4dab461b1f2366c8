"""Encoder-decoder token tables: the decoder's part of each request's row.

Layout of a token table (SGLang): a request's encoder tokens occupy the first ``encoder_lens[b]``
entries of its row and its decoder tokens follow, starting on a page boundary.
"""

from __future__ import annotations

from typing import Optional

import torch

from .paging import cdiv, check_page_size


def misaligned_decoders(encoder_lens: torch.Tensor, page_size: int) -> Optional[torch.Tensor]:
    """Requests whose decoder tokens do not start on a page boundary: bool [B], or None when none can be flagged.

    A page table holds each page's first slot, so a request's first decoder token (at offset
    ``encoder_lens[b]`` of its token-table row) must open a page: that offset must be a multiple of
    ``page_size``. Lengths on the CPU are read (free) and a misaligned one is refused here; device lengths
    are never read on the host (no sync): the caller marks those requests' pages -1, which the kernels'
    guards flag and answer with NaN rows.
    """
    check_page_size(page_size)
    if page_size == 1:
        return None
    bad = encoder_lens % page_size != 0
    if encoder_lens.device.type != "cpu":
        return bad
    if bad.any():
        b = int(torch.nonzero(bad)[0, 0])
        offset = int(encoder_lens[b])
        raise ValueError(
            f"request {b}'s encoder tokens end at offset {offset}, not a multiple of the page size {page_size}: "
            f"decoder tokens must start on a page boundary (pad the encoder to {cdiv(offset, page_size) * page_size})"
        )
    return None


def shift_token_table(token_table: torch.Tensor, offsets: torch.Tensor, width: int) -> torch.Tensor:
    """Row b of the result is token_table[b, offsets[b] : offsets[b] + width] (clamped at the edge).

    For decoder self-attention of encoder-decoder models whose encoder tokens (a different
    count per request) precede the decoder tokens in each row. Sync-free (a gather).
    """
    cols = offsets.long()[:, None] + torch.arange(width, device=token_table.device)[None, :]
    return token_table.gather(1, cols.clamp(max=max(token_table.shape[1] - 1, 0)))
