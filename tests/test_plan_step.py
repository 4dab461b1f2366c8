"""core.plan_step: the one step planner both adapters call. Plans vs hand-computed layouts and
vs the reference run of the same batch; refusals at configuration time."""

import pytest
import torch

from vllm_xpu_attn import core
from vllm_xpu_attn.core import Mode, SpecDecodeShape, StepInputs, plan_step

I32 = torch.int32


def t(*v, dtype=I32):
    return torch.tensor(v, dtype=dtype)


def token_table(page_tables, page):
    """Slots of each token from a page table (the layout SGLang's req_to_token holds)."""
    rows = []
    for pages in page_tables:
        rows.append([p * page + o for p in pages for o in range(page)])
    return torch.tensor(rows, dtype=I32)


@pytest.mark.parametrize("mode", [Mode.DECODE, Mode.EXTEND])
def test_page_table_and_token_table_inputs_plan_the_same_step(mode):
    """vLLM gives a page table, SGLang a token table: the same batch must give the same plan."""
    pages = [[3, 1, 4], [0, 2, 5]]
    seq = t(9, 12)
    kw = dict(mode=mode, seq_lens=seq, max_seqlen_k=12, num_tokens=2 if mode is Mode.DECODE else 7, page_size=4)
    if mode is Mode.EXTEND:
        kw.update(query_lens=t(3, 4), max_seqlen_q=4)
    a = plan_step(StepInputs(**kw, page_table=torch.tensor(pages, dtype=I32)))
    b = plan_step(StepInputs(**kw, token_table=token_table(pages, 4)))
    for name in ("cu_seqlens_q", "cache_seqlens", "page_table"):
        assert torch.equal(getattr(a.main, name), getattr(b.main, name)), name
    assert a.mode is b.mode is mode and a.num_tokens == b.num_tokens
    want_cu = [0, 1, 2] if mode is Mode.DECODE else [0, 3, 7]
    assert a.main.cu_seqlens_q.tolist() == want_cu and a.main.page_table.tolist() == pages


def _plans_equal(a, b):
    for part in ("main", "local", "encoder", "spec_expand"):
        pa, pb = getattr(a, part), getattr(b, part)
        assert (pa is None) == (pb is None), part
        if pa is not None:
            for name in ("cu_seqlens_q", "cache_seqlens", "page_table"):
                assert torch.equal(getattr(pa, name), getattr(pb, name)), (part, name)
    for name in ("swa_page_table", "local_swa_page_table"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None) and (x is None or torch.equal(x, y)), name
    assert a.mode is b.mode and a.num_tokens == b.num_tokens


@pytest.mark.parametrize("case", ["decode", "extend", "verify", "local_swa", "encoder", "tree"])
def test_token_rows_index_the_pool_like_a_gathered_table(case):
    """SGLang passes its whole req_to_token pool + req_pool_indices (token_rows): the plan equals the
    one from the pre-gathered [B, max_context] rows in every mode, including those that read token-level
    rows (SWA translation, encoder tables, top-k > 1 trees)."""
    pool = token_table([[9, 9, 9, 9], [3, 1, 4, 6], [7, 7, 7, 7], [0, 2, 5, 8]], 4)
    idx = torch.tensor([3, 1])  # int64, as SGLang's req_pool_indices
    kw = dict(mode=Mode.DECODE, seq_lens=t(9, 12), max_seqlen_k=12, num_tokens=2, page_size=4)
    if case == "extend":
        kw.update(mode=Mode.EXTEND, query_lens=t(3, 4), max_seqlen_q=4, num_tokens=7)
    elif case == "verify":
        kw.update(mode=Mode.TARGET_VERIFY, seq_lens=t(5, 7), max_seqlen_k=7, spec=SpecDecodeShape(num_draft=3))
    elif case == "local_swa":
        kw.update(attention_chunk_size=8, swa_mapping=torch.arange(64) + 100)
    elif case == "encoder":
        kw.update(seq_lens=t(3, 4), max_seqlen_k=4, encoder_lens=t(4, 8), max_encoder_len=8)
    elif case == "tree":
        kw.update(
            mode=Mode.DRAFT_DECODE,
            seq_lens=t(5, 7),
            max_seqlen_k=7,
            draft_slots=torch.arange(12),
            spec=SpecDecodeShape(topk=2, num_steps=3, step_id=1),
        )
    before = pool.clone()
    a = plan_step(StepInputs(**kw, token_table=pool[idx]))
    b = plan_step(StepInputs(**kw, token_table=pool, token_rows=idx))
    _plans_equal(a, b)
    assert torch.equal(pool, before), "planning wrote into the engine's token table"
    with pytest.raises(ValueError, match="token_rows must be"):
        plan_step(StepInputs(**kw, token_table=pool, token_rows=idx[:1]))


