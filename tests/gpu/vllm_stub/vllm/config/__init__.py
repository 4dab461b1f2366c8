"""Stand-in for vllm.config: plain dataclasses carrying the fields that the adapter and vLLM's
base AttentionMetadataBuilder read, plus the current-config context of vllm/config/vllm.py."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Optional

import torch

from .compilation import CompilationConfig, CUDAGraphMode  # noqa: F401


@dataclasses.dataclass
class ModelConfig:
    dtype: torch.dtype = torch.bfloat16
    max_model_len: int = 4096
    num_attention_heads: int = 32
    num_kv_heads: int = 8
    head_size: int = 128
    rswa_window: Optional[int] = None
    is_mm_prefix_lm: bool = False
    hf_config: Any = None

    def get_num_attention_heads(self, parallel_config=None) -> int:
        return self.num_attention_heads

    def get_num_kv_heads(self, parallel_config=None) -> int:
        return self.num_kv_heads

    def get_head_size(self) -> int:
        return self.head_size

    def get_sliding_window(self) -> Optional[int]:
        return None


@dataclasses.dataclass
class CacheConfig:
    block_size: int = 16
    cache_dtype: str = "auto"


@dataclasses.dataclass
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_num_encoder_input_tokens: int = 0


@dataclasses.dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    cp_kv_cache_interleave_size: int = 1


@dataclasses.dataclass
class SpeculativeConfig:
    num_speculative_tokens: Optional[int] = None
    parallel_drafting: bool = False
    method: str = "eagle"


@dataclasses.dataclass
class AttentionConfig:
    flash_attn_max_num_splits_for_cuda_graph: int = 32
    use_non_causal: bool = False


@dataclasses.dataclass
class VllmConfig:
    model_config: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    cache_config: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    scheduler_config: SchedulerConfig = dataclasses.field(default_factory=SchedulerConfig)
    parallel_config: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    compilation_config: CompilationConfig = dataclasses.field(default_factory=CompilationConfig)
    attention_config: AttentionConfig = dataclasses.field(default_factory=AttentionConfig)
    speculative_config: Optional[SpeculativeConfig] = None
    use_v2_model_runner: bool = True  # 0.32's default runner

    @property
    def num_speculative_tokens(self) -> int:
        sc = self.speculative_config
        return (sc.num_speculative_tokens or 0) if sc is not None else 0


_current_vllm_config: Optional[VllmConfig] = None


@contextlib.contextmanager
def set_current_vllm_config(vllm_config: VllmConfig, check_compile: bool = False, prefix: Optional[str] = None):
    global _current_vllm_config
    old = _current_vllm_config
    _current_vllm_config = vllm_config
    try:
        yield
    finally:
        _current_vllm_config = old


def get_current_vllm_config() -> VllmConfig:
    if _current_vllm_config is None:
        raise AssertionError("Current vLLM config is not set (vllm stub): use set_current_vllm_config()")
    return _current_vllm_config


def get_current_vllm_config_or_none() -> Optional[VllmConfig]:
    return _current_vllm_config
