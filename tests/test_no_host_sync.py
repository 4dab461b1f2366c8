"""Decode-path planning never reads device values on the host.

Structural proof: every planner runs on the ``meta`` device, whose tensors have no values.
Any .item()/.tolist()/.cpu()/bool() of a planned tensor raises there, so a planner that
synchronised would fail this test. (tests/gpu/ repeats it on CUDA with
torch.cuda.set_sync_debug_mode("error").)
"""

import pytest
import torch

from vllm_xpu_attn import core

M = torch.device("meta")


def meta(*shape, dtype=torch.int32):
    return torch.empty(*shape, dtype=dtype, device=M)


def test_meta_device_really_refuses_value_reads():
    x = meta(4)
    for read in (lambda: x.tolist(), lambda: x.item() if x.numel() == 1 else x[0].item(), lambda: bool(x[0])):
        with pytest.raises(Exception):
            read()


def test_decode_planning_is_sync_free():
    seq_lens, token_table = meta(8), meta(8, 4096, dtype=torch.int64)
    pt = core.token_table_to_page_table(token_table, 64, 4096)
    plan = core.decode_plan(seq_lens, pt, 64, 4096)
    assert plan.page_table.shape == (8, 64) and plan.cu_seqlens_q.shape == (9,)
    local = core.local_attention_plan(256, torch.ones(8, dtype=torch.int32, device=M), seq_lens, pt, 64, 1)
    assert local.page_table.shape == (8, 4)
    swa = core.swa_translate(token_table, meta(100000, dtype=torch.int64))
    assert swa.shape == token_table.shape
    slots = core.slot_mapping_from_page_table(pt, meta(8, dtype=torch.int64), meta(8), 64)
    assert slots.shape == (8,)


def test_spec_decode_planning_is_sync_free():
    seq_lens, table = meta(4), meta(4, 512, dtype=torch.int64)
    exp = core.verify_expand_plan(seq_lens, table, 3, meta(4 * 3 * 600, dtype=torch.bool))
    assert exp.page_table.shape == (12, 3)
    main = core.verify_main_plan_topk(seq_lens, core.token_table_to_page_table(table, 16, 512), 16, 3, 512)
    assert main.cu_seqlens_q.shape == (5,)
    dd = core.draft_decode_expand_plan(meta(4 * 2 * 3, dtype=torch.int64), 4, 2, 3, 1)
    assert dd.page_table.shape == (8, 2)


def test_extend_and_cross_planning_is_sync_free():
    plan = core.build_plan(meta(3), meta(3), meta(3, 8), 16, 64, 128)
    assert plan.cu_seqlens_q.shape == (4,)
    enc = core.encoder_plan(meta(3), meta(3, 256, dtype=torch.int64), 16, 200, meta(3), 4)
    assert enc.page_table.shape == (3, 13)