def test_speculative_modes_hand_computed():
    pages = token_table([[1, 2, 3], [4, 5, 6]], 4)
    seq = t(5, 7)  # committed tokens, drafts not counted
    verify = plan_step(
        StepInputs(Mode.TARGET_VERIFY, seq, 7, 0, 4, token_table=pages, spec=SpecDecodeShape(topk=1, num_draft=3))
    )
    assert verify.num_tokens == 6 and verify.main.cu_seqlens_q.tolist() == [0, 3, 6]
    assert verify.main.cache_seqlens.tolist() == [8, 10]  # drafts follow the prefix, causally
    draft = plan_step(
        StepInputs(
            Mode.DRAFT_DECODE, seq, 7, 2, 4, token_table=pages, spec=SpecDecodeShape(topk=1, num_steps=3, step_id=1)
        )
    )
    assert draft.main.cache_seqlens.tolist() == [7, 9] and draft.num_tokens == 2  # step 1: two drafts written
    loc = torch.arange(2 * 2 * 3)
    tree = plan_step(
        StepInputs(
            Mode.DRAFT_DECODE,
            seq,
            7,
            2,
            4,
            token_table=pages,
            draft_slots=loc,
            spec=SpecDecodeShape(topk=2, num_steps=3, step_id=1),
        )
    )
    assert tree.num_tokens == 4 and tree.spec_expand is not None and tree.spec_expand.page_table.shape == (4, 2)


def test_local_and_swa_sub_plans_come_with_every_causal_mode():
    pages = token_table([[0, 1, 2, 3]], 4)
    swa = torch.arange(16) + 100
    for mode, extra in (
        (Mode.DECODE, {}),
        (Mode.EXTEND, dict(query_lens=t(5), max_seqlen_q=5)),
        (Mode.TARGET_VERIFY, dict(spec=SpecDecodeShape(num_draft=2))),
    ):
        plan = plan_step(
            StepInputs(mode, t(10), 10, 5, 4, token_table=pages, attention_chunk_size=8, swa_mapping=swa, **extra)
        )
        assert plan.local is not None and plan.swa_page_table is not None and plan.local_swa_page_table is not None
        assert plan.swa_page_table[0, 0].item() == 25  # slot 100 -> page 25


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="page_table or a token_table"):
        plan_step(StepInputs(Mode.DECODE, t(3), 3, 1, 4))
    with pytest.raises(ValueError, match="query_lens or cu_seqlens_q"):
        plan_step(StepInputs(Mode.EXTEND, t(3), 3, 1, 4, page_table=t(0).reshape(1, 1)))
    with pytest.raises(ValueError, match="page table too short"):
        plan_step(StepInputs(Mode.DECODE, t(9), 9, 1, 4, page_table=t(0, 1).reshape(1, 2)))
    with pytest.raises(ValueError, match="custom_mask"):
        plan_step(
            StepInputs(
                Mode.TARGET_VERIFY,
                t(3),
                3,
                2,
                4,
                token_table=token_table([[0, 1]], 4),
                spec=SpecDecodeShape(topk=2, num_draft=2),
            )
        )
    # at start-up, not at the first step
    with pytest.raises(ValueError, match="multiple of the page size"):
        core.check_step_config(16, attention_chunk_size=24)
    spec = core.LayerSpec(2, 1, 8, 1.0, window_left=4, dtype=torch.float32, kv_dtype=torch.float32)
    with pytest.raises(ValueError, match="top-k > 1"):
        core.LayerRunner(spec, "cpu", 4, with_spec_decode=True)


def test_plan_runs_to_the_naive_answer():
    """The planned decode step, run through the reference, equals naive attention per sequence."""
    from naive import naive_paged_attention

    torch.manual_seed(0)
    kc, vc = torch.randn(8, 4, 1, 8), torch.randn(8, 4, 1, 8)
    pages = torch.tensor([[3, 1, 4], [0, 2, 5]], dtype=I32)
    plan = plan_step(StepInputs(Mode.DECODE, t(9, 12), 12, 2, 4, page_table=pages))
    spec = core.LayerSpec(2, 1, 8, 8**-0.5, dtype=torch.float32, kv_dtype=torch.float32)
    q = torch.randn(2, 2, 8)
    got = core.LayerRunner(spec, "cpu", 4).forward(plan, q, kc, vc)
    want, _ = naive_paged_attention(q, kc, vc, pages, t(9, 12), t(0, 1, 2), causal=True, scale=8**-0.5)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
