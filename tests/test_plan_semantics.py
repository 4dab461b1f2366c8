"""Step planning: hand-computed plans, edge cases, and semantic checks against the naive oracle.

Plans come from ``plan_step`` (what the adapters call); the helpers it is built from (core.paging,
core.spec_decode, core.local_attn) are checked on their own where their layout is the point."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import assert_close_to
from naive import naive_paged_attention

from vllm_xpu_attn import core
from vllm_xpu_attn.core import (
    AttentionKind,
    LayerRunner,
    LayerSpec,
    Mode,
    StepInputs,
    StepPlan,
    local_attn,
    paging,
    plan_step,
    spec_decode,
)
from vllm_xpu_attn.kernels.api import get_provider

REF = get_provider("reference")
I32 = torch.int32


def t(*v, dtype=I32):
    return torch.tensor(v, dtype=dtype)


# ---- page tables -------------------------------------------------------------------


def test_token_table_to_page_table_strides_and_divides():
    table = torch.tensor([[8, 9, 10, 11, 20, 21, 22, 23], [4, 5, 6, 7, 0, 0, 0, 0]])
    assert core.token_table_to_page_table(table, 4, 8).tolist() == [[2, 5], [1, 0]]
    assert core.token_table_to_page_table(table, 4, 5).tolist() == [[2, 5], [1, 0]]  # partial last page
    assert core.token_table_to_page_table(table, 4, 4).tolist() == [[2], [1]]  # exactly fills one page
    assert core.token_table_to_page_table(table, 1, 3).tolist() == [[8, 9, 10], [4, 5, 6]]
    assert core.token_table_to_page_table(table, 4, 0).shape == (2, 0)
    assert core.token_table_to_page_table(table, 4, 8).dtype == I32


def test_token_table_edges():
    assert core.token_table_to_page_table(torch.zeros(0, 16, dtype=torch.int64), 8, 16).shape == (0, 2)  # empty batch
    full = torch.arange(32).reshape(1, 32)
    assert core.token_table_to_page_table(full, 16, 32).tolist() == [[0, 1]]  # max context length
    with pytest.raises(ValueError, match="exceeds the token table"):
        core.token_table_to_page_table(full, 16, 33)
    with pytest.raises(ValueError, match="page size"):
        core.token_table_to_page_table(full, 0, 8)


def test_mixed_step_plan_and_padding_rows():
    # decode row (q 1 / k 9), extend row with prefix (q 3 / k 7), prefill (q 4 / k 4), graph padding (q 1/k 1, q 0/k 0)
    q_lens, k_lens = t(1, 3, 4, 1, 0), t(9, 7, 4, 1, 0)

    def step(page_table):
        return plan_step(
            StepInputs(Mode.MIXED, k_lens, 9, 9, 4, query_lens=q_lens, max_seqlen_q=4, page_table=page_table)
        ).main

    plan = step(torch.zeros(5, 3, dtype=I32))
    assert plan.cu_seqlens_q.tolist() == [0, 1, 4, 8, 9, 9]
    assert plan.cache_seqlens.tolist() == [9, 7, 4, 1, 0]
    assert (plan.max_seqlen_q, plan.max_seqlen_k, plan.batch_size, plan.page_size) == (4, 9, 5, 4)
    with pytest.raises(ValueError, match="page table too short"):
        step(torch.zeros(5, 2, dtype=I32))


def test_decode_step_plan_empty_and_normal():
    empty = plan_step(
        StepInputs(Mode.DECODE, torch.zeros(0, dtype=I32), 0, 0, 16, page_table=torch.zeros(0, 0, dtype=I32))
    ).main
    assert empty.cu_seqlens_q.tolist() == [0] and empty.max_seqlen_q == 0 and empty.page_table.shape == (0, 0)
    plan = plan_step(StepInputs(Mode.DECODE, t(5, 1, 16), 16, 3, 16, page_table=torch.zeros(3, 1, dtype=I32))).main
    assert plan.cu_seqlens_q.tolist() == [0, 1, 2, 3] and plan.max_seqlen_q == 1
    assert plan.cache_seqlens.tolist() == [5, 1, 16] and plan.page_table.shape == (3, 1)


def test_swa_translate_tensor_and_callable():
    mapping = torch.tensor([0, 10, 11, 12, 13])
    table = torch.tensor([[1, 2], [4, 0]])
    assert paging.swa_translate(table, mapping).tolist() == [[10, 11], [13, 0]]
    assert paging.swa_translate(table, lambda x: x + 100).tolist() == [[101, 102], [104, 100]]


# ---- local attention ---------------------------------------------------------------


def test_local_attention_plan_hand_computed():
    # chunk 4, page 2. seq0: 6 prefix + 4 new (positions 6..9): chunks 1 (6,7) and 2 (8,9).
    # seq1: decode at position 4 (k_len 5): chunk 1, keys 4..4.
    pt = torch.arange(20, dtype=I32).reshape(2, 10)
    plan = plan_step(
        StepInputs(
            Mode.MIXED, t(10, 5), 10, 5, 2, query_lens=t(4, 1), max_seqlen_q=4, page_table=pt, attention_chunk_size=4
        )
    ).local
    rows = local_attn.virtual_rows_per_seq(4, 4)
    assert rows == 2
    assert plan.cu_seqlens_q.tolist() == [0, 2, 4, 5, 5]
    assert plan.cache_seqlens.tolist() == [4, 2, 1, 0]
    assert plan.page_table.tolist()[0] == [2, 3] and plan.page_table.tolist()[1] == [4, 5]
    assert plan.page_table.tolist()[2] == [12, 13]
    assert (plan.max_seqlen_q, plan.max_seqlen_k) == (4, 4)
    with pytest.raises(ValueError, match="multiple of the page size"):
        plan_step(StepInputs(Mode.DECODE, t(1), 1, 1, 4, page_table=pt[:1], attention_chunk_size=6))


@settings(max_examples=40)
@given(data=st.data())
def test_local_attention_matches_chunk_masked_naive(data):
    page = data.draw(st.sampled_from([1, 2, 4]))
    chunk = page * data.draw(st.integers(1, 4))
    batch = data.draw(st.integers(0, 3))
    k_lens = [data.draw(st.integers(0, 30)) for _ in range(batch)]
    q_lens = [data.draw(st.integers(0, k)) if k else 0 for k in k_lens]
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 1000)))
    width = max([math.ceil(k / page) for k in k_lens] + [1])
    pages = torch.randperm(batch * width + 1, generator=gen).to(I32)[: batch * width].reshape(batch, width)
    kc = torch.randn(batch * width + 1, page, 1, 8, generator=gen)
    vc = torch.randn_like(kc)
    q = torch.randn(sum(q_lens), 2, 8, generator=gen)
    max_q = max(q_lens + [0])
    plan = plan_step(
        StepInputs(
            Mode.EXTEND,
            t(*k_lens),
            max(k_lens + [0]),
            sum(q_lens),
            page,
            query_lens=t(*q_lens),
            max_seqlen_q=max_q,
            page_table=pages,
            attention_chunk_size=chunk,
        )
    ).local
    out = REF.flash_attn_with_kvcache(
        q, kc, vc, plan.page_table, plan.cache_seqlens, plan.cu_seqlens_q, plan.max_seqlen_q
    )
    cu = t(0, *torch.tensor(q_lens, dtype=torch.int64).cumsum(0).tolist()) if batch else t(0)
    want, _ = naive_paged_attention(q, kc, vc, pages, t(*k_lens), cu, chunk_size=chunk)
    assert_close_to(out, want, torch.float32)


# ---- cross attention ---------------------------------------------------------------


def test_encoder_decoder_step_from_token_rows():
    """A token-table row holds the encoder's tokens, then the decoder's: the encoder sub-plan reads the first
    encoder_lens[b] slots in whole pages, the decoder's self-attention the rest, token by token (page size 1),
    wherever the encoder ends; the decoder layer's output on that plan matches the oracle over those slots."""
    table = torch.arange(16).reshape(1, 16) + 32

    def step(encoder_len):
        return plan_step(
            StepInputs(
                Mode.EXTEND,
                t(3),
                3,
                3,
                4,
                query_lens=t(3),
                max_seqlen_q=3,
                token_table=table,
                encoder_lens=t(encoder_len),
                max_encoder_len=encoder_len,
            )
        )

    plan = step(8)
    enc = plan.encoder
    assert (
        enc.page_table.tolist() == [[8, 9]]
        and enc.cache_seqlens.tolist() == [8]
        and enc.cu_seqlens_q.tolist() == [0, 3]
    )
    assert enc.page_size == 4 and plan.main.page_size == 1
    assert plan.main.page_table.tolist() == [[40, 41, 42]] and plan.main.cache_seqlens.tolist() == [3]
    plan = step(6)  # the decoder's first token at slot 38, mid-page 9
    assert plan.main.page_table.tolist() == [[38, 39, 40]] and plan.encoder.page_table.tolist() == [[8, 9]]

    g = torch.Generator().manual_seed(4)
    kc, vc = torch.randn(12, 4, 1, 8, generator=g), torch.randn(12, 4, 1, 8, generator=g)  # [pages, page, Hkv, D]
    q = torch.randn(3, 2, 8, generator=g)
    runner = LayerRunner(
        LayerSpec(num_q_heads=2, num_kv_heads=1, head_dim=8, scale=8**-0.5), "cpu", 1, override="reference"
    )
    out = runner.forward(plan, q, kc, vc)
    flat_k, flat_v = kc.reshape(-1, 1, 1, 8), vc.reshape(-1, 1, 1, 8)  # the pool, one token per page
    want, _ = naive_paged_attention(
        q,
        flat_k,
        flat_v,
        torch.tensor([[38, 39, 40]], dtype=torch.int32),
        t(3),
        torch.tensor([0, 3], dtype=torch.int32),
    )
    assert_close_to(out, want, torch.float32)


