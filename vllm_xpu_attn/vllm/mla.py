"""vLLM MLA backend (DeepSeek-V2/V3): vLLM's MLA layer around this project's core.

vLLM's ``MLAAttention`` layer owns the projections: it absorbs W_UK into the decode queries and
applies W_UV to the decode output. It calls, on our impl:

* ``do_kv_cache_update``: every new token's latent row ``[c_kv | k_rope]`` -> core ``write_latent``;
* ``forward_mqa`` (decode rows, first in the batch): absorbed MQA over the latent cache -> core
  ``forward_mla`` with the step's decode plan (built once per step by the builder, ``core.plan_step``);
* ``forward_mha`` (prefill rows): un-absorbed causal attention over K/V decompressed with kv_b_proj ->
  core ``forward_mla_mha``. The impl owns this call, so vLLM's MLAPrefillBackend plug-in (CPU_SDPA_MLA
  on the CPU) is still built by the layer and prepared by the builder, but never runs attention.
  Prefill rows with a cached context (chunked prefill / prefix caching) attend, in the same one call,
  to their context rows read back from the latent cache.

Metadata: vLLM's common MLA builder (decode/prefill split, reordering, chunked-context metadata),
with ``_build_decode`` extended by the core's step plan.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar, Optional

import torch

from ..core import LayerRunner, LayerSpec, MLADims, Mode, StepInputs, StepPlan, graphs, plan_step
from ..kernels.api import batch_invariant_requested, fp8_descale
from . import compat
from .compat import (
    AttentionCGSupport,
    AttentionType,
    MLACommonBackend,
    MLACommonDecodeMetadata,
    MLACommonImpl,
    MLACommonMetadata,
    MLACommonMetadataBuilder,
    MultipleOf,
)

logger = logging.getLogger("vllm_xpu_attn")

MLA_BACKEND_NAME = "XPU_ATTN_MLA"  # MLA layers never resolve get_name() through AttentionBackendEnum

GRAPH_GROUP = "vllm_mla"
_LOGGED: set[str] = set()


def _once(msg: str, *args) -> None:
    if msg not in _LOGGED:
        _LOGGED.add(msg)
        logger.info(msg, *args)


class XpuAttnMLABackend(MLACommonBackend):
    """MLA through vllm-xpu-attn. Declares what the reference provider (always present) computes."""

    supports_kv_cache_update_bypass: bool = False  # vLLM 0.33+: see XpuAttnBackend

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = list(compat.MLA_KV_CACHE_DTYPES)

    @staticmethod
    def get_name() -> str:
        return MLA_BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type["XpuAttnMLAImpl"]:
        return XpuAttnMLAImpl

    @staticmethod
    def get_builder_cls() -> type["XpuAttnMLAMetadataBuilder"]:
        return XpuAttnMLAMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list:
        return [MultipleOf(1)]  # the core pages latent rows at any page size (vLLM's CPU platform forces 16)

    # head sizes: MLACommonBackend's [320, 512, 576], the only latent widths vLLM's MLA metadata accepts


@dataclasses.dataclass
class XpuAttnMLADecodeMetadata(MLACommonDecodeMetadata):
    """vLLM's decode part plus the core's plan of it (one per step, shared by the group's layers)."""

    plan: Optional[StepPlan] = None


def decode_plan(
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    max_seq_len: int,
    query_start_loc: torch.Tensor,
    num_decode_tokens: int,
    page_size: int,
) -> StepPlan:
    """The decode rows of an MLA step (one query each: the builder is SINGLE_ONLY) -> core StepPlan. No sync."""
    return plan_step(
        StepInputs(
            mode=Mode.DECODE,
            seq_lens=seq_lens,
            max_seqlen_k=int(max_seq_len),
            num_tokens=int(num_decode_tokens),
            page_size=page_size,
            page_table=block_table,
            cu_seqlens_q=query_start_loc,
            max_seqlen_q=1,
        )
    )


class XpuAttnMLAMetadataBuilder(MLACommonMetadataBuilder[MLACommonMetadata]):
    """vLLM's MLA builder; its decode part also carries the core's step plan.

    Graphs: decode-only batches of single-token queries (what the common MLA builder captures:
    ``build_for_cudagraph_capture`` is decode-only, and this builder is SINGLE_ONLY, so no spec-decode
    verify rows); never when a layer's provider cannot be captured (the reference provider on the CPU).
    The plan holds the runner's persistent int32 buffers (block table, seq_lens, query_start_loc) as they are.
    """

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        why = graphs.blockers(GRAPH_GROUP)
        if why:
            logger.warning("vllm-xpu-attn: MLA: no FULL graphs: %s", "; ".join(why))
            return AttentionCGSupport.NEVER
        return cls._cudagraph_support

    def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False):
        md = super().build(common_prefix_len, common_attn_metadata, fast_build)
        if md.num_decodes and md.num_prefills:
            _once(
                "vllm-xpu-attn: MLA mixed step: %d decode rows (forward_mqa) then %d prefill rows (forward_mha)",
                md.num_decodes,
                md.num_prefills,
            )
        return md

    def _build_decode(
        self,
        block_table_tensor,
        seq_lens_device,
        max_seq_len,
        query_start_loc_cpu,
        query_start_loc_device,
        num_decode_tokens,
        max_query_len,
        dcp_tot_seq_lens_device,
    ):
        if max_query_len > 1:
            raise NotImplementedError("vllm-xpu-attn: MLA decode rows with more than one query (spec decode)")
        plan = decode_plan(
            block_table_tensor, seq_lens_device, max_seq_len, query_start_loc_device, num_decode_tokens, self.page_size
        )
        return XpuAttnMLADecodeMetadata(
            block_table=block_table_tensor,
            seq_lens=seq_lens_device,
            dcp_tot_seq_lens=dcp_tot_seq_lens_device,
            plan=plan,
        )


