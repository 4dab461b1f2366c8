"""Everything that depends on the SGLang release lives here (written against sglang 0.5.23)."""

from __future__ import annotations

from sglang.srt.layers.attention.base_attn_backend import AttentionBackend  # noqa: F401
from sglang.srt.layers.radix_attention import AttentionType  # noqa: F401
from sglang.srt.mem_cache.memory_pool import KVWriteLoc  # noqa: F401
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: F401

try:
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
except ImportError:  # older layouts kept it in memory_pool
    from sglang.srt.mem_cache.memory_pool import SWAKVPool  # type: ignore  # noqa: F401

SUPPORTED_SGLANG = "0.5.23"


def registry():
    """(register_attention_backend, ATTENTION_BACKENDS, add_choices, CHOICES)."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS, register_attention_backend
    from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices

    return register_attention_backend, ATTENTION_BACKENDS, add_attention_backend_choices, ATTENTION_BACKEND_CHOICES


def uses_sliding_window_pool(pool) -> bool:
    return isinstance(pool, SWAKVPool) and getattr(pool, "swa_layer_nums", 0) > 0


def layer_in_swa_pool(pool, layer_id: int) -> bool:
    """Whether a layer's KV lives in a hybrid pool's sliding-window sub-pool (and so is addressed
    through the full->SWA slot translation)."""
    if not uses_sliding_window_pool(pool):
        return False
    return bool(pool.layers_mapping[layer_id][1])
