"""transformers continuous batching (``generate_batch``) on this backend.

    import vllm_xpu_attn.transformers_cb as xa
    xa.register()                                   # once; checks the transformers version
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=xa.NAME)
    model.generate_batch(prompts, generation_config=...)

What it translates (never decides):

* start-up (``ContinuousBatchingManager.__init__``): one ``LayerRunner`` per attention module, from the module
  (heads, head dim, ``scaling``, ``sliding_window``, sinks) and the model config (softcap), with CB's page size:
  a layer no provider can serve is refused here, with every provider's reasons.
* per step: the first layer of a step turns CB's flat slot lists (``read_index``, or ``write_index`` for a
  step with no cached keys) and ``cu_seq_lens_k`` into a page table and calls ``core.plan_step`` once; the
  plan is kept on the cache for the step's other layers.
* per layer: the new K/V are written into CB's pages (``write_index`` = slot per new token) and the queries
  attend over the pages through that page table, prefill and decode alike.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from ..core import LayerRunner, LayerSpec, Mode, StepInputs, StepPlan, plan_step
from ..core.paging import flat_slots_to_page_table
from ..log import setup_logging
from . import compat

logger = logging.getLogger("vllm_xpu_attn")

NAME = "xpu_attn"
_RUNNER = "_xpu_attn_runner"  # attribute of each attention module: its LayerRunner
_STEP = "_xpu_attn_step"  # attribute of CB's cache: (step key, {allocator index: StepPlan})


def register() -> str:
    """Register ``xpu_attn`` as an attention implementation transformers' continuous batching accepts.

    Returns the installed transformers version; ValueError (naming the supported range) otherwise."""
    v = compat.check_version()
    setup_logging()
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, attention_forward)
    compat.install(NAME, configure)
    return v


def _attention_modules(model) -> list[torch.nn.Module]:
    mods = [
        m
        for m in model.modules()
        if hasattr(m, "layer_idx") and hasattr(m, "scaling") and hasattr(m, "config") and hasattr(m, "head_dim")
    ]
    if not mods:
        raise ValueError(
            f"vllm-xpu-attn: no attention modules (layer_idx, scaling, head_dim) found in {type(model).__name__}"
        )
    return mods


def layer_spec(module: torch.nn.Module, dtype: torch.dtype) -> LayerSpec:
    """One attention module -> LayerSpec. HF's ``sliding_window`` W: a query sees W keys, itself included."""
    cfg = module.config
    hq = int(cfg.num_attention_heads)
    hkv = int(getattr(cfg, "num_key_value_heads", None) or hq)
    window = getattr(module, "sliding_window", None)
    softcap = getattr(cfg, "attn_logit_softcapping", None) or 0.0
    if getattr(module, "is_causal", True) is False:
        raise ValueError(
            f"vllm-xpu-attn: layer {module.layer_idx} is bidirectional; continuous batching serves causal decoders"
        )
    return LayerSpec(
        num_q_heads=hq,
        num_kv_heads=hkv,
        head_dim=int(module.head_dim),
        scale=float(module.scaling),
        window_left=int(window) - 1 if window else -1,
        softcap=float(softcap),
        has_sinks=getattr(module, "sinks", None) is not None,
        dtype=dtype,
        kv_dtype=dtype,
    )


def configure(manager) -> None:
    """Start-up: a LayerRunner per attention module of ``manager.model`` (refusals raise here)."""
    model = manager.model
    why = compat.latent_cache_refusal(model.config)
    if why:
        raise ValueError(why)
    cb = manager.continuous_batching_config
    page = int(getattr(cb, "page_size", None) or cb.block_size)  # 5.17 sizes pages by block_size
    param = next(model.parameters())
    if getattr(cb, "use_cuda_graph", None) not in (None, False, (False, False)):
        logger.info(
            "vllm-xpu-attn: CB CUDA graphs requested; this adapter plans per step on the host side of "
            "the forward, so graphs are turned off"
        )
    cb.use_cuda_graph = (False, False)
    mods = _attention_modules(model)
    for mod in mods:
        spec = layer_spec(mod, param.dtype)
        runner = LayerRunner(spec, param.device, page)
        if spec.has_sinks:  # the module's parameter, bound once (GPT-OSS passes it as s_aux too)
            runner.ensure_bound(mod, sinks=mod.sinks)
        setattr(mod, _RUNNER, runner)
    logger.info(
        "vllm-xpu-attn: transformers %s continuous batching, %d layers, page %d, providers %s",
        compat.version(),
        len(mods),
        page,
        runner.providers_used(),
    )


def _step_plan(cache, kwargs: dict, group: int, layer_type: str, num_tokens: int) -> StepPlan:
    """The step's plan for allocator ``group``: built by the step's first layer, reused by the rest."""
    key = kwargs["write_index"]  # one list object per step, shared by every layer's kwargs
    held = getattr(cache, _STEP, None)
    if held is None or held[0] is not key:
        held = (key, {})
        setattr(cache, _STEP, held)
    plan = held[1].get(group)
    if plan is None:
        cu_q, cu_k, max_q, max_k = compat.step_lengths(kwargs, layer_type)
        reads = kwargs["read_index"][group]
        slots = reads if reads.numel() else kwargs["write_index"][group]  # no cached keys: keys = new tokens
        page = compat.page_size(cache)
        table = flat_slots_to_page_table(slots, cu_k, page, max_k)
        mode = Mode.DECODE if max_q == 1 else Mode.MIXED
        plan = plan_step(
            StepInputs(
                mode=mode,
                seq_lens=cu_k[1:] - cu_k[:-1],
                max_seqlen_k=max_k,
                num_tokens=num_tokens,
                page_size=page,
                cu_seqlens_q=cu_q,
                max_seqlen_q=max_q,
                page_table=table,
            )
        )
        held[1][group] = plan
    return plan


def attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    scaling: Optional[float] = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [1, Hq, T, D], key/value [1, Hkv, T, D] (this step's
    new tokens) -> ([1, T, Hq, D], None)."""
    cache = compat.cb_cache(kwargs)
    runner: Optional[LayerRunner] = getattr(module, _RUNNER, None)
    if cache is None or runner is None:
        raise ValueError(
            "vllm-xpu-attn: attn_implementation 'xpu_attn' serves transformers' continuous batching "
            "(generate_batch); use 'sdpa' or 'eager' for model.generate"
        )
    if query.shape[0] != 1:
        raise ValueError(f"vllm-xpu-attn: continuous batching packs the batch into one row; got batch {query.shape[0]}")
    k_pages, v_pages, group, layer_type = compat.layer_pages(cache, module.layer_idx)
    q = query[0].transpose(0, 1)  # [T, Hq, D]
    k, v = key[0].transpose(0, 1), value[0].transpose(0, 1)
    plan = _step_plan(cache, kwargs, group, layer_type, q.shape[0])
    runner.write_kv(k, v, k_pages, v_pages, kwargs["write_index"][group])
    out = runner.forward(plan, q.contiguous(), k_pages, v_pages)
    return out.unsqueeze(0), None