def _no_interleaved_v(impl):
    """vLLM 0.33+ ``set_interleaved_v_cache`` (backend.py:956): a fusion pass asks every layer it may serve to read
    an interleaved V cache. This backend reads its own layout only and declares
    ``supports_kv_cache_update_bypass = False`` so no fused writer should pick it; if one asks anyway, start-up
    stops here rather than serving a cache written in a layout this backend would misread."""
    raise NotImplementedError(
        f"vllm-xpu-attn: {type(impl).__name__} cannot read an interleaved V cache (vLLM's "
        "QK-norm/RoPE/KV-cache fusion); disable that fusion or this backend (XPU_ATTN_ENABLE=0)"
    )


class XpuAttnMLAImpl(MLACommonImpl[MLACommonMetadata]):
    """One MLA layer: the core's LayerSpec.for_mla and LayerRunner (providers chosen now, per phase)."""

    can_return_lse_for_decode: bool = False  # forward_mqa returns (out, None): no DCP

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int,
        alibi_slopes: Optional[list[float]],
        sliding_window: Optional[int],
        kv_cache_dtype: str,
        logits_soft_cap: Optional[float],
        attn_type: str,
        kv_sharing_target_layer_name: Optional[str],
        **mla_args,
    ) -> None:
        from vllm.platforms import current_platform

        why = []
        if attn_type != AttentionType.DECODER:
            why.append(f"attention type {attn_type}")
        if alibi_slopes is not None or sliding_window is not None or logits_soft_cap:
            why.append("ALiBi / sliding window / logit soft-capping")
        if mla_args.get("indexer") is not None:
            why.append("sparse MLA (an indexer: DeepSeek-V3.2)")
        if kv_sharing_target_layer_name is not None:
            why.append("KV sharing")
        if kv_cache_dtype not in compat.MLA_KV_CACHE_DTYPES:
            why.append(f"KV cache dtype {kv_cache_dtype!r} (served: {', '.join(compat.MLA_KV_CACHE_DTYPES)})")
        extra = set(mla_args) - {
            "q_lora_rank",
            "kv_lora_rank",
            "qk_nope_head_dim",
            "qk_rope_head_dim",
            "qk_head_dim",
            "v_head_dim",
            "kv_b_proj",
            "indexer",
            "q_pad_num_heads",
        }
        if extra:
            why.append(f"MLA arguments {sorted(extra)}")
        if why:
            raise NotImplementedError(f"vllm-xpu-attn: this MLA layer cannot be served: {'; '.join(why)}")
        super().__init__(
            num_heads,
            head_size,
            scale,
            num_kv_heads,
            alibi_slopes,
            sliding_window,
            kv_cache_dtype,
            logits_soft_cap,
            attn_type,
            kv_sharing_target_layer_name,
            **mla_args,
        )
        if self.dcp_world_size > 1:
            raise NotImplementedError("vllm-xpu-attn: MLA with decode context parallelism (needs decode LSE)")
        # decode queries reach forward_mqa unquantized ((ql_nope, q_pe) in the model dtype); FP8 caches are
        # dequantized inside the kernel with the layer's _k_scale
        self.supports_quant_query_input = False
        cfg = compat.get_current_vllm_config()
        model_dtype = cfg.model_config.dtype if cfg.model_config is not None else torch.get_default_dtype()
        self.kv_dtype = compat.mla_kv_dtype(kv_cache_dtype, model_dtype)
        self.fp8 = kv_cache_dtype.startswith("fp8")
        if not self.fp8 and self.kv_dtype != model_dtype:  # the core's kernels take q's dtype or FP8 caches
            raise NotImplementedError(
                f"vllm-xpu-attn: MLA KV cache dtype {kv_cache_dtype!r} under a {model_dtype} "
                "model: use 'auto' (the model dtype) or 'fp8'"
            )
        self.dims = MLADims(
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            qk_nope_head_dim=self.qk_nope_head_dim,
            v_head_dim=self.v_head_dim,
        )
        if head_size != self.dims.latent_dim:
            raise ValueError(
                f"vllm-xpu-attn: MLA head size {head_size} != kv_lora_rank + qk_rope_head_dim ({self.dims.latent_dim})"
            )
        self.spec = LayerSpec.for_mla(
            num_heads,
            self.dims,
            self.scale,
            dtype=model_dtype,
            kv_dtype=self.kv_dtype,
            batch_invariant=compat.vllm_batch_invariant() or batch_invariant_requested(),
        )
        self.page_size = cfg.cache_config.block_size
        self.runner = LayerRunner(self.spec, current_platform.device_type, self.page_size)
        graphs.record(GRAPH_GROUP, self.runner)
        logger.info(
            "vllm-xpu-attn: MLA layer H=%d kv_lora_rank=%d rope=%d nope=%d v=%d kv=%s page=%d -> providers %s",
            num_heads,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            self.qk_nope_head_dim,
            self.v_head_dim,
            kv_cache_dtype,
            self.page_size,
            self.runner.providers_used(),
        )

    def _kv_scale(self, k_scale: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return fp8_descale(self.spec.kv_dtype, k_scale)

    # ---- cache write -------------------------------------------------------------------
    def do_kv_cache_update(
        self,
        kv_c_normed: torch.Tensor,
        k_pe: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        kv_cache_dtype: str,
        k_scale: torch.Tensor,
        skip_scale: bool = False,
    ) -> None:
        """kv_c_normed [T, kv_lora_rank], k_pe [T, 1, rope] (post-RoPE) -> latent rows at slot_mapping (< 0 skipped).

        ``skip_scale`` (vLLM 0.33+, mla_attention.py:811-819): vLLM passes True for an FP8 cache whose scale is
        1.0, so its kernel may skip the multiply; dividing by 1.0 changes nothing, so the write is the same."""
        if kv_cache.numel() == 0:  # profiling run before the cache exists
            return
        _once("vllm-xpu-attn: MLA cache write via core write_latent (provider %s)", self.runner.decode_provider.name)
        cache = compat.mla_cache_view(kv_cache, kv_cache_dtype)
        self.runner.write_latent(
            kv_c_normed, k_pe.reshape(k_pe.shape[0], -1), cache, slot_mapping.flatten(), scale=self._kv_scale(k_scale)
        )

    def reserve_workspace(self) -> None:
        """vLLM 0.33+ (backend.py:1091, called in the profiling run, mla_attention.py:948): this impl keeps no
        persistent workspace beyond what its runner allocated at construction, so there is nothing to claim."""
        return None

    def set_interleaved_v_cache(self):
        return _no_interleaved_v(self)

    # ---- decode: absorbed MQA over the latent cache ------------------------------------
    def forward_mqa(self, q, kv_c_and_k_pe_cache: torch.Tensor, attn_metadata: MLACommonMetadata, layer):
        """q = (ql_nope [B, N, kv_lora_rank], q_pe [B, N, rope]) -> (o [B, N, kv_lora_rank], None)."""
        if not isinstance(q, tuple):
            raise NotImplementedError("vllm-xpu-attn: pre-quantized MLA decode queries")  # we declare none
        dec = attn_metadata.decode
        if dec is None or getattr(dec, "plan", None) is None:
            raise ValueError(
                "vllm-xpu-attn: MLA decode without the core plan (metadata not from this backend's builder)"
            )
        _once(
            "vllm-xpu-attn: MLA decode (forward_mqa) via core forward_mla (provider %s)",
            self.runner.decode_provider.name,
        )
        q = torch.cat(q, dim=-1)
        cache = compat.mla_cache_view(kv_c_and_k_pe_cache, self.kv_cache_dtype)
        out = torch.empty(q.shape[0], self.num_heads, self.kv_lora_rank, dtype=q.dtype, device=q.device)
        # bound at the layer's first decode, after weight loading (which updates _k_scale in place); one latent
        # cache, one scale for keys and values
        self.runner.ensure_bound(layer, k_scale=layer._k_scale, v_scale=layer._k_scale)
        self.runner.forward_mla(dec.plan, q, cache, out)
        return out, None

    # ---- prefill: un-absorbed causal MHA ----------------------------------------------
    def _up_project(self, kv_c: torch.Tensor, k_pe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent rows -> per-head k [T, N, nope + rope], v [T, N, v_head_dim] (kv_b_proj = [W_UK; W_UV])."""
        kv = self.kv_b_proj(kv_c)[0].view(-1, self.num_heads, self.qk_nope_head_dim + self.v_head_dim)
        k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat([k_nope, k_pe.reshape(-1, 1, self.qk_rope_head_dim).expand(-1, self.num_heads, -1)], dim=-1)
        return k, v

    def forward_mha(
        self,
        q: torch.Tensor,
        kv_c_normed: torch.Tensor,
        k_pe: torch.Tensor,
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: MLACommonMetadata,
        k_scale: torch.Tensor,
        output: torch.Tensor,
        output_scale: Optional[torch.Tensor] = None,
    ) -> None:
        """Prefill rows: q [T, N, nope + rope], kv_c_normed [T, kv_lora_rank], k_pe [T, 1, rope] -> output [T, N*v]."""
        if output_scale is not None:
            raise NotImplementedError("vllm-xpu-attn: fused output quantization in MLA prefill")
        pre = attn_metadata.prefill
        n = q.shape[0]
        k_new, v_new = self._up_project(kv_c_normed[:n], k_pe[:n])
        ctx = pre.chunked_context
        cu_q = pre.query_start_loc
        if ctx is None:  # new sequences only: keys are this step's tokens
            _once(
                "vllm-xpu-attn: MLA prefill (forward_mha) via core forward_mla_mha (provider %s)",
                self.runner.mha_provider.name,
            )
            k, v, cu_k, max_k = k_new, v_new, cu_q, int(pre.max_query_len)
        else:
            _once(
                "vllm-xpu-attn: MLA prefill with cached context (forward_mha) via core forward_mla_mha (provider %s)",
                self.runner.mha_provider.name,
            )
            k, v, cu_k, max_k = self._with_context(kv_c_and_k_pe_cache, pre, k_scale, k_new, v_new)
        out = output.view(n, self.num_heads, self.v_head_dim)
        self.runner.forward_mla_mha(q, k, v, cu_q, cu_k, int(pre.max_query_len), max_k, out=out)

    def _with_context(self, cache: torch.Tensor, pre, k_scale, k_new, v_new):
        """Each prefill row's keys = its cached context (read from the latent cache, decompressed) then its new
        tokens (this step's, unquantized, as vLLM computes them). Host lengths only: no sync.

        The gather/scatter indices depend on the step only: built by the first layer, kept on the step's
        prefill metadata for the others. Decompresses every context at once (vLLM chunks it through a
        bounded workspace)."""
        layout = getattr(pre, "_vxa_context_layout", None)
        if layout is None:
            layout = _context_layout(pre, self.page_size, k_new.device)
            try:
                pre._vxa_context_layout = layout
            except AttributeError:  # a frozen metadata class: rebuilt per layer (same values)
                pass
        slots, ctx_i, new_i, cu, total, max_k = layout
        flat = compat.mla_cache_view(cache, self.kv_cache_dtype).reshape(-1, self.dims.latent_dim)
        if self.fp8:  # index FP8 storage as bytes (index kernels lack FP8 on some devices), then dequantize
            rows = flat.view(torch.uint8)[slots].view(flat.dtype).float() * k_scale.reshape(1).float()
        else:
            rows = flat[slots].float()
        rows = rows.to(k_new.dtype)
        k_ctx, v_ctx = self._up_project(rows[:, : self.kv_lora_rank], rows[:, self.kv_lora_rank :])
        k = k_new.new_empty(total, self.num_heads, k_new.shape[-1])
        v = v_new.new_empty(total, self.num_heads, v_new.shape[-1])
        k[ctx_i], v[ctx_i] = k_ctx, v_ctx
        k[new_i], v[new_i] = k_new, v_new
        return k, v, cu, max_k


def _context_layout(pre, page: int, dev: torch.device):
    """Per step: cache slots of every context token, where context and new tokens go in the joined
    K/V rows, cu_seqlens of those rows, their count and the longest row (host lengths only)."""
    ctx_lens = [int(c) for c in pre.chunked_context.context_lens_list]
    q_lens = [int(x) for x in pre.query_lens_cpu.tolist()]
    req, pos, ctx_dst, new_dst = [], [], [], []
    at, cu_k = 0, [0]
    for i, (c, ql) in enumerate(zip(ctx_lens, q_lens)):
        req += [i] * c
        pos += range(c)
        ctx_dst += range(at, at + c)
        new_dst += range(at + c, at + c + ql)
        at += c + ql
        cu_k.append(at)
    req_t = torch.tensor(req, dtype=torch.long).to(dev, non_blocking=True)
    pos_t = torch.tensor(pos, dtype=torch.long).to(dev, non_blocking=True)
    slots = pre.block_table[req_t, pos_t // page].long() * page + pos_t % page
    ctx_i = torch.tensor(ctx_dst, dtype=torch.long).to(dev, non_blocking=True)
    new_i = torch.tensor(new_dst, dtype=torch.long).to(dev, non_blocking=True)
    cu = torch.tensor(cu_k, dtype=torch.int32).to(dev, non_blocking=True)
    return slots, ctx_i, new_i, cu, at, max(c + ql for c, ql in zip(ctx_lens, q_lens))


BACKEND_PATH = f"{__name__}.XpuAttnMLABackend"
