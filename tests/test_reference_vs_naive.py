"""The reference provider against the naive oracle on random layouts (>= 300 per run)."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import assert_close_to, assert_lse_close, layouts
from naive import naive_paged_attention

from vllm_xpu_attn.kernels.api import get_provider

REF = get_provider("reference")


@settings(max_examples=300)
@given(layout=layouts(), want_lse=st.booleans(), use_out=st.booleans())
def test_reference_matches_naive(layout, want_lse, use_out):
    out_buf = (
        torch.full((layout.q.shape[0], layout.q.shape[1], layout.v_cache.shape[-1]), float("nan"), dtype=layout.q.dtype)
        if use_out
        else None
    )
    res = REF.flash_attn_with_kvcache(*layout.args(), **layout.kwargs, return_softmax_lse=want_lse, out=out_buf)
    out, lse = res if want_lse else (res, None)
    if use_out:
        assert out.data_ptr() == out_buf.data_ptr()
    assert out.dtype == layout.q.dtype and out.shape == layout.q.shape[:2] + (layout.v_cache.shape[-1],)
    ref_out, ref_lse = naive_paged_attention(*layout.args()[:6], **layout.naive_kwargs())
    assert_close_to(out, ref_out, layout.q.dtype)
    if want_lse:
        assert lse.shape == (layout.q.shape[1], layout.q.shape[0]) and lse.dtype == torch.float32
        assert_lse_close(lse, ref_lse)


@settings(max_examples=40)
@given(layout=layouts(page_sizes=(1,), allow_fp8=False, dtypes=[torch.float32]))
def test_varlen_matches_naive(layout):
    """flash_attn_varlen_func on the same data laid out contiguously (page size 1 = one token a page)."""
    lens = layout.cache_seqlens.tolist()
    if not lens:
        return
    rows = [layout.page_table[b, :n].long() for b, n in enumerate(lens)]
    idx = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
    k = layout.k_cache[idx, 0]
    v = layout.v_cache[idx, 0]
    cu_k = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    kw = {k_: v_ for k_, v_ in layout.kwargs.items() if k_ not in ("k_descale", "v_descale")}
    out, lse = REF.flash_attn_varlen_func(
        layout.q, k, v, layout.cu_seqlens_q, cu_k, layout.max_seqlen_q, max(lens), **kw, return_softmax_lse=True
    )
    ref_out, ref_lse = naive_paged_attention(*layout.args()[:6], **layout.naive_kwargs())
    assert_close_to(out, ref_out, torch.float32)
    assert_lse_close(lse, ref_lse)


@settings(max_examples=60)
@given(layout=layouts(allow_fp8=False, dtypes=[torch.float32]), split=st.integers(0, 8))
def test_merge_state_recombines_a_key_split(layout, split):
    """Attention over keys [0, s) merged with keys [s, n) equals attention over all n (non-causal)."""
    kw = dict(layout.kwargs, causal=False, window_size=(-1, -1), alibi_slopes=None, sinks=None)
    page = layout.k_cache.shape[1]
    lens = layout.cache_seqlens
    # split on a page boundary so both halves are expressible as page tables
    first = torch.minimum(lens, torch.full_like(lens, split * page))
    first_pages = (first + page - 1) // page
    second_table = torch.zeros_like(layout.page_table)
    for b in range(lens.shape[0]):
        n = int(first_pages[b])
        rest = layout.page_table[b, n:]
        second_table[b, : rest.shape[0]] = rest
    # a query with zero keys on one side must still merge correctly (lse = -inf there)
    o_a, lse_a = REF.flash_attn_with_kvcache(
        layout.q,
        layout.k_cache,
        layout.v_cache,
        layout.page_table,
        first,
        layout.cu_seqlens_q,
        layout.max_seqlen_q,
        **kw,
        return_softmax_lse=True,
    )
    o_b, lse_b = REF.flash_attn_with_kvcache(
        layout.q,
        layout.k_cache,
        layout.v_cache,
        second_table,
        lens - first,
        layout.cu_seqlens_q,
        layout.max_seqlen_q,
        **kw,
        return_softmax_lse=True,
    )
    merged, lse = REF.merge_state(o_a, lse_a, o_b, lse_b)
    ref_out, ref_lse = naive_paged_attention(
        *layout.args()[:6],
        **{**layout.naive_kwargs(), "causal": False, "window": (-1, -1), "alibi": None, "sinks": None},
    )
    assert_close_to(merged, ref_out, torch.float32)
    assert_lse_close(lse, ref_lse)
