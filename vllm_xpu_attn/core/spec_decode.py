"""Speculative-decoding plans (EAGLE-style trees with top-k > 1) and the cascade merge.

With top-k > 1 the draft tokens of one request form a tree: each draft token sees the
request's committed prefix plus its own ancestors in the tree. It is computed as a
cascade of two calls merged by their log-sum-exp:
  1. every draft token over the shared prefix (``main``, non-causal w.r.t. drafts), and
  2. every draft token as its own row over its visible draft tokens (``spec_expand``,
     page size 1, non-causal), whose keys are a mask-sorted gather of the draft slots.
"""

from __future__ import annotations

import torch

from .types import PagedStep


def verify_expand_plan(
    seq_lens: torch.Tensor,
    token_table: torch.Tensor,
    num_draft: int,
    custom_mask: torch.Tensor,
) -> PagedStep:
    """The per-draft-token part of a top-k > 1 target-verify step.

    seq_lens [B] int: committed tokens per request (prefix, without drafts).
    token_table [B, >= max(seq_lens) + num_draft] int: slot of each token (drafts follow the prefix).
    custom_mask bool [sum_b num_draft * (seq_lens[b] + num_draft)]: SGLang's flattened tree mask,
      per request a row-major [num_draft, seq_len + num_draft] block.
    Returns a page-size-1 PagedStep with B * num_draft rows of one query each; row i's keys are
    the draft slots it may see, valid ones first (sorted by mask, stable), count = mask row sum.
    """
    device = seq_lens.device
    batch = seq_lens.shape[0]
    n = num_draft
    if n < 1:
        raise ValueError(f"num_draft must be >= 1, got {n}")
    offsets = torch.arange(n, device=device)[None, :]  # [1, N]
    cols = offsets + seq_lens.long()[:, None]  # [B, N] positions of the drafts in each request
    row_len = (seq_lens.long() + n).repeat_interleave(n)  # [B*N] length of each mask row
    row_start = torch.nn.functional.pad(torch.cumsum(row_len, 0), (1, 0))[:-1]
    idx = cols.repeat_interleave(n, dim=0) + row_start[:, None]  # [B*N, N] draft columns of each mask row
    mask = custom_mask.reshape(-1)[idx].bool()
    keys = torch.where(mask, offsets, offsets + n)  # valid entries sort before masked ones
    order = torch.sort(keys, dim=1, stable=True).indices
    draft_slots = token_table.gather(1, cols.to(token_table.dtype).long()).repeat_interleave(n, dim=0)  # [B*N, N]
    lens = mask.sum(dim=1).to(torch.int32)
    return PagedStep(
        cu_seqlens_q=torch.arange(batch * n + 1, dtype=torch.int32, device=device),
        cache_seqlens=lens,
        page_table=draft_slots.gather(1, order).to(torch.int32),
        max_seqlen_q=1,
        max_seqlen_k=n,
        page_size=1,
    )


def verify_main_plan_topk(
    seq_lens: torch.Tensor, page_table: torch.Tensor, page_size: int, num_draft: int, max_seqlen_k: int
) -> PagedStep:
    """Prefix part of a top-k > 1 verify: each request's num_draft queries over its committed prefix.

    The caller runs it with causal=False (drafts follow the whole prefix).
    """
    batch = seq_lens.shape[0]
    return PagedStep(
        cu_seqlens_q=torch.arange(0, batch * num_draft + 1, num_draft, dtype=torch.int32, device=seq_lens.device),
        cache_seqlens=seq_lens.to(torch.int32),
        page_table=page_table.to(torch.int32),
        max_seqlen_q=num_draft,
        max_seqlen_k=max_seqlen_k,
        page_size=page_size,
    )


def verify_plan_topk1(
    seq_lens: torch.Tensor, page_table: torch.Tensor, page_size: int, num_draft: int, max_seqlen_k: int
) -> PagedStep:
    """Top-k = 1 verify: a chain, so plain causal attention with num_draft queries per request."""
    batch = seq_lens.shape[0]
    return PagedStep(
        cu_seqlens_q=torch.arange(0, batch * num_draft + 1, num_draft, dtype=torch.int32, device=seq_lens.device),
        cache_seqlens=(seq_lens + num_draft).to(torch.int32),
        page_table=page_table.to(torch.int32),
        max_seqlen_q=num_draft,
        max_seqlen_k=max_seqlen_k + num_draft,
        page_size=page_size,
    )


def draft_decode_expand_plan(
    out_cache_loc: torch.Tensor, batch: int, topk: int, num_steps: int, step_id: int
) -> PagedStep:
    """Draft decode with top-k > 1: each of the B*topk branches over its own step_id+1 draft tokens.

    out_cache_loc [B * topk * num_steps] int: slots of the draft tokens, laid out [B, topk, num_steps]
    (SGLang's order), so row b*topk + j holds branch j's slots; page size 1.
    """
    decode_len = step_id + 1
    rows = batch * topk
    loc = out_cache_loc.reshape(rows, num_steps)
    return PagedStep(
        cu_seqlens_q=torch.arange(rows + 1, dtype=torch.int32, device=out_cache_loc.device),
        cache_seqlens=torch.full((rows,), decode_len, dtype=torch.int32, device=out_cache_loc.device),
        page_table=loc[:, :decode_len].to(torch.int32),
        max_seqlen_q=1,
        max_seqlen_k=decode_len,
        page_size=1,
    )


__all__ = ["verify_expand_plan", "verify_main_plan_topk", "verify_plan_topk1", "draft_decode_expand_plan"]
