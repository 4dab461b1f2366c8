"""What differs between transformers releases, in one place (continuous batching, ``generation/continuous_batching``).

Supported: transformers 5.17 through 5.25 (``SUPPORTED``; each release's CB tests pass on the CPU, CI runs
5.25 in full and 5.17 as a smoke run, the H200 ran 5.17 and 5.24). A release outside is refused at registration,
before anything is patched (``XPU_ATTN_ALLOW_UNTESTED=1`` serves it, with one warning line). Line numbers below
are 5.24's unless named; 5.25 moved them to continuous_api.py:745-792 (the gate), cache.py:416-452 (``update``)
and cache.py:45 (``group_layers_by_attn_type``), same code.

Three patches, all inert unless the model's attention implementation is this backend's:

* the CB gate: ``ContinuousBatchingManager.switch_to_cb_friendly_attn`` (continuous_api.py:745-789) accepts
  only ``paged|eager``, ``sdpa`` or a name containing "flash", and 5.17/5.18 prefix every name with ``paged|``;
  ours is kept as it is. The CB modules' ``is_flash_attention_requested`` (initialization.py:78,83, cache.py:580)
  answers True for ours, so CB builds no dense masks and compiles nothing for it, as for a flash kernel; it stays
  False for ``version=[2, 3]`` (initialization.py:148-151), so CB never takes its FlashAttention block-table path.
* the cache write: in 5.24 the model calls ``PagedAttentionCache.update`` (cache.py:393-429) before the
  attention call, and it writes K/V and gathers them back; for our layers it returns the new K/V untouched and
  hands the cache on in the kwargs. In 5.17-5.23 the attention call itself calls ``update`` (we do not). Either
  way the attention call writes the new K/V into the pages and attends through a page table.
* sliding-window layers: CB keeps them in a ring buffer (``SlidingAttentionCacheAllocator``, slot =
  position % window), which no page table can address once a chunk wraps around it. With this backend
  ``group_layers_by_attn_type`` (cache.py:44-67; 5.17: cache.py:56-86) puts every layer in full-attention pages
  and the kernel applies the window: the same answers, more cache memory for those layers.

* 5.25 (cache.py:227-240, ``PagedAttentionCache._create_allocator``): a model whose config has ``kv_lora_rank``
  (MLA: DeepSeek-V2/V3) gets an ``MLACacheAllocator`` (cache_allocators/compressed_latents.py:23-31), which
  caches one latent row per token instead of per-head K/V and has no block-table view
  (``get_cache_for_block_table`` raises NotImplementedError, compressed_latents.py:99-101). This adapter reads
  per-head K/V pages, so ``latent_cache_refusal`` refuses such a model at start-up (5.25+) instead.

Other moves handled here: 5.17 has no cache allocators (one cache tensor per position in a layer group) and
sizes pages with ``block_size``; 5.18 names the host maxima ``max_seqlen_q/k`` (later ``max_length_q/k``) and
unboxes the per-layer-type dicts when the model has one layer type.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
from typing import Callable

import torch

SUPPORTED = ((5, 17), (5, 25))  # inclusive (major, minor) range, each release tested
LATENT_CACHE_FROM = (5, 25)  # CB caches MLA layers as latents (MLACacheAllocator) from this release on
CACHE_KWARG = "xpu_attn_cache"  # how update() hands CB's cache to the attention call


def version() -> str:
    return md.version("transformers")


def _range() -> str:
    lo, hi = SUPPORTED
    return f"{lo[0]}.{lo[1]} through {hi[0]}.{hi[1]}"


def _minor(v: str) -> tuple[int, int]:
    parts = v.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"vllm-xpu-attn: cannot parse the transformers version {v!r}") from None


_warned: set[str] = set()


def in_range(v: str) -> bool:
    """Whether transformers ``v`` is in the supported (tested) range, whatever the opt-in says."""
    lo, hi = SUPPORTED
    return lo <= _minor(v) <= hi


def check_version() -> str:
    """The installed transformers version, or ValueError naming the supported range and the opt-in; with
    ``XPU_ATTN_ALLOW_UNTESTED=1`` an untested release is served, with one warning line."""
    from .. import env

    try:
        v = version()
    except md.PackageNotFoundError:
        raise ValueError(
            f"vllm-xpu-attn's transformers adapter needs transformers {_range()} "
            "(pip install 'vllm-xpu-attn[transformers]')"
        ) from None
    lo, hi = SUPPORTED
    if lo <= _minor(v) <= hi:
        return v
    if env.on(env.ALLOW_UNTESTED):
        line = (
            f"vllm-xpu-attn: serving untested transformers {v} because {env.ALLOW_UNTESTED}=1 (supported and "
            f"tested: transformers {_range()})"
        )
        if line not in _warned:  # one line per process, however often register() or the doctor asks
            _warned.add(line)
            import logging

            logging.getLogger("vllm_xpu_attn").warning("%s", line)
        return v
    raise ValueError(
        f"vllm-xpu-attn supports transformers {_range()} for continuous batching (each tested); "
        f"installed: transformers {v} (its continuous-batching internals may differ). Install a "
        f"supported release, or set {env.ALLOW_UNTESTED}=1 to serve {v} untested"
    )


def latent_cache_refusal(config) -> str | None:
    """Why CB's cache for this model cannot be served (5.25+: MLA layers cached as latents), else None."""
    if getattr(config, "kv_lora_rank", None) is None or _minor(version()) < LATENT_CACHE_FROM:
        return None
    return (
        f"vllm-xpu-attn: transformers {version()} caches this model's MLA layers (kv_lora_rank="
        f"{config.kv_lora_rank}) as compressed latents (MLACacheAllocator), which this continuous-batching "
        "adapter does not read (it pages per-head keys and values); serve MLA models with vLLM or SGLang "
        "through this backend, or use attn_implementation='sdpa' here"
    )


