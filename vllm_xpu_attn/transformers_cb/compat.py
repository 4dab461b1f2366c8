"""What differs between transformers releases, in one place (continuous batching, ``generation/continuous_batching``).

Supported: transformers 5.24 (CI). Every patch below names the release line it follows; a release outside
``SUPPORTED`` is refused at registration, before anything is patched.

Three patches, all inert unless the model's attention implementation is this backend's:

* the CB gate: ``ContinuousBatchingManager.switch_to_cb_friendly_attn`` (continuous_api.py:745-789 in 5.24)
  accepts only ``paged|eager``, ``sdpa`` or a name containing "flash"; ours is kept as it is. The CB modules'
  ``is_flash_attention_requested`` (continuous_api.py, initialization.py:78,83, cache.py:580) answers True for
  ours, so CB builds no dense masks and compiles nothing for it, as for a flash kernel; it stays False for
  ``version=[2, 3]`` (initialization.py:148-151), so CB never takes its FlashAttention block-table path.
* the cache write: ``PagedAttentionCache.update`` (cache.py:393-429 in 5.24) writes K/V and gathers them back
  before the attention call; for our layers it returns the new K/V untouched, and the attention call writes
  them into the pages itself and attends through a page table.
* sliding-window layers: CB keeps them in a ring buffer (``SlidingAttentionCacheAllocator``, slot =
  position % window), which no page table can address once a chunk wraps around it. With this backend
  ``group_layers_by_attn_type`` (cache.py:44-67) puts every layer in full-attention pages and the kernel applies
  the window: the same answers, more cache memory for those layers.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
from typing import Callable

import torch

SUPPORTED = ((5, 24), (5, 24))  # inclusive (major, minor) range
CACHE_KWARG = "xpu_attn_cache"  # how update() hands CB's cache to the attention call


def version() -> str:
    return md.version("transformers")


def check_version() -> str:
    """The installed transformers version, or ValueError naming the supported range."""
    try:
        v = version()
    except md.PackageNotFoundError:
        raise ValueError("vllm-xpu-attn's transformers adapter needs transformers (pip install 'transformers==5.24.*')")
    parts = v.split(".")
    try:
        mm = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        raise ValueError(f"vllm-xpu-attn: cannot parse the transformers version {v!r}")
    lo, hi = SUPPORTED
    if not (lo <= mm <= hi):
        raise ValueError(f"vllm-xpu-attn supports transformers {lo[0]}.{lo[1]} through {hi[0]}.{hi[1]} for continuous "
                         f"batching; {v} is installed (its continuous-batching internals differ)")
    return v


def layer_pages(cache, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor, int, str]:
    """The layer's K and V pages [pages, page_size, Hkv, D] (views of CB's cache), its allocator's index into
    ``read_index`` / ``write_index`` and its layer type (the key of ``cu_seq_lens_k`` / ``max_length_k``)."""
    alloc = cache.layer_to_allocator[layer_idx]
    k_pages, v_pages = alloc.get_cache_for_block_table(layer_idx)
    return k_pages, v_pages, alloc.index, alloc.layer_type


def page_size(cache) -> int:
    sizes = {a.tokens_per_page for a in cache.cache_allocators.values()}
    if len(sizes) != 1:
        raise ValueError(f"vllm-xpu-attn: CB cache groups with different page sizes {sorted(sizes)}")
    return sizes.pop()


_INSTALLED: set[str] = set()


def install(name: str, on_manager_init: Callable) -> None:
    """Patch CB's gate, cache write and sliding-window grouping for implementation ``name`` (idempotent)."""
    if name in _INSTALLED:
        return
    from transformers.generation.continuous_batching import cache as cb_cache
    from transformers.generation.continuous_batching import continuous_api, initialization
    from transformers.utils import generic

    ours = lambda config: getattr(config, "_attn_implementation", None) == name  # noqa: E731

    # 1. the gate and the "is it flash" questions CB asks
    original_is_flash = generic.is_flash_attention_requested

    @functools.wraps(original_is_flash)
    def is_flash(config=None, requested_attention_implementation=None, version=None):
        impl = requested_attention_implementation if config is None else getattr(config, "_attn_implementation", None)
        if impl == name:
            return version is None
        return original_is_flash(config=config, requested_attention_implementation=requested_attention_implementation,
                                 version=version)

    for mod in (continuous_api, initialization, cb_cache):
        if getattr(mod, "is_flash_attention_requested", None) is original_is_flash:
            mod.is_flash_attention_requested = is_flash

    manager = continuous_api.ContinuousBatchingManager
    original_switch = manager.switch_to_cb_friendly_attn

    @functools.wraps(original_switch)
    def switch(self, model, *args, **kwargs):
        if ours(model.config):
            return None  # served as it is
        return original_switch(self, model, *args, **kwargs)

    manager.switch_to_cb_friendly_attn = switch

    original_init = manager.__init__

    @functools.wraps(original_init)
    def init(self, model, *args, **kwargs):
        original_init(self, model, *args, **kwargs)
        if ours(model.config):
            on_manager_init(self)  # start-up: layers configured, refusals raised here

    manager.__init__ = init

    # 2. the cache write
    paged_cache = cb_cache.PagedAttentionCache
    original_update = paged_cache.update

    @functools.wraps(original_update)
    def update(self, key_states, value_states, layer_idx, kwargs):
        if ours(self.config):
            kwargs[CACHE_KWARG] = self  # the model passes the cache to update() only, not to the attention call
            return key_states, value_states  # written into the pages by the attention call
        return original_update(self, key_states, value_states, layer_idx, kwargs)

    paged_cache.update = update

    # 3. sliding-window layers in full-attention pages
    original_group = cb_cache.group_layers_by_attn_type

    @functools.wraps(original_group)
    def group(config):
        groups = original_group(config)
        if ours(config) and cb_cache.SLIDING_ATTENTION in groups:
            layers = sorted(i for idx in groups.values() for i in idx)
            others = set(groups) - {cb_cache.FULL_ATTENTION, cb_cache.SLIDING_ATTENTION}
            if others:
                raise ValueError(f"vllm-xpu-attn: CB layer types {sorted(others)} are not served")
            return {cb_cache.FULL_ATTENTION: layers}
        return groups

    cb_cache.group_layers_by_attn_type = group
    initialization.group_layers_by_attn_type = group
    _INSTALLED.add(name)
