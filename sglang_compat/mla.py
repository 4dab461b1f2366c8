"""SGLang's MLA models (DeepSeek-V2/V3; ``model_runner.use_mla_backend``) on this backend.

SGLang gives each MLA layer two RadixAttentions sharing one layer id. The absorbed one (``attn_mqa``: one
KV head, qk_head_dim kv_lora_rank + rope, v_head_dim kv_lora_rank) runs the core's ``forward_mla`` over the
pool's latent rows [size + page, 1, kv_lora_rank + rope] viewed [pages, page, 1, latent]; the un-absorbed
one (``attn_mha``: per-head qk nope + rope, v v_head_dim) serves a first prefill straight on the K/V SGLang
passes (``forward_mla_mha``), and is refused on a step with a cached prefix.

FP8 latent caches: SGLang's MLA pool has no scale of its own. It stores cast(latent) (set_kv_buffer /
set_mla_kv_buffer cast with no scaling, which is also how the model writes the latent before its MHA
prefill), and SGLang's triton backend reads it back with k_scale, dividing its own writes by k_scale. With no
checkpoint scale (k_scale None or 1) both agree: the cache is the FP8 cast of the latent, read with descale 1.
That is what this backend serves; a layer with another k_scale is refused at start-up (``check_kv_scale``):
SGLang's MHA-prefill writes would be unscaled and its absorbed ones scaled.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from vllm_xpu_attn.core import LayerRunner, LayerSpec, MLADims, StepPlan

from .compat import (
    BIDIRECTIONAL_TYPES,
    ForwardBatch,
    batch_write_loc,
    mla_dims,
    mla_fb_attends_prefix,
    mla_pool_dims,
    mla_pool_stores_fp8,
)

logger = logging.getLogger("vllm_xpu_attn")


class SGLangMLA:
    """One MLA model's attention: its dims (checked against the pool), the role of each RadixAttention, the
    layer specs, and the two forwards. The backend owns the runners and the step plan and hands them in."""

    def __init__(
        self,
        model_runner,
        pool,
        *,
        dtype: torch.dtype,
        kv_dtype: torch.dtype,
        batch_invariant: bool,
        unsupported: Optional[str],
    ):
        """``unsupported``: why this model's pool layout cannot serve MLA (None: it can)."""
        d = mla_dims(model_runner)
        missing = [k for k, v in d.items() if v is None]
        if missing:
            raise ValueError(f"xpu_attn: MLA model config lacks {', '.join(missing)}; cannot serve its attention")
        self.dims = MLADims(**d)
        rank, rope = mla_pool_dims(pool)
        if (rank, rope) != (None, None) and (rank, rope) != (self.dims.kv_lora_rank, self.dims.qk_rope_head_dim):
            raise ValueError(
                f"xpu_attn: the MLA pool's rows are kv_lora_rank {rank} + rope {rope}, the model config "
                f"says {self.dims.kv_lora_rank} + {self.dims.qk_rope_head_dim}"
            )
        if unsupported:
            raise ValueError(f"xpu_attn: MLA with {unsupported} is not supported")
        self.pool = pool
        self.dtype, self.kv_dtype, self.batch_invariant = dtype, kv_dtype, batch_invariant
        self.fp8 = mla_pool_stores_fp8(pool)  # the latent pool stores FP8 bytes
        self.paths_seen: set[str] = set()  # MLA forms run so far, each logged once (operators, e2e tests)

    # ---- configuration ------------------------------------------------------------
    def check_kv_scale(self, layer) -> None:
        """Start-up: an FP8 latent cache is served with scale 1 only (module docstring)."""
        if not self.fp8:
            return
        ks = getattr(layer, "k_scale_float", None)
        if ks is None and isinstance(getattr(layer, "k_scale", None), torch.Tensor):
            ks = float(layer.k_scale.reshape(-1)[0])  # start-up only
        if ks is not None and ks != 1.0:
            raise ValueError(
                f"xpu_attn: layer {layer.layer_id} has an FP8 latent cache with k_scale {ks}; SGLang's MLA pool "
                "stores latents unscaled (the model's own MHA-prefill write ignores k_scale), so only scale 1 is "
                "served. Use --kv-cache-dtype auto (bf16/fp16 latents) or a checkpoint without KV scales"
            )

    def role(self, layer) -> str:
        """'mla' (absorbed, over the latent cache) or 'mha' (un-absorbed prefill on the given K/V)."""
        m = self.dims
        if (layer.tp_k_head_num, layer.qk_head_dim, layer.v_head_dim) == (1, m.latent_dim, m.kv_lora_rank):
            return "mla"
        if (layer.qk_head_dim, layer.v_head_dim) == (
            m.qk_head_dim,
            m.v_head_dim,
        ) and layer.tp_k_head_num == layer.tp_q_head_num:
            return "mha"
        raise ValueError(
            f"xpu_attn: MLA model layer {layer.layer_id} has qk_head_dim {layer.qk_head_dim}, v_head_dim "
            f"{layer.v_head_dim}, {layer.tp_k_head_num} KV heads: neither the absorbed form (1 KV head, "
            f"{m.latent_dim}/{m.kv_lora_rank}) nor the un-absorbed prefill ({m.qk_head_dim}/{m.v_head_dim})"
        )

    def spec(self, layer, has_sinks: bool) -> LayerSpec:
        if has_sinks or layer.is_cross_attention or layer.attn_type in BIDIRECTIONAL_TYPES:
            raise ValueError(f"xpu_attn: MLA layer {layer.layer_id} with sinks, cross or bidirectional attention")
        if layer.sliding_window_size is not None and layer.sliding_window_size > -1:
            raise ValueError(f"xpu_attn: MLA layer {layer.layer_id} with a sliding window is not supported")
        # both roles are configured from the same MLA dims; the 'mha' runner serves forward_mha with its
        # own layer's scale (DeepSeek gives both the 192-based scale, times YaRN's mscale)
        return LayerSpec.for_mla(
            layer.tp_q_head_num,
            self.dims,
            float(layer.scaling),
            dtype=self.dtype,
            kv_dtype=self.kv_dtype,
            softcap=float(layer.logit_cap or 0.0),
            batch_invariant=self.batch_invariant,
        )

    def _note_path(self, path: str) -> None:
        if path not in self.paths_seen:
            self.paths_seen.add(path)
            logger.info("xpu_attn (SGLang): MLA %s runs through this backend", path)

    # ---- per-layer run ------------------------------------------------------------
    def forward_absorbed(
        self,
        runner: LayerRunner,
        plan: StepPlan,
        page_size: int,
        q,
        k,
        layer,
        fb: ForwardBatch,
        save_kv_cache: bool,
        sinks,
        q_rope,
        k_rope,
    ) -> torch.Tensor:
        """Absorbed MLA, any mode. SGLang's inputs under ``xpu_attn`` (its "concat" form): q [T, H*latent],
        k [T, 1, latent] (= [k_nope | k_pe], the row to cache); v (k_nope) is not needed: the values are the
        cached rows' first kv_lora_rank columns. Under ``intel_xpu`` (its "split" form):
        q [T, H*kv_lora_rank] + q_rope [T, H*rope], k = k_nope [T, 1, kv_lora_rank] + k_rope [T, 1, rope].
        Returns [T, H*kv_lora_rank] in the model dtype."""
        if sinks is not None:
            raise ValueError("xpu_attn: attention sinks on an MLA layer")
        m, hq = self.dims, layer.tp_q_head_num
        if q_rope is not None:
            q = torch.cat([q.reshape(-1, hq, m.kv_lora_rank), q_rope.reshape(-1, hq, m.qk_rope_head_dim)], dim=-1)
        q3 = q.reshape(-1, hq, m.latent_dim)
        if q3.dtype != self.dtype:
            q3 = q3.to(self.dtype)
        if save_kv_cache and k is not None:
            row = k.reshape(-1, 1, m.kv_lora_rank if k_rope is not None else m.latent_dim)
            if k_rope is not None:
                row = torch.cat([row, k_rope.reshape(-1, 1, m.qk_rope_head_dim).to(row.dtype)], dim=-1)
            # MLATokenToKVPool.set_kv_buffer(layer, loc, cache_k [T, 1, latent], cache_v): stores cache_k only,
            # cast to its dtype (FP8: unscaled, see the module docstring)
            self.pool.set_kv_buffer(layer, batch_write_loc(fb), row, None)
        latent = self.pool.get_key_buffer(layer.layer_id).view(-1, page_size, 1, m.latent_dim)
        self._note_path(f"absorbed {plan.mode.value}")
        out = q3.new_empty(q3.shape[0], hq * m.kv_lora_rank)
        runner.forward_mla(plan, q3, latent, out.view(-1, hq, m.kv_lora_rank))
        return out

    def forward_mha(
        self,
        runner: LayerRunner,
        plan: StepPlan,
        step_has_prefix: bool,
        q,
        k,
        v,
        layer,
        fb: ForwardBatch,
        save_kv_cache: bool,
        sinks,
        q_rope,
        k_rope,
    ) -> torch.Tensor:
        """The un-absorbed first prefill: causal MHA over the per-head K/V SGLang decompressed from the latents
        of this step's tokens (q/k [T, H, nope+rope], v [T, H, v_head_dim]); the latent rows were already
        written by the model. Refused on any step with a cached prefix: those keys are only in the latent
        cache, never in the K/V passed here, so running it would silently drop them."""
        if step_has_prefix or plan.mode.is_decode or mla_fb_attends_prefix(fb):
            raise ValueError(
                f"xpu_attn: MLA layer {layer.layer_id}'s un-absorbed (MHA) attention was called on a "
                f"{plan.mode.value} step with a cached prefix (or asked for prefix chunks / LSE); it only serves "
                "a first prefill. SGLang picks the absorbed form for such steps under --attention-backend xpu_attn"
            )
        if save_kv_cache:
            raise ValueError(
                f"xpu_attn: MLA layer {layer.layer_id}'s MHA call asked to save its per-head K/V; "
                "an MLA cache holds latent rows only (the model writes them itself)"
            )
        if sinks is not None or q_rope is not None or k_rope is not None or k is None or v is None:
            raise ValueError("xpu_attn: the MLA MHA prefill takes plain q/k/v (no sinks, no split rope inputs)")
        m, hq, n = self.dims, layer.tp_q_head_num, plan.num_tokens
        self._note_path("un-absorbed (MHA) prefill")
        q3 = q.reshape(-1, hq, m.qk_head_dim)
        k3 = k.reshape(-1, layer.tp_k_head_num, m.qk_head_dim)
        v3 = v.reshape(-1, layer.tp_v_head_num, m.v_head_dim)
        if q3.dtype != self.dtype:
            q3, k3, v3 = q3.to(self.dtype), k3.to(self.dtype), v3.to(self.dtype)
        out = q3.new_empty(q3.shape[0], hq * m.v_head_dim)
        o3 = out.view(-1, hq, m.v_head_dim)
        main = plan.main  # no prefix: each sequence's keys are exactly its new tokens
        runner.forward_mla_mha(
            q3[:n],
            k3[:n],
            v3[:n],
            main.cu_seqlens_q,
            main.cu_seqlens_q,
            main.max_seqlen_q,
            main.max_seqlen_q,
            out=o3[:n],
        )
        return out
