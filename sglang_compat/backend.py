"""SGLang attention backend running on the vllm-xpu-attn core.

Translation only: ForwardBatch + the model runner's pools -> core StepPlan (once per step:
``init_forward_metadata`` eagerly, ``init_forward_metadata_in_graph`` under graphs);
RadixAttention -> core LayerSpec (once per layer); the pool's [tokens, H, D] buffers -> the
core's [pages, page_size, H, D] views. KV writes go through the pool's own ``set_kv_buffer``
(it owns FP8 storage and SWA sub-pools).

MLA models (DeepSeek-V2/V3) run through ``mla.SGLangMLA`` (sglang_compat/mla.py).
"""

from __future__ import annotations

import logging
from typing import Optional

import torch

from vllm_xpu_attn import core
from vllm_xpu_attn.core import AttentionKind, LayerRunner, LayerSpec, Mode, StepPlan, graphs
from vllm_xpu_attn.kernels.api import batch_invariant_requested
from vllm_xpu_attn.log import setup_logging

from .compat import (
    BIDIRECTIONAL_TYPES,
    AttentionBackend,
    ForwardBatch,
    KVWriteLoc,
    layer_in_swa_pool,
    spec_params,
    tp_rank_and_size,
    uses_sliding_window_pool,
)
from .mla import SGLangMLA

logger = logging.getLogger("vllm_xpu_attn")


