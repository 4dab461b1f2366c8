"""vLLM v1 attention backend: static declarations, a metadata builder per step, an impl per layer.

The adapter only translates: CommonAttentionMetadata -> core StepPlan, vLLM layer
arguments -> core LayerSpec, vLLM's cache tensor -> the core's K/V page views.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar, Optional

import torch

from ..core import AttentionKind, LayerRunner, LayerSpec, Mode, StepInputs, StepPlan, graphs, plan_step
from ..kernels.api import batch_invariant_requested, fp8_descale, is_fp8
from . import compat
from .compat import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    CrossAttentionSpec,
    EncoderOnlyAttentionSpec,
    MultipleOf,
)

logger = logging.getLogger("vllm_xpu_attn")

GRAPH_GROUP = "vllm"
BACKEND_NAME = (
    "CUSTOM"  # vLLM resolves get_name() through AttentionBackendEnum; CUSTOM is the slot for out-of-tree backends
)


class XpuAttnBackend(AttentionBackend):
    """vllm-xpu-attn for vLLM. What it declares is what the reference provider (always
    present) computes; faster providers are chosen per layer where they fit."""

    forward_includes_kv_cache_update: bool = False
    # vLLM 0.33+ (backend.py:73): may forward() run with key/value omitted after a fused op wrote the cache? No:
    # vLLM's fused writer writes its own layout, not this backend's pages (older releases ignore the flag)
    supports_kv_cache_update_bypass: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]

    @staticmethod
    def get_name() -> str:
        return BACKEND_NAME

    @staticmethod
    def get_impl_cls() -> type["XpuAttnImpl"]:
        return XpuAttnImpl

    @staticmethod
    def get_builder_cls() -> type["XpuAttnMetadataBuilder"]:
        return XpuAttnMetadataBuilder

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list:
        return [MultipleOf(1)]  # any page size; vendor kernels that need 16/32/64 are skipped per layer

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return list(range(8, 513, 8))

    @classmethod
    def supported_kv_cache_layouts(cls):
        from vllm.platforms import current_platform

        return (compat.kv_layout(current_platform.device_type),)

    @classmethod
    def supports_sink(cls) -> bool:
        return True

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_non_causal(cls) -> bool:
        # non-causal *decoder* groups (attention_config.use_non_causal, dynamic causal masks) are not
        # translated yet: declare it, so vLLM refuses at start-up instead of running them causally.
        # Encoder and encoder-only layers are bidirectional through their attention type.
        return False

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type in (
            AttentionType.DECODER,
            AttentionType.ENCODER,
            AttentionType.ENCODER_ONLY,
            AttentionType.ENCODER_DECODER,
        )

    @classmethod
    def is_mla(cls) -> bool:
        return False

    @classmethod
    def supports_batch_invariance(cls) -> bool:
        # VLLM_BATCH_INVARIANT=1: layers are planned batch-invariant (providers that cannot be are refused)
        return True


@dataclasses.dataclass
class XpuAttnMetadata:
    """One step's plan (shared by the layers of a KV-cache group) plus what the KV write needs."""

    plan: StepPlan
    slot_mapping: torch.Tensor


