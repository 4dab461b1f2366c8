"""Encoder-decoder token tables: the decoder's part of each request's row.

Layout of a token table (SGLang): a request's encoder tokens occupy the first ``encoder_lens[b]``
entries of its row and its decoder tokens follow, wherever the encoder's tokens end (mid-page too).
"""

from __future__ import annotations

import torch


def shift_token_table(token_table: torch.Tensor, offsets: torch.Tensor, width: int) -> torch.Tensor:
    """Row b of the result is token_table[b, offsets[b] : offsets[b] + width] (clamped at the edge).

    For decoder self-attention of encoder-decoder models whose encoder tokens (a different
    count per request) precede the decoder tokens in each row. Sync-free (a gather).
    """
    cols = offsets.long()[:, None] + torch.arange(width, device=token_table.device)[None, :]
    return token_table.gather(1, cols.clamp(max=max(token_table.shape[1] - 1, 0)))
