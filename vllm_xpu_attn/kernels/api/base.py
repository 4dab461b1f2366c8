"""What a kernel provider is: capability declarations plus the call contract.

Modelled on xFormers' fmha operators: each provider states statically what it supports
and answers ``not_supported_reasons(request)``; the registry picks the first provider
with no reasons and explains every refusal when none fits.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import torch

from ... import env
from .checks import check_paged_layer, check_paged_step
from .dtypes import FLOAT_DTYPES, dtype_name, is_fp8
from .guard import FLAGS
from .types import NO_LAYER_TENSORS, Feature, KernelRequest, KVLayout, LayerConsts, LayerTensors, PagedStep, Phase

ENV_BATCH_INVARIANT = env.BATCH_INVARIANT


def batch_invariant_requested() -> bool:
    """``XPU_ATTN_BATCH_INVARIANT=1``: every sequence's output bitwise independent of the batch."""
    return env.on(env.BATCH_INVARIANT)


class KernelProvider:
    """Base class. Subclasses set the ClassVars and implement the four calls.

    Calls (shapes: total_q query rows of B requests; P pages of ``page`` slots):
      flash_attn_with_kvcache(q [total_q, Hq, D], k_cache/v_cache [P, page, Hkv, D], page_table
        int32 [B, max_pages], cache_seqlens int32 [B], cu_seqlens_q int32 [B+1], max_seqlen_q, ...)
        -> out [total_q, Hq, Dv] (, lse [Hq, total_q] fp32)
      flash_attn_varlen_func(q [total_q, Hq, D], k/v [total_k, Hkv, D], cu_seqlens_q, cu_seqlens_k, ...)
      merge_state(o_a [T, H, D], lse_a [H, T], o_b, lse_b, sinks [H] or None) -> (o, lse); the sink
        joins the merged softmax denominator once (cascades of sink layers)
      write_kv(k/v [T, Hkv, D], k_cache/v_cache, slot_mapping [T], k_scale, v_scale)
    """

    # methods of the first development versions, renamed: a subclass defining one would never be called
    _RENAMED: ClassVar[dict[str, str]] = {"plan_paged": "arm_paged"}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for old, new in KernelProvider._RENAMED.items():
            if old in cls.__dict__:
                raise TypeError(
                    f"{cls.__name__}.{old}: the provider method is now {new!r} (same arguments); "
                    f"rename it, or it would never be called"
                )

    name: ClassVar[str] = "base"
    description: ClassVar[str] = ""
    devices: ClassVar[frozenset[str]] = frozenset()
    dtypes: ClassVar[frozenset[torch.dtype]] = frozenset(FLOAT_DTYPES)
    kv_dtypes: ClassVar[frozenset[torch.dtype]] = frozenset(FLOAT_DTYPES)  # plus FP8 where supported
    head_dims: ClassVar[Optional[frozenset[int]]] = None  # None = any
    max_head_dim: ClassVar[Optional[int]] = None
    max_gqa_group: ClassVar[Optional[int]] = None
    features: ClassVar[frozenset[Feature]] = frozenset()
    # the cache layouts whose pages it reads in place (KVLayout); other allocations are refused at set-up
    kv_layouts: ClassVar[frozenset[KVLayout]] = frozenset({KVLayout.NHD})
    # True: its write_kv stores pages in a format only its own kernels read (e.g. K transposed per page), so one
    # layer's every phase must run on it (core.LayerRunner refuses a layer that would mix it with another)
    owns_cache_format: ClassVar[bool] = False
    # None: its per-layer run launches kernels only (no host sync, no host-made tensors), so it may be
    # captured in a CUDA/XPU graph; else why not
    graph_capture_reason: ClassVar[Optional[str]] = "not verified under graph capture"

    # ---- availability ---------------------------------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        """None when the provider can run in this process, else why not (missing library...)."""
        return None

    def version(self) -> Optional[str]:
        """The installed library's version, when the provider wraps one."""
        return None

    def capabilities(self) -> dict[str, Optional[str]]:
        """Build-dependent capabilities found at run time (probes): feature -> None (supported) or why not."""
        return {}

    def page_size_reason(self, page_size: int, phase: Phase) -> Optional[str]:
        return None if page_size >= 1 else f"page size {page_size} < 1"

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        """Provider-specific limits beyond the declarative ones."""
        return []

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        reasons: list[str] = []
        why = self.unavailable_reason()
        if why:
            reasons.append(why)
        if req.device_type not in self.devices:
            reasons.append(f"device {req.device_type!r} not in {sorted(self.devices)}")
        if req.dtype not in self.dtypes:
            reasons.append(f"dtype {dtype_name(req.dtype)} not in {sorted(dtype_name(d) for d in self.dtypes)}")
        if req.kv_dtype not in self.kv_dtypes:
            reasons.append(
                f"KV dtype {dtype_name(req.kv_dtype)} not in {sorted(dtype_name(d) for d in self.kv_dtypes)}"
            )
        if self.head_dims is not None and req.head_dim not in self.head_dims:
            reasons.append(f"head dim {req.head_dim} not in {sorted(self.head_dims)}")
        if self.max_head_dim is not None and req.head_dim > self.max_head_dim:
            reasons.append(f"head dim {req.head_dim} > {self.max_head_dim}")
        if self.max_gqa_group is not None and req.gqa_group > self.max_gqa_group:
            reasons.append(f"GQA group {req.gqa_group} > {self.max_gqa_group}")
        if req.kv_layout not in self.kv_layouts:
            reasons.append(
                f"KV cache layout {KVLayout(req.kv_layout).value} not in {sorted(x.value for x in self.kv_layouts)}"
            )
        why = self.page_size_reason(req.page_size, req.phase)
        if why:
            reasons.append(why)
        wanted = {
            "window": req.has_window,
            "softcap": req.softcap,
            "sinks": req.has_sinks,
            "alibi": req.has_alibi,
            "lse": req.return_lse,
            "non_causal": not req.causal,
            "dv": req.v_head_dim not in (None, req.head_dim),
            "batch_invariant": req.batch_invariant,
        }
        for feat, on in wanted.items():
            if on and feat not in self.features:
                reasons.append(f"no {feat.replace('_', '-')} support")
        reasons.extend(self.extra_reasons(req))
        return reasons

    # ---- the contract: plan once per step, bind once per layer, run per layer --------------
    def arm_paged(self, step: PagedStep, call: LayerConsts, **options) -> "PagedLaunch":
        """Per-step part of a paged call: validate the step's tensors once and fix the launch.

        The result's ``run(q, k_cache, v_cache, out, layer=...)`` is the per-layer part (O(1) checks, then
        the launch). Providers with launch decisions (split-K, tiles, workspace) override ``_launch``.
        """
        check_paged_step(step)
        return self._launch(step, call, **options)

    def _launch(self, step: PagedStep, call: LayerConsts, **options) -> "PagedLaunch":
        """Build the per-step launch. ``options``: provider-specific launch choices (Triton: num_splits)."""
        if options:
            raise TypeError(f"provider {self.name!r} takes no launch options, got {sorted(options)}")
        return PagedLaunch(self, step, call)

    def _run_paged(
        self,
        step: PagedStep,
        call: LayerConsts,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        layer: LayerTensors,
    ):  # pragma: no cover - abstract
        """The launch, on validated inputs. Writes out [total_q, Hq, Dv] (rows past cu_seqlens_q[-1] left
        alone) and returns it (, lse [Hq, total_q] fp32 when the call asks for it)."""
        raise NotImplementedError

    def call_request(
        self, q: torch.Tensor, k_cache: torch.Tensor, call: LayerConsts, step: PagedStep, layer: LayerTensors
    ) -> KernelRequest:
        """The KernelRequest one direct call amounts to (what ``not_supported_reasons`` judges)."""
        return KernelRequest(
            device_type=q.device.type,
            dtype=q.dtype,
            kv_dtype=k_cache.dtype,
            head_dim=call.head_dim,
            num_q_heads=call.num_q_heads,
            num_kv_heads=call.num_kv_heads,
            page_size=step.page_size,
            v_head_dim=call.v_head_dim,
            causal=call.causal,
            window=call.window,
            softcap=call.softcap,
            has_sinks=layer.sinks is not None,
            has_alibi=layer.alibi_slopes is not None,
            return_lse=call.return_lse,
            phase=Phase.DECODE if step.max_seqlen_q <= 1 else Phase.PREFILL,
            batch_invariant=call.batch_invariant,
            mla=call.mla,
            kv_layout=KVLayout.of(k_cache),
        )

    def flash_attn_with_kvcache(
        self, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, **kwargs
    ):
        """The one-call contract for direct users: the same checks as plan -> bind -> run (step, layer
        arguments, layer tensors, stride rule), then the provider's own declared capabilities (probe
        results included): a call they exclude is refused with the provider's reasons, never run.

        q [total_q, Hq, D], k_cache/v_cache [pages, page, Hkv, D|Dv], page_table int32 [B, max_pages],
        cache_seqlens int32 [B], cu_seqlens_q int32 [B+1] -> out [total_q, Hq, Dv] (written into ``out``
        when given) (, lse [Hq, total_q] fp32). ``batch_invariant`` (default: $XPU_ATTN_BATCH_INVARIANT)
        asks for outputs bitwise independent of the rest of the batch.
        """
        return self._one_call(
            q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, gate=True, **kwargs
        )

    def probe_call(self, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, **kwargs):
        """``flash_attn_with_kvcache`` without the capability gate: for a provider's own probes, which are
        how it finds those capabilities (every input check still runs)."""
        return self._one_call(
            q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, gate=False, **kwargs
        )

    def _one_call(
        self,
        q,
        k_cache,
        v_cache,
        page_table,
        cache_seqlens,
        cu_seqlens_q,
        max_seqlen_q,
        *,
        gate: bool,
        softmax_scale=None,
        causal=True,
        window_size=(-1, -1),
        softcap=0.0,
        sinks=None,
        alibi_slopes=None,
        k_descale=None,
        v_descale=None,
        return_softmax_lse=False,
        out=None,
        batch_invariant: Optional[bool] = None,
        **launch_options,
    ):
        for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if q.dim() != 3 or k_cache.dim() != 4 or v_cache.dim() != 4:
            raise ValueError(
                f"q must be [total_q, Hq, D] and k_cache/v_cache [num_pages, page_size, Hkv, D] (NHD "
                f"pages), got {list(q.shape)}, {list(k_cache.shape)} and {list(v_cache.shape)}"
            )
        page = k_cache.shape[1]
        width = page_table.shape[1] if isinstance(page_table, torch.Tensor) and page_table.dim() == 2 else 0
        step = PagedStep(cu_seqlens_q, cache_seqlens, page_table, int(max_seqlen_q), width * page, page)
        check_paged_step(step)
        call = LayerConsts.make(
            q.shape[1],
            k_cache.shape[2],
            q.shape[2],
            v_cache.shape[3],
            softmax_scale=softmax_scale,
            causal=causal,
            window=window_size,
            softcap=softcap,
            return_lse=return_softmax_lse,
            batch_invariant=batch_invariant_requested() if batch_invariant is None else bool(batch_invariant),
        )
        check_paged_layer(step, call, q, k_cache, v_cache, out)
        layer = LayerTensors.make(
            call,
            device=q.device,
            kv_dtype=k_cache.dtype,
            sinks=sinks,
            alibi_slopes=alibi_slopes,
            k_descale=k_descale,
            v_descale=v_descale,
            batch=step.batch_size,
        )
        reasons = self.not_supported_reasons(self.call_request(q, k_cache, call, step, layer)) if gate else []
        if reasons:
            raise ValueError(f"provider {self.name!r} cannot run this call: " + "; ".join(reasons))
        if out is None:
            out = torch.empty(q.shape[0], call.num_q_heads, call.v_head_dim, dtype=q.dtype, device=q.device)
        FLAGS.poll(q.device)  # a direct call is a step of its own: report what an earlier one found
        res = self._launch(step, call, **launch_options).run(q, k_cache, v_cache, out, layer=layer)
        if q.device.type == "cpu" or FLAGS.sync:  # free on the CPU (nothing to wait for)
            FLAGS.check_now(q.device)
        return res

    def flash_attn_varlen_func(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):  # pragma: no cover - abstract
        raise NotImplementedError

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class PagedLaunch:
    """One step's sub-plan for one layer configuration: ``run()`` per layer is checks in O(1) + a launch.

    Built by ``KernelProvider.arm_paged`` once per step (the core caches it on the StepPlan, so
    every layer of the same configuration shares it).
    """

    __slots__ = ("provider", "step", "call", "_seen")

    def __init__(self, provider: KernelProvider, step: PagedStep, call: LayerConsts):
        self.provider = provider
        self.step = step
        self.call = call
        self._seen: Optional[tuple] = None  # the last layer signature that passed the checks

    def check(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, layer: LayerTensors
    ) -> None:
        """The per-layer checks: in full once per signature (layers of a step mostly repeat one), else one
        tuple compare; a [batch, Hkv] descale against this step's batch."""
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"out must be a torch.Tensor [total_q, {self.call.num_q_heads}, {self.call.v_head_dim}] "
                f"(every provider writes into it), got {type(out).__name__}"
            )
        sig = (
            q.shape,
            k_cache.shape,
            v_cache.shape,
            q.dtype,
            k_cache.dtype,
            v_cache.dtype,
            q.device,
            k_cache.device,
            v_cache.device,
            out.shape,
            out.dtype,
            out.device,
            layer.has_descale,
        )
        if sig != self._seen:
            check_paged_layer(self.step, self.call, q, k_cache, v_cache, out)
            if layer.has_descale and not is_fp8(k_cache.dtype):
                raise ValueError(f"k_descale/v_descale bound but the KV cache is {k_cache.dtype}, not FP8")
            self._seen = sig
        if layer.descale_batch and layer.descale_batch != self.step.page_table.shape[0]:
            raise ValueError(
                f"k_descale/v_descale are [batch, num_kv_heads] for batch {layer.descale_batch}, "
                f"but this step has {self.step.page_table.shape[0]} sequences"
            )

    def run(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        *,
        layer: LayerTensors = NO_LAYER_TENSORS,
    ):
        """q [total_q, Hq, D], caches [P, page, Hkv, D|Dv] -> writes and returns out [total_q, Hq, Dv]
        (, lse [Hq, total_q] fp32 when the call asks for it). ``layer``: the layer's bound tensors."""
        self.check(q, k_cache, v_cache, out, layer)
        return self.provider._run_paged(self.step, self.call, q, k_cache, v_cache, out, layer)
