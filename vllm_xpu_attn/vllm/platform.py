"""Platforms that are the host's built-in vLLM platform with attention routed to this backend.

Each class is created only when its module attribute is first accessed, so that importing
this module on a CPU machine never imports vLLM's CUDA or XPU platform.
"""

from __future__ import annotations

import logging

logger = logging.getLogger("vllm_xpu_attn")

_BASES = {
    "XpuAttnCpuPlatform": ("vllm.platforms.cpu", "CpuPlatform"),
    "XpuAttnCudaPlatform": ("vllm.platforms.cuda", "CudaPlatform"),
    "XpuAttnXPUPlatform": ("vllm.platforms.xpu", "XPUPlatform"),
}
_made: dict[str, type] = {}


def _route(base: type, name: str) -> type:
    from .plugin import BACKEND_PATH, CPU_BACKEND_PATH

    on_cpu = base.__name__ == "CpuPlatform"

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        cfg = attn_selector_config
        if cfg.use_sparse:
            raise NotImplementedError(
                f"vllm-xpu-attn cannot serve sparse attention ({cfg!r}: DeepSeek-V3.2-style sparse MLA with an "
                "indexer); run this model without the plugin (XPU_ATTN_ENABLE=0) to use vLLM's own backends"
            )
        if cfg.use_mla:
            from . import interface
            from .mla import BACKEND_PATH as MLA_PATH
            from .mla import XpuAttnMLABackend as Backend
            from .plugin import _version

            why = interface.mla_reason(_version())  # MLA's vLLM bases are importable only now
            if why:
                raise ValueError(why)

            path = MLA_PATH
        else:
            from .backend import XpuAttnBackend, XpuAttnCpuBackend

            Backend, path = (XpuAttnCpuBackend, CPU_BACKEND_PATH) if on_cpu else (XpuAttnBackend, BACKEND_PATH)
        reasons = Backend.validate_configuration(
            head_size=cfg.head_size,
            dtype=cfg.dtype,
            kv_cache_dtype=cfg.kv_cache_dtype,
            block_size=cfg.block_size,
            use_mla=cfg.use_mla,
            has_sink=cfg.has_sink,
            use_sparse=cfg.use_sparse,
            use_mm_prefix=cfg.use_mm_prefix,
            use_per_head_quant_scales=cfg.use_per_head_quant_scales,
            device_capability=None,
            attn_type=cfg.attn_type,
            has_sliding_window=cfg.has_sliding_window,
            use_non_causal=cfg.use_non_causal,
            use_batch_invariant=cfg.use_batch_invariant,
            use_kv_connector=cfg.use_kv_connector,
            use_pcp=cfg.use_pcp,
            use_adaptive_verification=cfg.use_adaptive_verification,
            use_dcp=cfg.use_dcp,
            use_rswa=cfg.use_rswa,
        )
        if reasons:
            raise ValueError(
                f"vllm-xpu-attn cannot serve this model's {'MLA ' if cfg.use_mla else ''}attention "
                f"({cfg!r}): {'; '.join(reasons)}"
            )
        logger.info("vllm-xpu-attn: %s routes %sattention to %s", name, "MLA " if cfg.use_mla else "", path)
        return path

    attrs = {
        "get_attn_backend_cls": classmethod(get_attn_backend_cls),
        "__module__": __name__,
        "__doc__": f"{base.__name__} with vllm-xpu-attn attention.",
    }
    if on_cpu:
        attrs["check_and_update_config"] = classmethod(_cpu_check_and_update_config(base))
    return type(name, (base,), attrs)


def _cpu_check_and_update_config(base: type):
    """CpuPlatform's checks, plus: an MLA model keeps the CPU reference-MLA constraints even on an AMX host.

    CpuPlatform relaxes them (no forced block size 16, chunked prefill and prefix caching left on) only when
    it will pick AMX_MLA; this platform routes MLA layers to vllm-xpu-attn instead, so it applies what
    CpuPlatform applies for its other MLA backend: block size 16, no chunked prefill, no prefix caching.
    """

    def check_and_update_config(cls, vllm_config) -> None:
        base.check_and_update_config.__func__(cls, vllm_config)
        model = vllm_config.model_config
        if model is None or not getattr(model, "use_mla", False):
            return
        sched, cache = vllm_config.scheduler_config, vllm_config.cache_config
        if cache.block_size != 16 or sched.enable_chunked_prefill or cache.enable_prefix_caching:
            logger.info(
                "vllm-xpu-attn: MLA on the CPU: block size 16, chunked prefill and prefix caching off "
                "(as vLLM's CPU MLA path)"
            )
            cache.block_size = 16
            sched.enable_chunked_prefill = False
            cache.enable_prefix_caching = False
            sched.max_num_batched_tokens = max(model.max_model_len, sched.DEFAULT_MAX_NUM_BATCHED_TOKENS)

    return check_and_update_config


def __getattr__(name: str):
    if name not in _BASES:
        raise AttributeError(name)
    if name not in _made:
        import importlib

        module, cls = _BASES[name]
        _made[name] = _route(getattr(importlib.import_module(module), cls), name)
    return _made[name]
