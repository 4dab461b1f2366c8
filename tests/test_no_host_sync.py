"""Step planning never reads device values on the host.

Structural proof: ``plan_step`` runs on the ``meta`` device, whose tensors have no values.
Any .item()/.tolist()/.cpu()/bool() of a planned tensor raises there, so a plan that
synchronised would fail this test. (tests/gpu/ repeats it on CUDA with
torch.cuda.set_sync_debug_mode("error").)
"""

import pytest
import torch

from vllm_xpu_attn.core import Mode, SpecDecodeShape, StepInputs, plan_step

M = torch.device("meta")


def meta(*shape, dtype=torch.int32):
    return torch.empty(*shape, dtype=dtype, device=M)


def test_meta_device_really_refuses_value_reads():
    x = meta(4)
    for read in (lambda: x.tolist(), lambda: x.item() if x.numel() == 1 else x[0].item(), lambda: bool(x[0])):
        with pytest.raises(Exception):
            read()


def test_decode_step_planning_is_sync_free():
    seq_lens, token_table = meta(8), meta(8, 4096, dtype=torch.int64)
    plan = plan_step(
        StepInputs(
            Mode.DECODE,
            seq_lens,
            4096,
            8,
            64,
            token_table=token_table,
            attention_chunk_size=256,
            swa_mapping=meta(100000, dtype=torch.int64),
        )
    )
    assert plan.main.page_table.shape == (8, 64) and plan.main.cu_seqlens_q.shape == (9,)
    assert plan.local.page_table.shape == (8, 4) and plan.local.cu_seqlens_q.shape == (9,)
    assert plan.swa_page_table.shape == (8, 64) and plan.local_swa_page_table.shape == (8, 4)
    vllm_style = plan_step(StepInputs(Mode.DECODE, seq_lens, 4096, 8, 64, page_table=plan.main.page_table))
    assert vllm_style.main.page_table.shape == (8, 64)


def test_speculative_step_planning_is_sync_free():
    seq_lens, table = meta(4), meta(4, 512, dtype=torch.int64)
    verify = plan_step(
        StepInputs(
            Mode.TARGET_VERIFY,
            seq_lens,
            500,
            12,
            16,
            token_table=table,
            custom_mask=meta(4 * 3 * 600, dtype=torch.bool),
            spec=SpecDecodeShape(topk=2, num_draft=3),
        )
    )
    assert verify.spec_expand.page_table.shape == (12, 3) and verify.main.cu_seqlens_q.shape == (5,)
    chain = plan_step(
        StepInputs(Mode.TARGET_VERIFY, seq_lens, 500, 12, 16, token_table=table, spec=SpecDecodeShape(num_draft=3))
    )
    assert chain.main.cu_seqlens_q.shape == (5,)
    draft = plan_step(
        StepInputs(
            Mode.DRAFT_DECODE,
            seq_lens,
            500,
            8,
            16,
            token_table=table,
            draft_slots=meta(4 * 2 * 3, dtype=torch.int64),
            spec=SpecDecodeShape(topk=2, num_steps=3, step_id=1),
        )
    )
    assert draft.spec_expand.page_table.shape == (8, 2)


def test_extend_and_cross_planning_is_sync_free():
    plan = plan_step(
        StepInputs(Mode.EXTEND, meta(3), 128, 64, 16, query_lens=meta(3), max_seqlen_q=64, page_table=meta(3, 8))
    )
    assert plan.main.cu_seqlens_q.shape == (4,)
    # token-table rows with the encoder's tokens first (page 16): the encoder in pages, the decoder token by token
    cross = plan_step(
        StepInputs(
            Mode.EXTEND,
            meta(3),
            50,
            12,
            16,
            query_lens=meta(3),
            max_seqlen_q=4,
            token_table=meta(3, 256, dtype=torch.int64),
            encoder_lens=meta(3),
            max_encoder_len=200,
        )
    )
    assert cross.encoder.page_table.shape == (3, 13) and cross.main.page_table.shape == (3, 50)
