"""Engine-neutral core: types, per-step planning, paging logic, KV writes, per-layer run.

Imports torch (and our kernels package) only; never vllm or sglang.
"""

from .cross import decoder_token_table, encoder_plan, shift_token_table
from .kv_write import check_kv_cache, write_kv
from .local_attn import local_attention_plan, local_attention_plans, virtual_rows_per_seq
from .paging import (
    build_plan,
    cdiv,
    cu_seqlens,
    decode_plan,
    flat_slots_to_page_table,
    slot_mapping_from_page_table,
    swa_translate,
    token_table_to_page_table,
)
from .run import LayerRunner, kernel_request
from .step import SpecDecodeShape, StepInputs, check_step_config, plan_step
from .spec_decode import draft_decode_expand_plan, verify_expand_plan, verify_main_plan_topk, verify_plan_topk1
from .types import AttentionKind, AttnPlan, LayerSpec, MLADims, Mode, StepPlan

__all__ = [
    "AttentionKind", "AttnPlan", "LayerRunner", "LayerSpec", "MLADims", "Mode", "SpecDecodeShape", "StepInputs", "StepPlan",
    "check_step_config", "plan_step", "build_plan", "cdiv",
    "check_kv_cache", "cu_seqlens", "decode_plan", "decoder_token_table", "draft_decode_expand_plan",
    "encoder_plan", "flat_slots_to_page_table", "shift_token_table", "kernel_request", "local_attention_plan", "local_attention_plans", "slot_mapping_from_page_table",
    "swa_translate", "token_table_to_page_table", "verify_expand_plan", "verify_main_plan_topk",
    "verify_plan_topk1", "virtual_rows_per_seq", "write_kv",
]