class XpuAttnMetadataBuilder(AttentionMetadataBuilder[XpuAttnMetadata]):
    """CommonAttentionMetadata -> StepPlan, once per step and KV-cache group.

    FULL CUDA graphs: vLLM replays a graph with the tensors its capture-time metadata referenced, so
    every tensor the plan holds is either a view of the runner's persistent buffers (query_start_loc,
    seq_lens, block_table: passed through, as vLLM's Triton builder does) or a buffer of this builder,
    allocated here at start-up and written in place per step (anything that needs a conversion).
    Padded requests (query length 0, seq_len 0, block row 0) and padded tokens after
    ``query_start_loc[-1]`` (slot -1) are skipped by every kernel, so they never touch real rows.
    """

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        # uniform batches (decode, and spec-decode verify with 1 + k queries each) are planned with the
        # capture's host bounds and replayed on any lengths up to them; mixed prefill batches are not
        # (their grid depends on max_query_len). Cross-attention: vLLM does not capture encoder-decoders.
        if isinstance(kv_cache_spec, CrossAttentionSpec):
            return AttentionCGSupport.NEVER
        why = graphs.blockers(GRAPH_GROUP)
        if why:  # a layer's provider cannot be captured: vLLM then runs attention eagerly (piecewise)
            logger.warning("vllm-xpu-attn: no FULL graphs: %s", "; ".join(why))
            return AttentionCGSupport.NEVER
        return cls._cudagraph_support

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.page_size = kv_cache_spec.block_size
        self.is_cross = isinstance(kv_cache_spec, CrossAttentionSpec)
        # layers whose attention type already makes them bidirectional
        self.non_causal_ok = self.is_cross or isinstance(kv_cache_spec, EncoderOnlyAttentionSpec)
        max_reqs = compat.max_graph_requests(vllm_config)
        i32 = dict(dtype=torch.int32, device=device)
        # persistent int32 buffers for what needs converting (the runner's are int32 already: then unused)
        self._buffers = {
            "seq_lens": torch.zeros(max_reqs, **i32),
            "cu_seqlens_q": torch.zeros(max_reqs + 1, **i32),
            "encoder_lens": torch.zeros(max_reqs, **i32),
        }
        # XPU_ATTN_LOG_LEVEL=DEBUG: one line per planned step (which group, query lengths, spec rows)
        self._trace = logger.isEnabledFor(logging.DEBUG)
        spec = getattr(vllm_config, "speculative_config", None)
        self._spec_k = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
        self._group = layer_names[0] if layer_names else "?"
        self._role = _group_role(vllm_config, layer_names) if spec is not None else "target"

    def _persistent(self, name: str, t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """``t`` as an int32 tensor whose address is the same every step (graph-safe). No host sync."""
        if t is None or t.dtype == torch.int32:
            return t  # a view of the runner's persistent buffer: pass it through
        buf = self._buffers[name]
        n = t.shape[0]
        if n > buf.shape[0]:
            raise ValueError(
                f"vllm-xpu-attn: {n} entries of {name} exceed the {buf.shape[0]} sized at start-up "
                "(scheduler_config.max_num_seqs)"
            )
        buf[:n].copy_(t, non_blocking=True)
        buf[n:].zero_()
        return buf[:n]

    def build(
        self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata, fast_build: bool = False
    ) -> XpuAttnMetadata:
        cam = common_attn_metadata
        causal = cam.causal
        if isinstance(causal, torch.Tensor) or (causal is False and not self.non_causal_ok):
            raise NotImplementedError(
                "vllm-xpu-attn: non-causal or per-request causal decoder attention is not supported"
            )
        if self._trace:
            self._log_step(cam)
        return XpuAttnMetadata(plan=self.plan(cam), slot_mapping=cam.slot_mapping)

    def _log_step(self, cam: CommonAttentionMetadata) -> None:
        """DEBUG only: the step this builder plans, from vLLM's host copies (no device reads).

        ``role``: ``target``, or ``draft`` for an EAGLE/MTP drafter's layers (numbered after the target's).
        ``spec_rows``: target rows with 2..1+k queries that are not prefilling: speculative-decoding
        verify rows (the last sampled token + its drafts). The drafter's metadata carries no
        ``is_prefilling`` (``prefilling=None``): its rows are the first draft pass over the verified
        tokens (several queries) and then one query per request per further draft token.
        ``local``: the chunk size of a chunked-local (Llama-4 iRoPE) group, else 0: vLLM hands such a group's
        builder its chunk-split virtual batch (a row crossing a chunk boundary arrives as two rows,
        without ``is_prefilling``: the same step's global group tells its verify rows).
        """
        n = int(cam.num_reqs)
        qs = cam.query_start_loc_cpu[: n + 1]
        q = (qs[1:] - qs[:-1]).tolist()
        pre = cam.is_prefilling
        pre = pre[:n].tolist() if isinstance(pre, torch.Tensor) and pre.device.type == "cpu" else None
        spec_rows = sum(1 for i, m in enumerate(q) if 1 < m <= 1 + self._spec_k and pre is not None and not pre[i])
        local = int(getattr(self.kv_cache_spec, "attention_chunk_size", None) or 0)
        logger.debug(
            "vllm-xpu-attn: step role=%s group=%s reqs=%d tokens=%d max_query=%d query_lens=%s "
            "prefilling=%s spec_k=%d spec_rows=%d local=%d",
            self._role,
            self._group,
            n,
            int(cam.num_actual_tokens),
            int(cam.max_query_len),
            q,
            None if pre is None else sum(pre),
            self._spec_k,
            spec_rows,
            local,
        )

    def plan(self, cam: CommonAttentionMetadata) -> StepPlan:
        """vLLM's per-step metadata -> core StepInputs -> core.plan_step. No host sync: vLLM gives host maxima.

        vLLM runs prefill, extend, decode and spec-decode verify rows in one causal call, each row by its
        own lengths (MIXED); a step whose rows all have one query is DECODE.
        """
        mode = Mode.DECODE if cam.max_query_len <= 1 else Mode.MIXED
        inputs = StepInputs(
            mode=mode,
            seq_lens=self._persistent("seq_lens", cam.seq_lens),
            max_seqlen_k=int(cam.max_seq_len),
            num_tokens=int(cam.num_actual_tokens),
            page_size=self.page_size,
            cu_seqlens_q=self._persistent("cu_seqlens_q", cam.query_start_loc),
            max_seqlen_q=int(cam.max_query_len),
        )
        if self.is_cross:  # this group's table holds the encoder's pages; its keys are the encoder's tokens
            if cam.encoder_seq_lens is None:
                raise ValueError("vllm-xpu-attn: cross-attention step without encoder_seq_lens")
            inputs.encoder_lens = self._persistent("encoder_lens", cam.encoder_seq_lens)
            inputs.max_encoder_len = _max_encoder_len(cam)
            inputs.encoder_page_table = cam.block_table_tensor
        else:
            inputs.page_table = cam.block_table_tensor
        return plan_step(inputs)


def _max_encoder_len(cam: CommonAttentionMetadata) -> int:
    """The host bound on every row's encoder (key) length of a cross-attention step, never below any row's.

    Not ``encoder_seq_lens_cpu`` alone: vLLM's cross-attention builder zeroes it for rows whose cross cache is
    already filled (so that they write no slots), which in a pure-decode step is every row
    (model_executor/layers/attention/cross_attention.py:105-111, 0.32 and 0.33); it sets ``max_seq_len`` to the
    encoder maximum before that (line 90-91) and keeps the unzeroed lengths in ``seq_lens_cpu_upper_bound``."""
    bounds = [int(cam.max_seq_len)]
    for host in (cam.encoder_seq_lens_cpu, getattr(cam, "seq_lens_cpu_upper_bound", None)):
        if host is not None and len(host):
            bounds.append(int(host.max()))
    return max(bounds)


def _group_role(vllm_config, layer_names) -> str:
    """'draft' when this KV-cache group's layers are a drafter's: vLLM numbers them after the target's."""
    import re

    try:
        n_target = vllm_config.model_config.get_num_layers(vllm_config.parallel_config)
    except Exception:  # a model config without layer counts: no drafter to tell apart
        return "target"
    idx = [re.search(r"layers\.(\d+)\.", name) for name in layer_names or ()]
    idx = [int(m.group(1)) for m in idx if m]
    return "draft" if idx and min(idx) >= n_target else "target"


_KINDS = {
    AttentionType.DECODER: AttentionKind.DECODER,
    AttentionType.ENCODER: AttentionKind.ENCODER,
    AttentionType.ENCODER_ONLY: AttentionKind.ENCODER_ONLY,
    AttentionType.ENCODER_DECODER: AttentionKind.CROSS,
}


class XpuAttnImpl(AttentionImpl[XpuAttnMetadata]):
    # whether forward writes the step's new K/V first (its backend's forward_includes_kv_cache_update)
    writes_kv_in_forward: ClassVar[bool] = False

    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: Optional[int] = None,
        alibi_slopes: Optional[list[float]] = None,
        sliding_window: Optional[int] = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: Optional[float] = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: Optional[str] = None,
        sinks: Optional[torch.Tensor] = None,
    ) -> None:
        from vllm.platforms import current_platform

        if attn_type not in _KINDS:
            raise NotImplementedError(f"vllm-xpu-attn: attention type {attn_type!r} is not supported")
        if kv_cache_dtype not in compat.KV_CACHE_DTYPES:
            raise ValueError(
                f"vllm-xpu-attn: KV cache dtype {kv_cache_dtype!r} unsupported; "
                f"use one of {sorted(compat.KV_CACHE_DTYPES)}"
            )
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.attn_type = attn_type
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = sinks
        if sinks is not None and sinks.shape != (num_heads,):
            raise ValueError(f"vllm-xpu-attn: sinks must have shape [{num_heads}], got {list(sinks.shape)}")
        # vLLM's sliding_window counts the query itself; FlashAttention's left window does not.
        self.sliding_window = sliding_window
        model_dtype = compat.get_current_vllm_config().model_config.dtype
        kv_dtype = compat.KV_CACHE_DTYPES[kv_cache_dtype] or model_dtype
        # per call: whether the layer's KV scales are read at all (only an FP8 cache has descales) and whether the
        # layer writes no cache (encoder self-attention reads q/k/v directly), fixed here
        self._fp8 = is_fp8(kv_dtype)
        self._encoder = _KINDS[attn_type] in (AttentionKind.ENCODER, AttentionKind.ENCODER_ONLY)
        self.spec = LayerSpec(
            num_q_heads=num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=head_size,
            scale=self.scale,
            kind=_KINDS[attn_type],
            window_left=(sliding_window - 1) if sliding_window else -1,
            softcap=float(logits_soft_cap or 0.0),
            has_sinks=sinks is not None,
            alibi_slopes=tuple(float(a) for a in alibi_slopes) if alibi_slopes is not None else None,
            dtype=model_dtype,
            kv_dtype=kv_dtype,
            batch_invariant=compat.vllm_batch_invariant() or batch_invariant_requested(),
            kv_layout=compat.page_layout(current_platform.device_type),
        )
        page_size = compat.get_current_vllm_config().cache_config.block_size
        # Providers are chosen now, so an unservable layer fails at start-up with every reason.
        self.runner = LayerRunner(self.spec, current_platform.device_type, page_size)
        graphs.record(GRAPH_GROUP, self.runner)  # the builders (made after the layers) then may declare NEVER
        tp_rank, tp_size = compat.tp_rank_and_size()  # per-rank head shards are visible in the log (TP tests)
        logger.info(
            "vllm-xpu-attn: layer Hq=%d Hkv=%d D=%d window=%s kind=%s tp_rank=%d/%d -> providers %s",
            num_heads,
            self.num_kv_heads,
            head_size,
            self.spec.window,
            self.spec.kind.value,
            tp_rank,
            tp_size,
            self.runner.providers_used(),
        )

    def _caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(k_cache, v_cache) views of the layer's cache, made once per cache tensor: vLLM hands the same tensor
        to every step's do_kv_cache_update and forward (the split costs ~10 us of Python a call on the CPU)."""
        split = getattr(self, "_split", None)
        if split is None or split[0] is not kv_cache:
            split = self._split = (
                kv_cache,
                *compat.split_kv_cache(kv_cache, self.head_size, self.spec.kv_dtype, self.spec.kv_layout),
            )
        return split[1], split[2]

    def _descales(self, layer) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The FP8 cache's descales from the layer's KV scales; (None, None) for a 16/32-bit cache (fp8_descale's
        answer), without reading the scales: each is an nn.Module buffer lookup (~1 us a call)."""
        if not self._fp8:
            return None, None
        return fp8_descale(self.spec.kv_dtype, layer._k_scale), fp8_descale(self.spec.kv_dtype, layer._v_scale)

    def forward(
        self,
        layer,
        query,
        key,
        value,
        kv_cache,
        attn_metadata: Optional[XpuAttnMetadata],
        output,
        output_scale=None,
        output_block_scale=None,
    ):
        """query [T, Hq, D], key/value [T, Hkv, D] (None when KV is shared), output [T, Hq, D]."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("vllm-xpu-attn: fused output quantization is not supported")
        if attn_metadata is None:  # profiling / warm-up run
            return output
        # bound at the layer's first run: after weight loading, which updates these tensors in place. The KV scales
        # are only an FP8 cache's descales (ignored otherwise): not read for a 16/32-bit cache
        if self._fp8:
            self.runner.ensure_bound(layer, sinks=self.sinks, k_scale=layer._k_scale, v_scale=layer._v_scale)
        else:
            self.runner.ensure_bound(layer, sinks=self.sinks)
        # vLLM passes output as [T, Hq, D] already (Attention.forward views it): a view is ~3 us a layer on the CPU
        out = output if output.dim() == 3 else output.view(-1, self.num_heads, self.head_size)
        plan = attn_metadata.plan
        if self._encoder:
            n = plan.num_tokens
            self.runner.forward_varlen(
                query[:n], key[:n], value[:n], plan.main.cu_seqlens_q, plan.main.max_seqlen_q, out[:n]
            )
            return output
        k_cache, v_cache = self._caches(kv_cache)
        # key/value are None on a cross-attention decode step (the encoder's K/V are cached already)
        if self.writes_kv_in_forward and key is not None:
            self._write_new_kv(layer, key, value, k_cache, v_cache, attn_metadata.slot_mapping)
        self.runner.forward(plan, query, k_cache, v_cache, out)
        return output

    def set_interleaved_v_cache(self):
        from .mla import _no_interleaved_v

        return _no_interleaved_v(self)

    def do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping) -> None:
        if self._encoder:
            return  # encoder self-attention reads q/k/v directly
        self._write_new_kv(layer, key, value, *self._caches(kv_cache), slot_mapping)

    def _write_new_kv(self, layer, key, value, k_cache, v_cache, slot_mapping) -> None:
        """The step's new key/value [T, Hkv, D] into the layer's cache at slot_mapping [T] (vLLM's separate
        ``do_kv_cache_update`` or, on the CPU, ``forward`` itself): one write, one KV-sharing rule for both."""
        if self.kv_sharing_target_layer_name is not None:
            return  # another layer wrote this KV
        k_scale, v_scale = self._descales(layer)
        self.runner.write_kv(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)


class XpuAttnCpuBackend(XpuAttnBackend):
    """vllm-xpu-attn for vLLM on the CPU: the same backend, with the KV write inside ``forward``.

    vLLM calls attention on the CPU as opaque custom ops (``CpuPlatform.opaque_attention_op()``), and a separate
    write is a second op per layer (``vllm::unified_kv_cache_update``), which nothing on the CPU amortises (no
    graphs): without it, batch-1 decode went from parity to 0.83x CPU_ATTN's time (docs/cpu/profile.md, ninth
    pass). Accelerators keep the separate write (False): it is captured in graph pieces and vLLM's compile passes
    may fuse it with RoPE.
    """

    forward_includes_kv_cache_update: bool = True

    @staticmethod
    def get_impl_cls() -> type["XpuAttnCpuImpl"]:
        return XpuAttnCpuImpl


class XpuAttnCpuImpl(XpuAttnImpl):
    """XpuAttnImpl writing the step's new K/V in ``forward`` (XpuAttnCpuBackend): vLLM then makes no
    ``do_kv_cache_update`` call; a cross-attention layer's slots are its metadata's (vLLM's cross builder)."""

    writes_kv_in_forward: ClassVar[bool] = True