# ---- speculative decoding ----------------------------------------------------------


def test_verify_expand_plan_matches_reference_example():
    # one request with 8 committed tokens and 3 drafts; tree: d0 root, d1 child of d0, d2 child of d0
    n, prefix = 3, 8
    tree = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool)
    mask = torch.cat([torch.ones(n, prefix, dtype=torch.bool), tree], dim=1).reshape(-1)
    table = torch.arange(100, 100 + prefix + n).reshape(1, -1)
    plan = spec_decode.verify_expand_plan(t(prefix), table, n, mask)
    assert plan.cache_seqlens.tolist() == [1, 2, 2]
    assert plan.page_table.tolist() == [[108, 109, 110], [108, 109, 110], [108, 110, 109]]
    assert plan.cu_seqlens_q.tolist() == [0, 1, 2, 3] and plan.page_size == 1


def test_topk_cascade_equals_tree_masked_naive():
    gen = torch.Generator().manual_seed(3)
    n, prefixes = 3, [5, 9]
    trees = [
        torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]], dtype=torch.bool),
        torch.tensor([[1, 0, 0], [0, 1, 0], [0, 1, 1]], dtype=torch.bool),
    ]
    page = 4
    # token table: request b's tokens in consecutive slots of its own pages
    table = torch.stack([torch.arange(16) + 16 * b for b in range(2)])
    kc = torch.randn(8, page, 1, 8, generator=gen)
    vc = torch.randn_like(kc)
    q = torch.randn(2 * n, 2, 8, generator=gen)
    mask = torch.cat(
        [torch.cat([torch.ones(n, p, dtype=torch.bool), tr], 1).reshape(-1) for p, tr in zip(prefixes, trees)]
    )
    seq = t(*prefixes)
    main = spec_decode.verify_main_plan_topk(seq, core.token_table_to_page_table(table, page, 12), page, n, 12)
    plan = StepPlan(Mode.TARGET_VERIFY, main, 2 * n, spec_expand=spec_decode.verify_expand_plan(seq, table, n, mask))
    sinks = torch.tensor([0.5, -1.0])
    spec = LayerSpec(2, 1, 8, 8**-0.5, dtype=torch.float32, kv_dtype=torch.float32, has_sinks=True)
    runner = LayerRunner(spec, "cpu", page, with_spec_decode=True)
    runner.bind(sinks=sinks)
    out = runner.forward(plan, q, kc, vc)

    def allowed(b, i, j):
        p = prefixes[b]
        return j < p or bool(trees[b][i, j - p])

    want, _ = naive_paged_attention(
        q,
        kc,
        vc,
        core.token_table_to_page_table(table, page, 12),
        seq + n,
        t(0, n, 2 * n),
        causal=False,
        allowed=allowed,
        sinks=sinks,
    )
    assert_close_to(out, want, torch.float32)


