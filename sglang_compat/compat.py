"""Everything that depends on the SGLang release lives here (written against sglang 0.5.23)."""

from __future__ import annotations

from typing import Optional

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend  # noqa: F401
from sglang.srt.layers.radix_attention import AttentionType  # noqa: F401
from sglang.srt.mem_cache.memory_pool import KVWriteLoc  # noqa: F401
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode  # noqa: F401

# attention types that run bidirectionally over the paged cache (DECODER_BIDIRECTIONAL: newer releases only)
BIDIRECTIONAL_TYPES = tuple(
    t for t in (AttentionType.ENCODER_ONLY, getattr(AttentionType, "DECODER_BIDIRECTIONAL", None)) if t is not None
)

try:
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
except ImportError:  # older layouts kept it in memory_pool
    from sglang.srt.mem_cache.memory_pool import SWAKVPool  # type: ignore  # noqa: F401


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


# ---- reachability: SGLang keys some model checks and the draft backends on built-in names ----
ALIAS_SOURCE = "xpu_attn: validate as intel_xpu"
_BACKEND_FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend")


def install_model_hook_alias(name: str, choose_page_size) -> bool:
    """Let SGLang's per-model checks treat ``name`` as ``intel_xpu``, and pick a page size.

    SGLang 0.5.23's ``handle_model_specific_adjustments`` asserts that GPT-OSS, Llama-4 and Gemma-4
    run on listed backend names (``intel_xpu`` among them). This backend serves everything those
    models need (sinks, sliding windows, chunked local attention), so for the length of that step
    the fields naming it read ``intel_xpu``, then read ``name`` again: through SGLang's own plugin
    hook (``register_resolution_hook``) and its declaration stash, not by editing its lists.
    ``choose_page_size(device) -> Optional[int]`` then picks a page size when the user gave none.
    Returns False (and changes nothing) when this SGLang has no such hook.
    """
    try:
        from sglang.srt.arg_groups.model_override_base import resolved_view
        from sglang.srt.arg_groups.overrides import declare_resolution
        from sglang.srt.arg_groups.resolution_hooks import _HOOKS, register_resolution_hook
    except ImportError:
        return False
    step = "handle_model_specific_adjustments"
    if any(getattr(fn, "_xpu_attn_alias", False) for fn in _HOOKS.get(step, ())):
        return True  # re-entrant: plugins load in several places of one process

    def hook(server_args, previous):
        view = resolved_view(server_args)
        ours = [f for f in _BACKEND_FIELDS if getattr(view, f, None) == name]
        if ours:
            declare_resolution(server_args, ALIAS_SOURCE, **{f: "intel_xpu" for f in ours})
        try:
            previous(server_args)
        finally:
            if ours:
                view = resolved_view(server_args)
                # restore only what the step left as the alias (a model may have chosen otherwise)
                back = {f: name for f in ours if getattr(view, f, None) == "intel_xpu"}
                if back:
                    declare_resolution(server_args, "xpu_attn: restore name", **back)
        view = resolved_view(server_args)
        if name in (getattr(view, f, None) for f in _BACKEND_FIELDS) and view.page_size is None:
            page = choose_page_size(str(view.device).split(":")[0])  # "xpu:0" -> "xpu"
            if page is not None:
                declare_resolution(server_args, "xpu_attn: page size", page_size=page)

    hook._xpu_attn_alias = True
    register_resolution_hook(step)(hook)
    return True


def install_draft_backends(name: str, multi_step_decode, draft_extend) -> bool:
    """Let EAGLE's draft passes run on ``name``.

    SGLang 0.5.23 builds draft backends from a fixed name -> constructor map in
    ``DraftBackendFactory`` and falls back to triton/flashinfer for names missing from
    ``DRAFT_ATTENTION_BACKEND_CHOICES``. Add ``name`` to both: ``multi_step_decode(runner, topk,
    steps)`` for the draft decode steps, ``draft_extend(runner)`` for draft extend.
    """
    try:
        from sglang.srt.server_args import DRAFT_ATTENTION_BACKEND_CHOICES
        from sglang.srt.speculative.draft_utils import DraftBackendFactory
    except ImportError:
        return False
    if name not in DRAFT_ATTENTION_BACKEND_CHOICES:
        DRAFT_ATTENTION_BACKEND_CHOICES.append(name)
    original = DraftBackendFactory._create_backend
    if getattr(original, "_xpu_attn", False):
        return True

    def _create_backend(self, backend_name, backend_map, error_template, stamps_children=False):
        if stamps_children:  # the multi-step draft decode container
            make = lambda: (name, multi_step_decode(self.draft_model_runner, self.topk, self.speculative_num_steps))
        else:
            make = lambda: (name, draft_extend(self.draft_model_runner))
        return original(self, backend_name, {**backend_map, name: make}, error_template, stamps_children)

    _create_backend._xpu_attn = True
    DraftBackendFactory._create_backend = _create_backend
    return True


