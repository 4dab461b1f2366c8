"""``plan_step``: the one entry that turns what an engine knows about a step into a ``StepPlan``.

Both adapters call it once per step (FlashInfer's ``plan()``) and only translate their own
objects into ``StepInputs``; every planning decision lives here, once: which sub-plans a
mode gets, how speculative steps are laid out, how encoder tokens shift the decoder's
table, which pool a table is translated into. Pure tensor ops plus host ints: no
device-to-host synchronisation, so it runs inside a graph capture as it runs eagerly.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels.api import FLAGS, capturing
from . import cross, local_attn, paging, spec_decode
from .types import Mode, PagedStep, StepInputs, StepPlan


def check_step_config(page_size: int, attention_chunk_size: Optional[int] = None) -> None:
    """Refuse at start-up a configuration no step plan can serve (the backend's constructor calls it).

    (Layers that a top-k > 1 cascade cannot serve are refused by ``LayerRunner``'s constructor.)
    """
    paging.check_page_size(page_size)
    if attention_chunk_size is not None and (attention_chunk_size < 1 or attention_chunk_size % page_size):
        raise ValueError(
            f"vllm-xpu-attn: attention chunk size {attention_chunk_size} must be a positive multiple "
            f"of the page size {page_size}"
        )


_ARANGE: dict[torch.device, torch.Tensor] = {}


def _arange_i32(n: int, device: torch.device) -> torch.Tensor:
    """int32 [n] 0..n-1 from a per-device cache: a decode step's cu_seqlens_q without a launch.

    Never filled during a graph capture (a captured kernel has not run when capture ends).
    """
    buf = _ARANGE.get(device)
    if buf is not None and buf.shape[0] >= n:
        return buf[:n]
    if capturing(device):
        return torch.arange(n, dtype=torch.int32, device=device)
    size = max(n, 4097, 2 * (buf.shape[0] if buf is not None else 0))
    old = buf
    _ARANGE[device] = buf = torch.arange(size, dtype=torch.int32, device=device)
    if old is not None:
        _KEEP.append(old)  # a graph may have captured a view of it: keep it alive
    return buf[:n]


_KEEP: list[torch.Tensor] = []


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.int32 else t.to(torch.int32)


def _pages(
    inp: StepInputs,
    rows: Optional[torch.Tensor],
    max_k: int,
    row_index: Optional[torch.Tensor] = None,
    page: Optional[int] = None,
) -> torch.Tensor:
    """The page table covering max_k keys per row, at ``page`` (default the engine's page size) for token rows
    (validated by shape only: no sync)."""
    if rows is not None:
        return paging.token_table_to_page_table(rows, page or inp.page_size, max_k, row_index=row_index)
    table = inp.page_table
    if table is None:
        raise ValueError("plan_step needs a page_table or a token_table")
    if table.dim() != 2 or table.shape[0] != inp.seq_lens.shape[0]:
        raise ValueError(f"page_table must be [batch={inp.seq_lens.shape[0]}, max_pages], got {list(table.shape)}")
    if table.shape[1] * inp.page_size < max_k:
        raise ValueError(
            f"page table too short: {table.shape[1]} pages of {inp.page_size} cannot hold max_seqlen_k={max_k}"
        )
    return table


def _queries(inp: StepInputs, bs: int) -> torch.Tensor:
    """cu_seqlens_q int32 [B+1]: the engine's, or from query_lens, or (decode) 0..B without a launch."""
    if inp.cu_seqlens_q is not None:
        if inp.cu_seqlens_q.shape != (bs + 1,):
            raise ValueError(f"cu_seqlens_q must be [batch + 1]=[{bs + 1}], got {list(inp.cu_seqlens_q.shape)}")
        return _i32(inp.cu_seqlens_q)
    if inp.query_lens is not None:
        if inp.query_lens.shape != (bs,):
            raise ValueError(f"query_lens must be [batch]=[{bs}], got {list(inp.query_lens.shape)}")
        return paging.cu_seqlens(inp.query_lens)
    if inp.mode.is_decode:
        return _arange_i32(bs + 1, inp.seq_lens.device)
    raise ValueError(f"a {inp.mode.value} step needs query_lens or cu_seqlens_q")


def plan_step(inp: StepInputs) -> StepPlan:
    """StepInputs -> StepPlan with every sub-plan the step's layers need. Sync-free.

    Raises for bad index values the kernels found on the device in an earlier step (kernels/api/guard.py)."""
    try:
        FLAGS.poll(inp.seq_lens.device)
    except ValueError as e:  # the kernels name their arguments; say which of the caller's they came from
        if "cache_seqlens:" not in str(e):
            raise
        raise ValueError(
            f"{e} [in StepInputs terms: cache_seqlens is seq_lens (plus a speculative step's drafts), "
            "its page_table row comes from page_table or token_table]"
        ) from None
    mode, page = inp.mode, inp.page_size
    bs = int(inp.seq_lens.shape[0])
    seq_lens = inp.seq_lens
    max_k = int(inp.max_seqlen_k)
    spec = inp.spec
    rows = inp.token_table
    row_index = inp.token_rows  # gathered with the page striding where only pages are needed
    if row_index is not None:
        if rows is None:
            raise ValueError("token_rows needs the token_table (pool) it indexes")
        if row_index.shape != (bs,):
            raise ValueError(f"token_rows must be [batch]=[{bs}], got {list(row_index.shape)}")
        if inp.encoder_lens is not None or inp.swa_mapping is not None or spec.topk > 1:
            rows, row_index = rows.index_select(0, row_index), None  # these read the token-level rows
    request_rows = rows  # [B, max_context] per request (or the pool with row_index), before the encoder shift
    if rows is not None and inp.encoder_lens is not None:
        # Decoder tokens follow each request's encoder tokens in its row, so they open a page only when the
        # encoder length is a multiple of the page (Whisper's 1,500 positions are not): the decoder's keys are
        # planned token by token (page size 1: the rows are slots), for any encoder length, with no host read.
        rows = cross.shift_token_table(rows, inp.encoder_lens, max_k + spec.num_draft + spec.num_steps)
        page = 1
    spec_expand: Optional[PagedStep] = None
    q_lens: Optional[torch.Tensor] = None
    if seq_lens.dim() != 1:
        raise ValueError(f"seq_lens must be [batch], got shape {list(seq_lens.shape)}")

    if rows is None and inp.page_table is None:
        # a cache group of cross-attention layers only (vLLM): its keys are the encoder's
        if inp.encoder_lens is None or inp.encoder_page_table is None:
            raise ValueError(
                "plan_step needs a page_table or a token_table (or, for a cross-attention-only group, "
                "encoder_lens and encoder_page_table)"
            )
        cu = _queries(inp, bs)
        enc = PagedStep(
            cu_seqlens_q=cu,
            cache_seqlens=_i32(inp.encoder_lens),
            page_table=_i32(inp.encoder_page_table),
            max_seqlen_q=1 if mode.is_decode else int(inp.max_seqlen_q),
            max_seqlen_k=int(inp.max_encoder_len),
            page_size=page,
        )
        return StepPlan(mode, enc, int(inp.num_tokens), encoder=enc)

    if mode is Mode.DRAFT_DECODE and spec.topk > 1:  # tree branches: prefix part + per-branch drafts
        table = _pages(inp, rows, max_k, page=page)
        main = spec_decode.verify_main_plan_topk(seq_lens, table, page, spec.topk, max_k)
        if inp.draft_slots is None:
            raise ValueError("a top-k > 1 draft decode step needs draft_slots")
        spec_expand = spec_decode.draft_decode_expand_plan(inp.draft_slots, bs, spec.topk, spec.num_steps, spec.step_id)
        num_tokens, max_q = bs * spec.topk, spec.topk
    elif mode.is_decode:
        extra = spec.step_id + 1 if mode is Mode.DRAFT_DECODE else 0  # drafts written so far follow the prefix
        k_lens = _i32(seq_lens + extra if extra else seq_lens)
        table = _pages(inp, rows, max_k + extra, row_index, page=page)
        main = PagedStep(
            cu_seqlens_q=_queries(inp, bs),
            cache_seqlens=k_lens,
            page_table=_i32(table),
            max_seqlen_q=1 if bs else 0,
            max_seqlen_k=max_k + extra,
            page_size=page,
        )
        num_tokens, max_q = bs, 1
    elif mode is Mode.TARGET_VERIFY:
        n = spec.num_draft
        if n < 1:
            raise ValueError("a target-verify step needs spec.num_draft >= 1")
        if spec.topk <= 1:  # a chain: causal attention with n queries per request
            table = _pages(inp, rows, max_k + n, row_index, page=page)
            main = spec_decode.verify_plan_topk1(seq_lens, table, page, n, max_k)
        else:
            if rows is None or inp.custom_mask is None:
                raise ValueError("a top-k > 1 verify step needs the token_table and the tree's custom_mask")
            main = spec_decode.verify_main_plan_topk(seq_lens, _pages(inp, rows, max_k, page=page), page, n, max_k)
            spec_expand = spec_decode.verify_expand_plan(seq_lens, rows, n, inp.custom_mask)
        num_tokens, max_q = bs * n, n
    else:  # PREFILL / EXTEND / MIXED: each row by its own lengths
        max_q = int(inp.max_seqlen_q)
        cu = _queries(inp, bs)
        q_lens = inp.query_lens
        table = _pages(inp, rows, max_k, row_index, page=page)
        main = PagedStep(
            cu_seqlens_q=cu,
            cache_seqlens=_i32(seq_lens),
            page_table=_i32(table),
            max_seqlen_q=max_q,
            max_seqlen_k=max_k,
            page_size=page,
        )
        num_tokens = int(inp.num_tokens)

    plan = StepPlan(mode, main, num_tokens, spec_expand=spec_expand)

    if inp.encoder_lens is not None:
        cu_q = main.cu_seqlens_q
        if request_rows is not None:  # encoder tokens lead each row of the token table
            enc_table = paging.token_table_to_page_table(
                request_rows[:, : max(inp.max_encoder_len, 1)], inp.page_size, inp.max_encoder_len
            )
        elif inp.encoder_page_table is not None:
            enc_table = inp.encoder_page_table
        else:
            raise ValueError("an encoder-decoder step needs a token_table or an encoder_page_table")
        plan.encoder = PagedStep(
            cu_seqlens_q=cu_q,
            cache_seqlens=_i32(inp.encoder_lens),
            page_table=_i32(enc_table),
            max_seqlen_q=main.max_seqlen_q,
            max_seqlen_k=int(inp.max_encoder_len),
            page_size=inp.page_size,
        )  # encoder tokens open each row: whole pages

    if inp.swa_mapping is not None:
        if rows is None:
            raise ValueError("SWA translation needs the token table (slots are translated before page striding)")
        swa_rows = paging.swa_translate(rows[:, : main.page_table.shape[1] * page], inp.swa_mapping)
        swa_table = paging.token_table_to_page_table(swa_rows, page, swa_rows.shape[1])
        plan.swa_page_table = swa_table

    # Local layers run causally in every mode that has a causal main plan (decode, extend, top-k 1
    # verify and draft decode); the top-k > 1 cascade refuses local layers at start-up.
    if inp.attention_chunk_size and spec_expand is None:
        if q_lens is None:
            q_lens = main.cu_seqlens_q[1:] - main.cu_seqlens_q[:-1]
        plan.local, plan.local_swa_page_table = local_attn.local_attention_plans(
            inp.attention_chunk_size,
            q_lens,
            main.cache_seqlens,
            main.page_table,
            page,
            main.max_seqlen_q,
            swa_page_table=plan.swa_page_table,
        )
    return plan


__all__ = ["check_step_config", "plan_step"]