def test_draft_decode_expand_plan():
    loc = torch.arange(2 * 2 * 3) + 50  # [B=2, topk=2, steps=3]
    plan = spec_decode.draft_decode_expand_plan(loc, 2, 2, 3, 1)
    assert plan.page_table.tolist() == [[50, 51], [53, 54], [56, 57], [59, 60]]
    assert plan.cache_seqlens.tolist() == [2, 2, 2, 2] and plan.page_size == 1


def test_ensure_bound_binds_once_per_source_and_follows_in_place_updates():
    """Every adapter binds through LayerRunner.ensure_bound: a source's tensors are used by reference (an in-place
    update, as weight loading does, is seen), another tensor object binds again; FP8 scales become descales."""
    gen = torch.Generator().manual_seed(5)
    page, lens = 4, [6, 3]
    kc = torch.randn(4, page, 1, 8, generator=gen)
    vc = torch.randn_like(kc)
    q = torch.randn(2, 2, 8, generator=gen)
    table, seq, cu = t(0, 1, 2, 3).reshape(2, 2), t(*lens), t(0, 1, 2)
    plan = plan_step(
        StepInputs(
            mode=Mode.DECODE,
            cu_seqlens_q=cu,
            seq_lens=seq,
            page_table=table,
            page_size=page,
            max_seqlen_q=1,
            max_seqlen_k=8,
            num_tokens=2,
        )
    )
    runner = LayerRunner(
        LayerSpec(2, 1, 8, 8**-0.5, dtype=torch.float32, kv_dtype=torch.float32, has_sinks=True), "cpu", page
    )

    def check(sinks):
        want, _ = naive_paged_attention(q, kc, vc, table, seq, cu, sinks=sinks)
        assert_close_to(runner.forward(plan, q, kc, vc), want, torch.float32)

    layer, sinks = object(), torch.tensor([0.5, -1.0])
    runner.ensure_bound(layer, sinks=sinks)
    check(sinks)
    sinks.copy_(torch.tensor([3.0, 2.0]))  # weight loading: in place, the same object
    runner.ensure_bound(layer, sinks=sinks)
    check(sinks)
    other = torch.tensor([-4.0, 1.0])
    runner.ensure_bound(layer, sinks=other)  # another tensor object: bound again
    check(other)
    with pytest.raises(ValueError, match="has_sinks"):
        runner.ensure_bound(object())  # a sinks layer bound without its sinks


