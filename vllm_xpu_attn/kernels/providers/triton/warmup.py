"""Every kernel specialisation a layer can launch, compiled the first time the layer runs.

Which compiled kernel a paged call needs depends on the step, not only on the layer: the split-K count (and its
merge kernel) on batch x heads and context length, descriptor or pointer loads in prefill on the grid size. A
step shape met for the first time while serving (the first long-context decode at a small batch) would compile
its variant then, a latency spike of seconds. So the first call of a layer configuration (the engine's warm-up
or profiling run) launches one tiny dummy step per variant the configuration can reach (``layer_steps``: the
points of variants.layer_points, the same function the Intel lowering job's cases are checked against), on the
layer's own caches (read only) and tensors of the layer's dtypes and strides; later steps find every variant
compiled. Graph capture never warms (no launch may be added to a graph being captured).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Optional

import torch

from ...api import LayerConsts, LayerTensors, PagedStep
from . import launch_config
from .launch_config import LaunchConfig
from .tiles import device_family
from .tuning import MAX_SPLITS, SPLIT_FILL_DEFAULT, cdiv
from .tuning import reachable_splits as _reachable
from .variants import layer_points

if TYPE_CHECKING:
    from .provider import TritonProvider

logger = logging.getLogger("vllm_xpu_attn")


@functools.lru_cache(maxsize=None)
def reachable_splits(
    dev_type: str, index: Optional[int], units: int, fill: int = SPLIT_FILL_DEFAULT, cap: int = MAX_SPLITS
) -> tuple[int, ...]:
    """Every split count the policy can pick for ``units`` (KV heads, or MLA head tiles) per sequence on this
    device at fill factor ``fill`` and split cap ``cap`` (tuning.max_splits), over every batch and context length
    (tuning.reachable_splits; host math, cached)."""
    device = torch.device(dev_type, index) if index is not None else torch.device(dev_type)
    return _reachable(launch_config.device_units(device), units, fill, cap)


def layer_steps(
    call: LayerConsts, device: torch.device, page_size: int, kv_bytes: int = 2
) -> list[tuple[PagedStep, Optional[int], Optional[bool]]]:
    """(dummy step, forced split count, forced descriptors) per variant a layer configuration over a cache of
    ``kv_bytes``-wide elements can launch (variants.layer_points: decode at every split count reachable at that
    width's fill, prefill with descriptors as the device decides and, where the family has it, with pointer loads;
    batch-invariant mode has one variant). Each step: one sequence on page 0 of the caches."""
    points = layer_points(
        device_family(device),
        call,
        None,
        reachable=lambda units, fill, cap: reachable_splits(device.type, device.index, units, fill, cap),
        kv_bytes=kv_bytes,
    )
    steps = {q_len: _step(device, page_size, q_len) for q_len in {p.max_seqlen_q for p in points}}
    return [(steps[p.max_seqlen_q], p.num_splits, p.desc) for p in points]


def _step(device: torch.device, page_size: int, q_len: int) -> PagedStep:
    """One sequence of q_len new keys, every table entry page 0 (wide enough for q_len keys at any page size:
    a narrower table is bad input the kernels flag)."""
    i32 = dict(dtype=torch.int32, device=device)
    return PagedStep(
        cu_seqlens_q=torch.tensor([0, q_len], **i32),
        cache_seqlens=torch.tensor([q_len], **i32),
        page_table=torch.zeros(1, cdiv(q_len, page_size), **i32),
        max_seqlen_q=q_len,
        max_seqlen_k=q_len,
        page_size=page_size,
    )


def warm_up(
    provider: "TritonProvider",
    call: LayerConsts,
    page_size: int,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    layer: LayerTensors,
) -> int:
    """Launch every variant of ``layer_steps`` once: q [*, Hq, D] / out [*, Hq, Dv] give the dtypes and strides
    (dummies of 2 rows are made with them), the caches are the layer's own (page 0 read, nothing written).
    Returns how many variants ran (one that fails is logged, not raised: a step that reaches it raises then)."""
    from .descriptors import ensure_scratch_allocator
    from .step_launch import TritonLaunch

    qd = torch.empty_strided((2, *q.shape[1:]), q.stride(), dtype=q.dtype, device=q.device).zero_()
    od = torch.empty_strided((2, *out.shape[1:]), out.stride(), dtype=out.dtype, device=out.device)
    n = 0
    for step, splits, desc in layer_steps(call, q.device, page_size, launch_config.cache_width(k_cache.dtype)):
        try:
            cfg = LaunchConfig(
                step, call, splits, tensor_descriptors=provider.tensor_descriptors if desc is None else desc
            )
            if cfg.desc:
                ensure_scratch_allocator()
            rows = int(step.max_seqlen_q)
            TritonLaunch(provider, step, call, cfg, None)._execute(qd[:rows], k_cache, v_cache, od[:rows], layer)
            n += 1
        except Exception as e:  # noqa: BLE001 - a variant that cannot compile here fails again if a step reaches it
            logger.warning(
                "vllm-xpu-attn: warm-up could not launch the %s variant (split count %s) of a layer kind: "
                "%s: %s; a step that needs it will raise the same error",
                "decode" if step.max_seqlen_q == 1 else "prefill",
                splits,
                type(e).__name__,
                str(e).splitlines()[0][:200] if str(e) else "",
            )
    return n
