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
    from .plugin import BACKEND_PATH

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        cfg = attn_selector_config
        if cfg.use_mla or cfg.use_sparse:
            feature = "MLA" if cfg.use_mla else "sparse attention"
            logger.warning("vllm-xpu-attn: %s is not supported yet; routing this layer to %s's own backend",
                           feature, base.__name__)
            return base.get_attn_backend_cls.__func__(cls, selected_backend, attn_selector_config, num_heads)
        from .backend import XpuAttnBackend

        reasons = XpuAttnBackend.validate_configuration(
            head_size=cfg.head_size, dtype=cfg.dtype, kv_cache_dtype=cfg.kv_cache_dtype, block_size=cfg.block_size,
            use_mla=cfg.use_mla, has_sink=cfg.has_sink, use_sparse=cfg.use_sparse, use_mm_prefix=cfg.use_mm_prefix,
            use_per_head_quant_scales=cfg.use_per_head_quant_scales, device_capability=None,
            attn_type=cfg.attn_type, has_sliding_window=cfg.has_sliding_window, use_non_causal=cfg.use_non_causal,
            use_batch_invariant=cfg.use_batch_invariant, use_kv_connector=cfg.use_kv_connector, use_pcp=cfg.use_pcp,
            use_adaptive_verification=cfg.use_adaptive_verification, use_dcp=cfg.use_dcp, use_rswa=cfg.use_rswa,
        )
        if reasons:
            raise ValueError(f"vllm-xpu-attn cannot serve this model's attention ({cfg!r}): {'; '.join(reasons)}")
        logger.info("vllm-xpu-attn: %s routes attention to %s", name, BACKEND_PATH)
        return BACKEND_PATH

    return type(name, (base,), {"get_attn_backend_cls": classmethod(get_attn_backend_cls),
                                "__module__": __name__, "__doc__": f"{base.__name__} with vllm-xpu-attn attention."})


def __getattr__(name: str):
    if name not in _BASES:
        raise AttributeError(name)
    if name not in _made:
        import importlib

        module, cls = _BASES[name]
        _made[name] = _route(getattr(importlib.import_module(module), cls), name)
    return _made[name]