# ---- the per-layer run picks the right sub-plan -------------------------------------


def _runner(**kw):
    spec = LayerSpec(2, 1, 8, 8**-0.5, dtype=torch.float32, kv_dtype=torch.float32, **kw)
    return LayerRunner(spec, "cpu", 2)


def test_runner_uses_swa_table_only_for_swa_layers():
    gen = torch.Generator().manual_seed(0)
    kc = torch.randn(6, 2, 1, 8, generator=gen)
    vc = torch.randn_like(kc)
    q = torch.randn(1, 2, 8, generator=gen)
    main = plan_step(StepInputs(Mode.DECODE, t(4), 4, 1, 2, page_table=t(0, 1).reshape(1, 2))).main
    plan = StepPlan(Mode.DECODE, main, 1, swa_page_table=t(4, 5).reshape(1, 2))
    full = _runner().forward(plan, q, kc, vc)
    swa = _runner(window_left=1, uses_swa_pool=True).forward(plan, q, kc, vc)
    want_full, _ = naive_paged_attention(q, kc, vc, main.page_table, t(4), t(0, 1))
    want_swa, _ = naive_paged_attention(q, kc, vc, t(4, 5).reshape(1, 2), t(4), t(0, 1), window=(1, 0))
    assert_close_to(full, want_full, torch.float32)
    assert_close_to(swa, want_swa, torch.float32)


def test_runner_cross_layer_uses_encoder_sub_plan_noncausal():
    gen = torch.Generator().manual_seed(1)
    kc = torch.randn(6, 2, 1, 8, generator=gen)
    vc = torch.randn_like(kc)
    q = torch.randn(3, 2, 8, generator=gen)
    plan = plan_step(
        StepInputs(
            Mode.PREFILL,
            t(3),
            3,
            3,
            2,
            query_lens=t(3),
            max_seqlen_q=3,
            page_table=t(0, 1).reshape(1, 2),
            encoder_lens=t(5),
            max_encoder_len=5,
            encoder_page_table=t(2, 3, 4).reshape(1, 3),
        )
    )
    out = _runner(kind=AttentionKind.CROSS).forward(plan, q, kc, vc)
    want, _ = naive_paged_attention(q, kc, vc, t(2, 3, 4).reshape(1, 3), t(5), t(0, 3), causal=False)
    assert_close_to(out, want, torch.float32)
    with pytest.raises(ValueError, match="encoder sub-plan"):
        _runner(kind=AttentionKind.CROSS).forward(StepPlan(Mode.PREFILL, plan.main, 3), q, kc, vc)