def install_deterministic_choice(name: str) -> bool:
    """List ``name`` among SGLang's deterministic-inference backends (and radix-cache compatible ones):
    with ``--enable-deterministic-inference`` this backend runs its batch-invariant kernels, which
    give a cached prefix the same bits as a recomputed one, so the radix cache can stay on."""
    try:
        from sglang.srt.arg_groups import choices
    except ImportError:
        return False
    for lst in (
        getattr(choices, "DETERMINISTIC_ATTENTION_BACKEND_CHOICES", None),
        getattr(choices, "RADIX_SUPPORTED_DETERMINISTIC_ATTENTION_BACKEND", None),
    ):
        if lst is not None and name not in lst:
            lst.append(name)
    return True


# ---- MLA (DeepSeek-V2/V3): release-dependent attribute access ----------------------------
_MLA_DIM_NAMES = ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")


def mla_dims(model_runner) -> dict:
    """The MLA dimensions {kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim} of a model.

    SGLang 0.5.23's ModelConfig copies them from the HF text config for the DeepSeek family; for
    other MLA architectures it copies only some (MiniCPM3: kv_lora_rank and qk_rope_head_dim, and its
    ``v_head_dim`` is the generic head_dim). The HF text config is the model's own truth, so it is
    read first, then the ModelConfig. Missing values come back as None (the caller refuses them).
    """
    mc = model_runner.model_config
    hf = getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)
    dims = {}
    for name in _MLA_DIM_NAMES:
        v = getattr(hf, name, None) if hf is not None else None
        if v is None:
            v = getattr(mc, name, None)
        dims[name] = int(v) if v is not None else None
    return dims


def mla_pool_dims(pool) -> tuple[Optional[int], Optional[int]]:
    """(kv_lora_rank, qk_rope_head_dim) as the MLA token-to-KV pool laid out its rows (None if unknown)."""
    return getattr(pool, "kv_lora_rank", None), getattr(pool, "qk_rope_head_dim", None)


def mla_pool_stores_fp8(pool) -> bool:
    """Whether an MLA pool keeps its latent rows as FP8 bytes (SGLang: ``store_dtype`` uint8)."""
    return getattr(pool, "store_dtype", None) == torch.uint8 or getattr(pool, "dtype", None) in (
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    )


def mla_fb_attends_prefix(fb) -> bool:
    """Whether SGLang asks this MHA call for cached-prefix chunks or an LSE (its MHA_CHUNKED_KV path)."""
    return bool(getattr(fb, "attn_attend_prefix_cache", None)) or bool(getattr(fb, "mha_return_lse", None))


def batch_write_loc(fb):
    """The batch's out_cache_loc as a pool write loc, with its physical mark where this release has one."""
    for_batch = getattr(KVWriteLoc, "for_batch", None)
    return for_batch(fb) if for_batch is not None else KVWriteLoc(fb.out_cache_loc)


def tp_rank_and_size() -> tuple[int, int]:
    """(tensor-parallel rank, TP size) of this process, for the per-layer log line; (0, 1) where
    SGLang's parallel context is not written (backends built outside an engine, unit tests)."""
    try:
        from sglang.srt.runtime_context import get_parallel

        p = get_parallel()
        return int(p.tp_rank), int(p.tp_size)
    except (ImportError, RuntimeError, AttributeError):
        return 0, 1


def spec_params(model_runner) -> tuple[int, int]:
    """(EAGLE/NGRAM top-k, draft tokens per verify) as SGLang resolved them; 0 where not speculative.

    SGLang 0.5.23 writes the speculative settings it chooses itself (NGRAM's top-k = its BFS breadth
    ``speculative_ngram_max_bfs_breadth``, NGRAM's default 12 draft tokens, EAGLE's automatic choice)
    into its runtime spec namespace (``get_spec()``, what its own backends read), not into the
    ServerArgs fields: read that first, the ServerArgs fields where it is not published (unit tests).
    """
    sa = getattr(model_runner, "server_args", None)
    topk = getattr(sa, "speculative_eagle_topk", None)
    num_draft = getattr(sa, "speculative_num_draft_tokens", None)
    try:
        from sglang.srt.runtime_context import get_spec

        spec = get_spec()
    except (ImportError, ValueError, AttributeError):  # not published (backends built outside an engine)
        spec = None
    if spec is not None:
        topk = getattr(spec, "speculative_eagle_topk", None) or topk
        num_draft = getattr(spec, "speculative_num_draft_tokens", None) or num_draft
    return int(topk or 0), int(num_draft or 0)
