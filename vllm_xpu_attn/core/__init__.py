"""Engine-neutral core: types, per-step planning, paging logic, KV writes, per-layer run.

Imports torch (and our kernels package) only; never vllm or sglang. The names below are the core's
public face: an adapter translates its engine's step into ``StepInputs``, plans it once with
``plan_step`` and runs each layer's ``LayerRunner`` on the ``StepPlan``. The submodules hold the
rest (``graphs``: the graph-capture policy; ``paging``: page-table helpers; ``run``: kernel requests).
"""

from .kv_write import write_kv
from .paging import token_table_to_page_table
from .run import LayerRunner, served
from .step import check_step_config, plan_step
from .types import AttentionKind, LayerSpec, MLADims, Mode, SpecDecodeShape, StepInputs, StepPlan

__all__ = [
    "AttentionKind",
    "LayerRunner",
    "LayerSpec",
    "MLADims",
    "Mode",
    "SpecDecodeShape",
    "StepInputs",
    "StepPlan",
    "check_step_config",
    "plan_step",
    "served",
    "token_table_to_page_table",
    "write_kv",
]