class XpuAttnSGLangBackend(AttentionBackend):
    """``--attention-backend xpu_attn`` (or ``intel_xpu`` with XPU_ATTN_AS_INTEL_XPU=1)."""

    def __init__(
        self,
        model_runner,
        skip_prefill: bool = False,
        speculative_step_id: int = 0,
        topk: int = 0,
        speculative_num_steps: int = 0,
    ):
        super().__init__()
        setup_logging()
        mc = model_runner.model_config
        self.device = torch.device(model_runner.device)
        self.page_size = int(model_runner.page_size)
        self.req_to_token_pool = model_runner.req_to_token_pool
        self.token_to_kv_pool = model_runner.token_to_kv_pool
        self.use_swa_pool = uses_sliding_window_pool(self.token_to_kv_pool)
        self.attention_chunk_size = getattr(model_runner, "attention_chunk_size", None)
        self.is_encoder_decoder = bool(getattr(mc, "is_encoder_decoder", False))
        self.dtype = model_runner.dtype
        self.kv_dtype = model_runner.kv_cache_dtype
        self.tp_rank, self.tp_size = tp_rank_and_size()
        sa = model_runner.server_args
        # as SGLang resolved them (NGRAM's tree breadth, default draft counts), not only what the user passed
        self.topk, self.num_draft = spec_params(model_runner)
        # SGLang's --enable-deterministic-inference (or XPU_ATTN_BATCH_INVARIANT=1): batch-invariant kernels
        self.batch_invariant = bool(getattr(sa, "enable_deterministic_inference", False)) or batch_invariant_requested()
        self.speculative_step_id = speculative_step_id
        self.speculative_num_steps = speculative_num_steps
        # XPU_ATTN_LOG_LEVEL=DEBUG: one line per planned step (which model runner, SGLang's mode, our plan)
        self._trace = logger.isEnabledFor(logging.DEBUG)
        self._role = "draft" if getattr(model_runner, "is_draft_worker", False) else "target"
        self.spec_shape = core.SpecDecodeShape(
            topk=max(self.topk, 1),
            num_draft=self.num_draft,
            num_steps=speculative_num_steps,
            step_id=speculative_step_id,
        )
        core.check_step_config(self.page_size, self.attention_chunk_size)
        self.forward_metadata: Optional[StepPlan] = None
        self.swa_out_cache_loc: Optional[torch.Tensor] = None
        self._step_has_prefix = False  # this step has cached-prefix rows (MLA: the MHA layer refuses them)
        self.mla: Optional[SGLangMLA] = None
        if getattr(model_runner, "use_mla_backend", False):
            unsupported = [
                what
                for what, on in (
                    ("a hybrid SWA pool", self.use_swa_pool),
                    ("cross-attention", self.is_encoder_decoder),
                    ("chunked local attention", self.attention_chunk_size is not None),
                )
                if on
            ]
            self.mla = SGLangMLA(
                model_runner,
                self.token_to_kv_pool,
                dtype=self.dtype,
                kv_dtype=self.kv_dtype,
                batch_invariant=self.batch_invariant,
                unsupported=", ".join(unsupported) or None,
            )
        # keyed (layer_id, has_sinks); MLA layers (layer_id, has_sinks, role 'mla'/'mha'): an MLA layer's two
        # RadixAttentions share its layer id
        self._runners: dict[tuple, LayerRunner] = {}
        self._graph_max_k: Optional[int] = None  # set by init_cuda_graph_state
        self._declared_sinks: dict[int, bool] = {}  # layer id -> has sinks, found at start-up
        self._validate_layers(model_runner)

    # ---- configuration ------------------------------------------------------------
    def _validate_layers(self, model_runner) -> None:
        """Choose providers for every attention layer now: unservable layers fail at start-up."""
        from sglang.srt.layers.radix_attention import RadixAttention

        model = getattr(model_runner, "model", None)
        if model is None:
            return
        # SGLang passes sinks at forward time, but keeps them on the model's attention module
        # (e.g. GptOssAttention.sinks beside its RadixAttention): find them now, so a provider
        # that cannot serve sinks is refused at start-up, not at the first request.
        with_sinks = {
            id(child)
            for mod in model.modules()
            if isinstance(getattr(mod, "sinks", None), torch.Tensor)
            for child in mod.children()
            if isinstance(child, RadixAttention)
        }
        for mod in model.modules():
            if isinstance(mod, RadixAttention):
                has_sinks = id(mod) in with_sinks or isinstance(getattr(mod, "sinks", None), torch.Tensor)
                self._declared_sinks[mod.layer_id] = has_sinks
                if self.mla is not None:
                    self.mla.check_kv_scale(mod)
                self._runner(mod, has_sinks=has_sinks)

    def _spec(self, layer, has_sinks: bool) -> LayerSpec:
        if layer.is_cross_attention:
            kind = AttentionKind.CROSS
        elif layer.attn_type in BIDIRECTIONAL_TYPES:
            kind = AttentionKind.ENCODER_ONLY  # bidirectional over the paged cache
        else:
            kind = AttentionKind.DECODER
        window = (
            layer.sliding_window_size
            if (
                layer.sliding_window_size is not None
                and layer.sliding_window_size > -1
                and kind is not AttentionKind.CROSS
            )
            else -1
        )
        return LayerSpec(
            num_q_heads=layer.tp_q_head_num,
            num_kv_heads=layer.tp_k_head_num,
            head_dim=layer.qk_head_dim,
            v_head_dim=layer.v_head_dim,
            scale=float(layer.scaling),
            kind=kind,
            window_left=window,  # SGLang's sliding_window_size already excludes the query itself
            softcap=float(layer.logit_cap or 0.0),
            has_sinks=has_sinks,
            local_attention=bool(getattr(layer, "use_irope", False)) and self.attention_chunk_size is not None,
            uses_swa_pool=layer_in_swa_pool(self.token_to_kv_pool, layer.layer_id),
            dtype=self.dtype,
            kv_dtype=self.kv_dtype,
            batch_invariant=self.batch_invariant,
        )

    def _runner(self, layer, has_sinks: bool) -> LayerRunner:
        role = self.mla.role(layer) if self.mla is not None else ""
        key = (layer.layer_id, has_sinks, role) if role else (layer.layer_id, has_sinks)
        r = self._runners.get(key)
        if r is None:
            spec = self.mla.spec(layer, has_sinks) if role else self._spec(layer, has_sinks)
            # an encoder-decoder's self-attention reads its keys token by token (the decoder's tokens follow the
            # encoder's mid-page: core.plan_step plans them at page size 1), so its providers are chosen for that
            page = 1 if self.is_encoder_decoder and spec.kind is not AttentionKind.CROSS else self.page_size
            r = LayerRunner(spec, self.device, page, with_spec_decode=self.topk > 1)
            self._runners[key] = r
            if len(self._runners) == 1:
                logger.info("xpu_attn (SGLang): providers %s, page size %d", r.providers_used(), self.page_size)
            # per-rank head shards are visible in the log (TP tests)
            logger.info(
                "xpu_attn (SGLang): layer %d Hq=%d Hkv=%d D=%d tp_rank=%d/%d",
                layer.layer_id,
                spec.num_q_heads,
                spec.num_kv_heads,
                spec.head_dim,
                self.tp_rank,
                self.tp_size,
            )
        return r

    # ---- per-step planning --------------------------------------------------------
    # Eager steps plan in init_forward_metadata. Under graphs (decode, verify, draft decode) the
    # plan is built *inside* the captured region from the runner's static buffers with static
    # host bounds, so every replay rebuilds it on device from that replay's inputs: no copies
    # into arenas, no host reads (tests/sglang/test_sglang_graphs.py runs it on `meta` tensors).
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        self._set_plan(forward_batch, static=False)

    def init_forward_metadata_out_graph(self, forward_batch: ForwardBatch, in_capture: bool = False):
        if not self._plans_in_graph(forward_batch):
            self._set_plan(forward_batch, static=False)  # e.g. a prefill runner's padded view: eager plan

    def init_forward_metadata_in_graph(self, forward_batch: ForwardBatch):
        if self._plans_in_graph(forward_batch):
            self._set_plan(forward_batch, static=True)

    def _plans_in_graph(self, fb: ForwardBatch) -> bool:
        mode = fb.forward_mode
        return self._graph_max_k is not None and (mode.is_decode_or_idle() or mode.is_target_verify())

    def _set_plan(self, fb: ForwardBatch, static: bool) -> None:
        self.forward_metadata = self.plan(fb, static_max_k=self._graph_max_k if static else None)
        self._step_has_prefix = self.forward_metadata.mode is not Mode.PREFILL
        loc = fb.out_cache_loc
        self.swa_out_cache_loc = (
            self.token_to_kv_pool.translate_loc_from_full_to_swa(loc) if self.use_swa_pool and loc is not None else None
        )

    def plan(self, fb: ForwardBatch, static_max_k: Optional[int] = None) -> StepPlan:
        """ForwardBatch -> core StepInputs -> core.plan_step, without device-to-host syncs.

        Host maxima come from the *_cpu fields; with ``static_max_k`` (graph capture) they are
        that fixed bound instead, so every tensor's shape depends on the batch size alone.
        """
        mode = fb.forward_mode
        bs = fb.batch_size
        if static_max_k is not None:
            max_k = static_max_k
        elif bs:
            max_k = int(fb.seq_lens_cpu.max())
        else:
            max_k = 0
        inputs = core.StepInputs(
            mode=Mode.DECODE,
            seq_lens=fb.seq_lens,
            max_seqlen_k=max_k,
            num_tokens=bs,
            page_size=self.page_size,
            # the pool's [rows, max_context] token slots, indexed by each request's row (gathered with the pages)
            token_table=self.req_to_token_pool.req_to_token,
            token_rows=fb.req_pool_indices,
            swa_mapping=self.token_to_kv_pool.translate_loc_from_full_to_swa if self.use_swa_pool else None,
            attention_chunk_size=self.attention_chunk_size,
            spec=self.spec_shape,
        )
        if fb.encoder_lens is not None:
            inputs.encoder_lens = fb.encoder_lens
            enc_cpu = list(fb.encoder_lens_cpu) if fb.encoder_lens_cpu is not None else fb.encoder_lens.tolist()
            inputs.max_encoder_len = max(enc_cpu + [0])
        if mode.is_decode_or_idle():
            if fb.spec_info is not None:  # an EAGLE draft decode step
                inputs.mode = Mode.DRAFT_DECODE
                inputs.draft_slots = fb.out_cache_loc
        elif mode.is_target_verify():
            inputs.mode = Mode.TARGET_VERIFY
            inputs.custom_mask = getattr(fb.spec_info, "custom_mask", None)
        else:  # extend / mixed / draft extend: new tokens on (possibly cached) prefixes
            inputs.query_lens = fb.extend_seq_lens
            inputs.max_seqlen_q = max(fb.extend_seq_lens_cpu) if bs else 0
            inputs.num_tokens = int(
                fb.extend_num_tokens if fb.extend_num_tokens is not None else sum(fb.extend_seq_lens_cpu)
            )
            inputs.mode = (
                Mode.MIXED if mode.is_mixed() else Mode.EXTEND if any(fb.extend_prefix_lens_cpu or []) else Mode.PREFILL
            )
        plan = core.plan_step(inputs)
        if self._trace:
            logger.debug(
                "xpu_attn (SGLang): step role=%s forward_mode=%s plan=%s bs=%d tokens=%d max_q=%d topk=%d "
                "num_draft=%d step_id=%d tree_mask=%s",
                self._role,
                mode.name,
                plan.mode.value,
                bs,
                plan.num_tokens,
                plan.main.max_seqlen_q,
                self.spec_shape.topk,
                self.spec_shape.num_draft,
                self.speculative_step_id,
                inputs.custom_mask is not None,
            )
        return plan

    # ---- per-layer run ------------------------------------------------------------
    def _forward(
        self,
        q,
        k,
        v,
        layer,
        fb: ForwardBatch,
        save_kv_cache: bool,
        sinks: Optional[torch.Tensor],
        q_rope=None,
        k_rope=None,
    ):
        if self.mla is not None:
            runner = self._runner(layer, False)
            if self.mla.role(layer) == "mha":
                return self.mla.forward_mha(
                    runner,
                    self.forward_metadata,
                    self._step_has_prefix,
                    q,
                    k,
                    v,
                    layer,
                    fb,
                    save_kv_cache,
                    sinks,
                    q_rope,
                    k_rope,
                )
            return self.mla.forward_absorbed(
                runner, self.forward_metadata, self.page_size, q, k, layer, fb, save_kv_cache, sinks, q_rope, k_rope
            )
        if q_rope is not None or k_rope is not None:
            raise ValueError("xpu_attn: q_rope/k_rope (split MLA inputs) given to a non-MLA layer")
        if k is None and v is None:
            pass  # cross-layer KV sharing: this layer reads another layer's cache; nothing to write
        elif k is None or v is None:
            raise ValueError("xpu_attn: k and v must both be given or both be None (cross-layer KV sharing)")
        elif save_kv_cache:
            loc = fb.encoder_out_cache_loc if layer.is_cross_attention else fb.out_cache_loc
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc(loc, self.swa_out_cache_loc), k, v, layer.k_scale, layer.v_scale
            )
        declared = self._declared_sinks.get(layer.layer_id)
        if declared is not None and declared != (sinks is not None):
            raise ValueError(
                f"xpu_attn: layer {layer.layer_id} was configured at start-up "
                f"{'with' if declared else 'without'} attention sinks but runs "
                f"{'with' if sinks is not None else 'without'} them"
            )
        runner = self._runner(layer, sinks is not None)
        hq, d, dv = layer.tp_q_head_num, layer.qk_head_dim, layer.v_head_dim
        k_cache, v_cache = self.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        k_cache = k_cache.view(-1, self.page_size, layer.tp_k_head_num, d)
        v_cache = v_cache.view(-1, self.page_size, layer.tp_v_head_num, dv)
        # SGLang passes the same tensors every call: bound once
        runner.ensure_bound(layer, sinks=sinks, k_scale=layer.k_scale, v_scale=layer.v_scale)
        q3 = q.reshape(-1, hq, d)
        if q3.dtype != self.dtype:
            q3 = q3.to(
                self.dtype
            )  # e.g. SGLang's Llama-4 casts q/k to bf16 off CUDA; the layer runs in the model dtype
        out = q3.new_empty(q3.shape[0], hq * dv)
        runner.forward(self.forward_metadata, q3, k_cache, v_cache, out.view(-1, hq, dv))
        return out

    def forward_extend(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, sinks=None, **kwargs
    ):
        return self._forward(q, k, v, layer, forward_batch, save_kv_cache, sinks, q_rope, k_rope)

    def forward_decode(
        self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None, sinks=None, **kwargs
    ):
        return self._forward(q, k, v, layer, forward_batch, save_kv_cache, sinks, q_rope, k_rope)

    # ---- graphs -------------------------------------------------------------------
    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        """Graph capture for decode, target verify (top-k 1) and draft decode (top-k 1).

        Nothing to allocate: the plan is rebuilt inside the graph (see _set_plan), with the
        key bound fixed to the token table's width minus the speculative tokens that can follow.
        """
        if self.topk > 1:
            raise ValueError(
                "xpu_attn: graph capture with speculative top-k > 1 (EAGLE trees) is not supported: its expand "
                "plan depends on the tree mask's layout; run with --disable-cuda-graph or --speculative-eagle-topk 1"
            )
        if self.is_encoder_decoder:
            raise ValueError(
                "xpu_attn: graph capture for encoder-decoder (cross-attention) models is not supported; "
                "run with --disable-cuda-graph"
            )
        # an MLA layer's un-absorbed MHA prefill never runs in a graph: SGLang picks the absorbed form for decode,
        # verify and under prefill graph capture, and SGLangMLA.forward_mha refuses every mode but a first prefill
        roles = {key: key[2] if len(key) > 2 else "" for key in self._runners}
        unsafe = sorted(
            set(graphs.capture_blockers(r for key, r in self._runners.items() if not roles[key]))
            | set(
                graphs.capture_blockers(
                    (r for key, r in self._runners.items() if roles[key] not in ("", "mha")), mha_prefill=False
                )
            )
        )
        if unsafe:
            raise ValueError(
                "xpu_attn: graph capture needs kernel providers that launch without host syncs; "
                f"{'; '.join(unsafe)}. Run with --disable-cuda-graph"
            )
        width = int(self.req_to_token_pool.req_to_token.shape[1])
        extra = (
            max(self.num_draft, self.speculative_num_steps + 1) if (self.num_draft or self.speculative_num_steps) else 0
        )
        if width - extra < 1:
            raise ValueError(f"xpu_attn: token table width {width} leaves no room for {extra} speculative tokens")
        self._graph_max_k = width - extra
        logger.info(
            "xpu_attn (SGLang): graph capture on, key bound %d (token table width %d), max batch %d",
            self._graph_max_k,
            width,
            max_bs,
        )

    def get_cuda_graph_seq_len_fill_value(self):
        return 1  # padded decode rows see one key (page 0), never zero-length softmax rows


class XpuAttnMultiStepDraftBackend:
    """EAGLE's draft decode steps on this backend: one ``XpuAttnSGLangBackend`` per step
    (``speculative_step_id`` 0 .. steps-2), planned together, as SGLang's own multi-step backends."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.attn_backends = [
            XpuAttnSGLangBackend(
                model_runner,
                skip_prefill=True,
                speculative_step_id=i,
                topk=topk,
                speculative_num_steps=speculative_num_steps,
            )
            for i in range(speculative_num_steps - 1)
        ]

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        for b in self.attn_backends:
            b.init_forward_metadata(forward_batch)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        for b in self.attn_backends:
            b.init_cuda_graph_state(max_bs, max_num_tokens)

    def init_forward_metadata_out_graph(self, forward_batch: ForwardBatch, in_capture: bool = False):
        for b in self.attn_backends:
            b.init_forward_metadata_out_graph(forward_batch, in_capture=in_capture)

    def init_forward_metadata_in_graph(self, forward_batch: ForwardBatch):
        for b in self.attn_backends:
            b.init_forward_metadata_in_graph(forward_batch)