# ---- KV writes ---------------------------------------------------------------------


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_write_kv_fp8_quantises_saturates_and_skips_padding(fp8):
    kc = torch.zeros(2, 4, 1, 2, dtype=fp8)
    vc = torch.zeros_like(kc)
    k = torch.tensor([[[1.0, -2.0]], [[1e6, 3.0]], [[5.0, 5.0]]])
    core.write_kv(REF, k, k * 2, kc, vc, t(5, 0, -1, dtype=torch.int64), torch.tensor(2.0), 2.0)
    flat = kc.view(-1, 1, 2).float()
    assert flat[5, 0].tolist() == [0.5, -1.0]
    assert flat[0, 0, 0].item() == torch.finfo(fp8).max  # saturated, not inf
    assert flat[0, 0, 1].item() == 1.5
    assert int((flat != 0).sum()) == 4  # padding slot -1 wrote nothing
    assert vc.view(-1, 1, 2).float()[5, 0].tolist() == [1.0, -2.0]


def test_write_kv_page_slot_layout_and_shared_kv():
    kc = torch.zeros(3, 4, 1, 1)
    vc = torch.zeros_like(kc)
    core.write_kv(REF, torch.ones(2, 1, 1), torch.ones(2, 1, 1) * 2, kc, vc, t(9, 2, dtype=torch.int64))
    assert kc[2, 1, 0, 0] == 1 and kc[0, 2, 0, 0] == 1 and vc[2, 1, 0, 0] == 2  # slot = page*4 + offset
    before = kc.clone()
    core.write_kv(REF, None, None, kc, vc, t(0, dtype=torch.int64))  # cross-layer KV sharing: no write
    assert torch.equal(kc, before)
    with pytest.raises(ValueError, match="both"):
        core.write_kv(REF, torch.ones(1, 1, 1), None, kc, vc, t(0, dtype=torch.int64))


@settings(max_examples=40, deadline=None)
@given(
    lens=st.lists(st.integers(0, 70), min_size=1, max_size=6),
    page=st.sampled_from([1, 4, 16]),
    seed=st.integers(0, 2**16),
)
def test_flat_slots_to_page_table_vs_per_token(lens, page, seed):
    """transformers CB's read_index (each key's slot, sequence after sequence) -> page table: every key's page
    and offset recovered, checked token by token against the slots it came from."""
    g = torch.Generator().manual_seed(seed)
    pages_per_seq = [-(-n // page) for n in lens]
    perm = torch.randperm(sum(pages_per_seq) + 3, generator=g)  # distinct, shuffled pages
    slots, k = [], 0
    for n, p in zip(lens, pages_per_seq):
        own = perm[k : k + p]
        k += p
        slots += [int(own[j // page]) * page + j % page for j in range(n)]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32)
    table = paging.flat_slots_to_page_table(torch.tensor(slots, dtype=torch.int64), cu, page, max(lens))
    assert table.dtype == torch.int32 and table.shape == (len(lens), -(-max(lens) // page))
    for b, n in enumerate(lens):
        for j in range(n):
            assert int(table[b, j // page]) * page + j % page == slots[int(cu[b]) + j]


def test_plan_and_cache_page_sizes_must_agree():
    """A sub-plan at page 4 over a cache of 8-slot pages would address the wrong slots: refused, naming both;
    only a page-size-1 sub-plan (token-level rows) reads a paged cache, through a view of the same pool."""
    plan = plan_step(StepInputs(Mode.DECODE, t(3), 3, 1, 4, page_table=torch.tensor([[0]], dtype=torch.int32)))
    runner = LayerRunner(
        LayerSpec(num_q_heads=2, num_kv_heads=1, head_dim=8, scale=8**-0.5), "cpu", 4, override="reference"
    )
    kc = torch.zeros(2, 8, 1, 8)
    with pytest.raises(ValueError, match="main sub-plan has page size 4, the KV cache pages of 8"):
        runner.forward(plan, torch.zeros(1, 2, 8), kc, kc)