def cb_config(**kw):
    """transformers' ``ContinuousBatchingConfig(**kw)``; ``page_size`` is ``block_size`` in 5.17."""
    import inspect

    from transformers import ContinuousBatchingConfig

    if "page_size" in kw and "page_size" not in inspect.signature(ContinuousBatchingConfig).parameters:
        kw["block_size"] = kw.pop("page_size")
    return ContinuousBatchingConfig(**kw)


def cb_cache(kwargs: dict):
    """CB's cache from the attention call's kwargs: 5.24's model code hands it to ``update`` only (our patch
    passes it on as ``CACHE_KWARG``); 5.19-5.23 pass it to the attention call as ``cache``, whose job it was
    to call ``update`` (we do not: we write the pages ourselves)."""
    cache = kwargs.get(CACHE_KWARG)
    if cache is None:
        from transformers.generation.continuous_batching.cache import PagedAttentionCache

        cache = kwargs.get("cache")
        if not isinstance(cache, PagedAttentionCache):
            return None
    return cache


def step_lengths(kwargs: dict, layer_type: str) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(cu_seqlens_q int32 [B+1], cu_seqlens_k int32 [B+1], max_seqlen_q, max_seqlen_k) of a layer type's group.

    5.19+: ``max_length_q`` / ``max_length_k``; 5.18: ``max_seqlen_q`` / ``max_seqlen_k``. The K entries are
    dicts by layer type, or the bare value when the model has one type (5.18, input_outputs.py:536-538)."""
    mq, mk = ("max_length_q", "max_length_k") if "max_length_q" in kwargs else ("max_seqlen_q", "max_seqlen_k")
    cu_k, max_k = (kwargs[k][layer_type] if isinstance(kwargs[k], dict) else kwargs[k] for k in ("cu_seq_lens_k", mk))
    return kwargs["cu_seq_lens_q"].to(torch.int32), cu_k.to(torch.int32), int(kwargs[mq]), int(max_k)


def layer_pages(cache, layer_idx: int) -> tuple[torch.Tensor, torch.Tensor, int, str]:
    """The layer's K and V pages [pages, page_size, Hkv, D] (views of CB's cache), its allocator's index into
    ``read_index`` / ``write_index`` and its layer type (the key of ``cu_seq_lens_k`` / ``max_length_k``)."""
    if not hasattr(cache, "layer_to_allocator"):  # 5.17: one cache tensor per position in a group (cache.py:246-255)
        group, j = cache.layer_index_to_group_indices[layer_idx]
        shape = (-1, cache.block_size, cache.num_key_value_heads, cache.head_dim)
        layer_type = "full_attention" if cache.sliding_windows[layer_idx] == 1 else "sliding_attention"
        return cache.key_cache[j].view(shape), cache.value_cache[j].view(shape), group, layer_type
    alloc = cache.layer_to_allocator[layer_idx]
    k_pages, v_pages = alloc.get_cache_for_block_table(layer_idx)
    layer_type = next(name for name, a in cache.cache_allocators.items() if a is alloc)  # 5.18: no .layer_type
    return k_pages, v_pages, alloc.index, layer_type


def page_size(cache) -> int:
    if not hasattr(cache, "cache_allocators"):  # 5.17
        return int(cache.block_size)
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
        return original_is_flash(
            config=config, requested_attention_implementation=requested_attention_implementation, version=version
        )

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
    def update(self, key_states, value_states, layer_idx, *args, **kw):
        kwargs = kw.get("kwargs", args[0] if args else None)  # 5.24's signature; 5.18 passes read/write indices
        if ours(self.config) and isinstance(kwargs, dict):
            kwargs[CACHE_KWARG] = self  # the model passes the cache to update() only, not to the attention call
            return key_states, value_states  # written into the pages by the attention call
        return original_update(self, key_states, value_states, layer_idx, *args, **kw)

    paged_cache.update = update

    # 3. sliding-window layers in full-attention pages
    original_group = cb_cache.group_layers_by_attn_type

    @functools.wraps(original_group)
    def group(config):
        groups = original_group(config)
        if not ours(config):
            return groups
        if isinstance(groups, tuple):  # 5.17: (layer groups of equal size, their types)
            layer_groups, types = groups
            if "sliding_attention" in types:
                return [sorted(i for g in layer_groups for i in g)], ["full_attention"]
            return groups
        if "sliding_attention" in groups:
            others = set(groups) - {"full_attention", "sliding_attention"}
            if others:
                raise ValueError(f"vllm-xpu-attn: CB layer types {sorted(others)} are not served")
            return {"full_attention": sorted(i for idx in groups.values() for i in idx)}
        return groups

    cb_cache.group_layers_by_attn_type = group
    if hasattr(initialization, "group_layers_by_attn_type"):
        initialization.group_layers_by_attn_type = group
    _INSTALLED.add(name)
