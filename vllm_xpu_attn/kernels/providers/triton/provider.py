"""The ``triton`` provider: device-neutral Triton kernels behind the common contract.

Runs on CUDA and Intel XPU (Intel's Triton backend); on the CPU only through Triton's
interpreter (TRITON_INTERPRET=1), which is how CI checks it. This module holds the provider: availability,
the kept launch configurations, launchers and workspace, and the contract's varlen, merge and KV-write calls;
the paged launch itself is launch_config.py (per step shape) and step_launch.py (per step and layer), keyed by
signature.py, its variants decided by variants.py.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import torch

from .... import env
from ...api import (
    FLAGS,
    FLOAT_DTYPES,
    FP8_DTYPES,
    Feature,
    KernelProvider,
    KernelRequest,
    LayerConsts,
    LayerTensors,
    PagedStep,
    capturing,
    check_paged_step,
    check_per_head,
    check_write_kv_all,
    check_write_kv_slots,
    is_fp8,
)
from .launch import FastLaunch
from .launch_config import LaunchConfig
from .signature import launch_signature, step_signature, warm_signature
from .step_launch import TritonLaunch
from .variants import merge_state_consts, mla_kernel_fits, write_kv_consts
from .warmup import warm_up

logger = logging.getLogger("vllm_xpu_attn")


class TritonProvider(KernelProvider):
    """Paged attention (prefill, extend, split-K decode, absorbed MLA), varlen, merge and KV writes in Triton.

    Keeps, across steps and layers: launch configurations by step shape (bounded), compiled launchers by
    specialisation (bounded), the fp32 split-K workspace per device, and per-tensor FP8 scale constants.
    """

    name = "triton"
    description = "portable Triton kernels (CUDA, Intel XPU); split-K decode"
    devices = frozenset({"cuda", "xpu", "cpu"})
    dtypes = frozenset(FLOAT_DTYPES)
    kv_dtypes = frozenset(FLOAT_DTYPES + FP8_DTYPES)
    features = frozenset(Feature)  # every one
    graph_capture_reason = None  # tests/gpu/gpu_vllm_graphs.py, tests/sglang/test_sglang_graphs.py
    # K/V tiles by tensor descriptor in prefill: None = where the hardware has TMA (CUDA sm90+); True/False
    # forces it (tests run the descriptor path in the interpreter). Read when a configuration is made.
    tensor_descriptors: Optional[bool] = None

    def unavailable_reason(self) -> Optional[str]:
        try:
            import triton  # noqa: F401
        except ImportError:
            return "triton is not installed (pip install 'vllm-xpu-attn[triton]')"
        return None

    max_head_dim = None  # 256 for the general kernel, checked below; MLA latent rows (576) have their own

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        r = []
        if req.device_type == "cpu" and not env.triton_interpreting():
            r.append("on the CPU Triton runs only through its interpreter (TRITON_INTERPRET=1; tests only)")
        mla_ok = req.mla and mla_kernel_fits(
            LayerConsts(
                req.num_q_heads,
                req.num_kv_heads,
                req.head_dim,
                req.v_head_dim or req.head_dim,
                1.0,
                req.causal,
                req.window,
                req.softcap,
                mla=True,
            )
        )
        if req.head_dim > 256 and not (mla_ok and not req.batch_invariant):
            r.append(
                f"head dim {req.head_dim} > 256 (beyond 256 only MLA latent attention: power-of-two latent "
                "and RoPE widths, causal, no window/softcap/batch-invariance)"
            )
        return r

    # ---- paged attention: plan per step, run per layer ------------------------------------
    def arm_paged(self, step: PagedStep, call: LayerConsts, num_splits: Optional[int] = None) -> TritonLaunch:
        """Per-step part: the step's tensors checked once, the launch configuration fixed (kept across steps)."""
        return self._planned(step, call, num_splits, checked=False)

    def _launch(self, step: PagedStep, call: LayerConsts, num_splits: Optional[int] = None) -> TritonLaunch:
        """``num_splits`` forces the split-K count (tests, benchmarks); default: chosen per step."""
        return self._planned(step, call, num_splits, checked=True)

    def _planned(self, step: PagedStep, call: LayerConsts, num_splits: Optional[int], checked: bool) -> TritonLaunch:
        """The step's launch over a LaunchConfig kept across steps.

        Everything a configuration decides (tiles, split count, grid, constexprs, the armed launchers and the
        per-layer closures) depends on the step only through its step signature (signature.step_signature:
        the call, the step tensors' shapes, strides, dtypes, devices and 16-byte alignment, max_seqlen_q, the
        page size, a forced split count); their addresses are read per step and handed to the closures. A step
        with a known signature checks nothing again (check_paged_step passed for it) and builds one small object.
        """
        try:
            addrs = (step.page_table.data_ptr(), step.cache_seqlens.data_ptr(), step.cu_seqlens_q.data_ptr())
            key = step_signature(step, call, num_splits, addrs)
            cfg = self._configs.get(key)
        except (AttributeError, TypeError):  # not tensors / unhashable: the checks below say what is wrong
            key = cfg = addrs = None
        if cfg is None:
            if not checked:
                check_paged_step(step)
            cfg = LaunchConfig(step, call, num_splits, tensor_descriptors=self.tensor_descriptors)
            if key is not None:
                if len(self._configs) >= 512:  # bounded: drop the oldest configuration
                    self._configs.pop(next(iter(self._configs)))
                self._configs[key] = cfg
        return TritonLaunch(self, step, call, cfg, addrs)

    def _run_paged(
        self,
        step: PagedStep,
        call: LayerConsts,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        layer: LayerTensors,
    ):
        return self._launch(step, call)._execute(q, k_cache, v_cache, out, layer)[0]

    def workspace(self, device: torch.device, numel: int) -> torch.Tensor:
        """fp32 scratch of >= numel elements (split-K partials), owned by the provider and reused across
        layers and steps (one stream runs them in order). Grows by doubling; a replaced buffer is kept
        alive, since a captured graph may still address it."""
        buf = self._workspace.get(device)
        if buf is None or buf.numel() < numel:
            if buf is not None:
                self._retired.append(buf)
            buf = torch.empty(
                max(numel, 2 * (buf.numel() if buf is not None else 0), 1 << 16), dtype=torch.float32, device=device
            )
            self._workspace[device] = buf
        return buf

    def __init__(self) -> None:
        self._workspace: dict[torch.device, torch.Tensor] = {}
        self._retired: list[torch.Tensor] = []
        self._scales: dict[tuple, torch.Tensor] = {}
        self._launchers: dict[tuple, FastLaunch] = {}
        self._configs: dict[tuple, LaunchConfig] = {}
        self._warmed: set[tuple] = set()  # layer kinds whose variants are compiled (warm_once)

    def warm_once(
        self,
        step: PagedStep,
        call: LayerConsts,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        layer: LayerTensors,
    ) -> None:
        """On a GPU, the first call of a layer kind (the call, page size, dtypes, strides, per-layer tensors)
        compiles every kernel variant that kind can launch (warmup.py), so that no step shape met later while
        serving compiles one. Not while a graph is being captured (nothing may be added to it), nor with
        XPU_ATTN_WARMUP=0."""
        if q.device.type not in ("cuda", "xpu") or capturing(q.device) or not env.flag(env.WARMUP):
            return
        key = warm_signature(call, step.page_size, q, k_cache, v_cache, out, layer)
        if key in self._warmed:
            return
        self._warmed.add(key)
        t0 = time.perf_counter()
        n = warm_up(self, call, step.page_size, q, k_cache, v_cache, out, layer)
        logger.info(
            "vllm-xpu-attn: triton compiled %d kernel variants of a layer kind (%d q / %d kv heads, head dim "
            "%d, %s cache) in %.1f s",
            n,
            call.num_q_heads,
            call.num_kv_heads,
            call.head_dim,
            str(k_cache.dtype).replace("torch.", ""),
            time.perf_counter() - t0,
        )

    def clear_caches(self) -> None:
        """Forget every launch configuration and compiled launcher (the next steps re-plan and re-arm)."""
        self._configs.clear()
        self._launchers.clear()

    def launched_variants(self, kernel: Optional[str] = None) -> list[dict]:
        """The constexprs of every specialisation this provider has armed (of ``kernel`` by name, or all):
        which kernel variants the steps so far launched."""
        return [
            dict(fl.constexprs)
            for fl in self._launchers.values()
            if kernel is None or getattr(fl.fn, "__name__", "") == kernel
        ]

    def launcher(
        self, fn, grid: tuple, consts: dict, warps: int, stages: int, spec_key: tuple, options: Optional[dict] = None
    ) -> FastLaunch:
        """The FastLaunch of one compiled specialisation, kept across steps and layers.

        ``spec_key`` holds everything Triton specialises a compiled kernel on besides the constexprs
        (docs/triton_launch.md): every int argument's value and every tensor argument's dtype and
        16-byte alignment (signature.launch_specialisation). The caller builds it from the arguments it passes,
        so the launcher runs unchecked (check=False): a call with another specialisation gets another launcher.
        """
        key = launch_signature(fn, grid, consts, warps, stages, spec_key, options)
        fl = self._launchers.get(key)
        if fl is None:
            if len(self._launchers) >= 1024:  # bounded: drop the oldest specialisation
                self._launchers.pop(next(iter(self._launchers)))
            fl = self._launchers[key] = FastLaunch(fn, grid, consts, warps, stages, check=False, options=options)
        return fl

    def _const_scale(self, device: torch.device, value: float) -> torch.Tensor:
        """A float32 [1] scale tensor, made once per (device, value) outside any graph capture."""
        t = self._scales.get((device, value))
        if t is None:
            if capturing(device):  # CUDA or XPU graph capture (kernels.api.guard)
                raise RuntimeError(
                    "vllm-xpu-attn: an FP8 KV write without a scale tensor was first seen inside a "
                    "graph capture; pass k_scale/v_scale tensors (the engines do) or warm up first"
                )
            t = self._scales[(device, value)] = torch.full((1,), value, dtype=torch.float32, device=device)
        return t

    # ---- the rest of the contract ---------------------------------------------------
    def flash_attn_varlen_func(
        self,
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        sinks=None,
        alibi_slopes=None,
        return_softmax_lse=False,
        out=None,
    ):
        """Contiguous K/V: viewed as a page-size-1 cache with a device-built table (no host sync)."""
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise ValueError(
                f"q/k/v must be 3-D [tokens, heads, dim], got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
            )
        check_per_head("sinks", sinks, q.shape[1], q.device)
        batch = cu_seqlens_k.shape[0] - 1
        lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
        cols = torch.arange(max(int(max_seqlen_k), 1), device=q.device, dtype=torch.int32)
        table = (cu_seqlens_k[:-1, None].to(torch.int32) + cols[None, :]).clamp(max=max(k.shape[0] - 1, 0))
        kc = k.unsqueeze(1)
        vc = v.unsqueeze(1)
        if batch == 0 or k.shape[0] == 0:
            kc = torch.zeros(1, 1, *k.shape[1:], dtype=k.dtype, device=k.device)
            vc = torch.zeros(1, 1, *v.shape[1:], dtype=v.dtype, device=v.device)
            table = torch.zeros(batch, 1, dtype=torch.int32, device=q.device)
        return self.flash_attn_with_kvcache(
            q,
            kc,
            vc,
            table,
            lens,
            cu_seqlens_q.to(torch.int32),
            max_seqlen_q,
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=window_size,
            softcap=softcap,
            sinks=sinks,
            alibi_slopes=alibi_slopes,
            return_softmax_lse=return_softmax_lse,
            out=out,
        )

    def merge_state(
        self,
        o_a: torch.Tensor,
        lse_a: torch.Tensor,
        o_b: torch.Tensor,
        lse_b: torch.Tensor,
        sinks: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Two partial attentions over disjoint keys -> one: o [T, H, D] (o_a's dtype), lse [H, T] fp32;
        ``sinks`` [H] float joins the denominator once."""
        from .kernels import _merge_state_kernel

        if o_a.shape != o_b.shape or lse_a.shape != lse_b.shape or lse_a.shape != (o_a.shape[1], o_a.shape[0]):
            raise ValueError(
                f"merge_state: o {list(o_a.shape)}/{list(o_b.shape)}, lse {list(lse_a.shape)}/{list(lse_b.shape)} "
                "must be o [T, H, D] and lse [H, T]"
            )
        t, h, d = o_a.shape
        o_a, o_b = o_a.contiguous(), o_b.contiguous()
        o = torch.empty_like(o_a)
        lse = torch.empty(h, t, dtype=torch.float32, device=o_a.device)
        if t:
            _merge_state_kernel[(t, h)](
                o_a,
                lse_a.float().contiguous(),
                o_b,
                lse_b.float().contiguous(),
                sinks if sinks is not None else lse,
                o,
                lse,
                o.stride(0),
                o.stride(1),
                t,
                **merge_state_consts(d, sinks is not None),
            )
        return o, lse

    def write_kv(
        self,
        k: Optional[torch.Tensor],
        v: Optional[torch.Tensor],
        k_cache: torch.Tensor,
        v_cache: Optional[torch.Tensor],
        slot_mapping: torch.Tensor,
        k_scale=None,
        v_scale=None,
    ) -> None:
        """k/v [T, Hkv, D] into caches [pages, page, Hkv, D] at slot_mapping [T] int32/int64 (negative:
        skipped; v / v_cache None: an MLA latent write); an FP8 cache stores x / scale (a tensor, a float, or
        None for 1.0)."""
        from .kernels import _write_kv_kernel

        check_write_kv_all(k, v, k_cache, v_cache, slot_mapping)  # both, before either is written
        if slot_mapping.device.type == "cpu":  # values readable for free: refuse before the first store
            check_write_kv_slots(slot_mapping, k_cache.shape[0] * k_cache.shape[1])
        for name, x, cache, scale in (("k", k, k_cache, k_scale), ("v", v, v_cache, v_scale)):
            if x is None:
                continue
            quant = is_fp8(cache.dtype)
            if not quant:
                scale = x  # unread: an unquantised write needs no scale (and no host-made tensor: graph-safe)
            elif scale is None or not isinstance(scale, torch.Tensor):
                scale = self._const_scale(x.device, 1.0 if scale is None else float(scale))
            elif scale.dtype != torch.float32:
                scale = scale.float()
            if x.shape[0] == 0:
                continue
            _write_kv_kernel[(x.shape[0], x.shape[1])](
                x,
                cache,
                slot_mapping,
                scale.reshape(-1),
                FLAGS.buffer(x.device),
                x.stride(0),
                x.stride(1),
                cache.stride(0),
                cache.stride(1),
                cache.stride(2),
                cache.shape[0] * cache.shape[1],
                **write_kv_consts(
                    x.shape[1], x.shape[2], cache.shape[1], quant, float(torch.finfo(cache.dtype).max) if quant else 0.0
                ),
            )
        if FLAGS.sync:
            FLAGS.check_now(slot_mapping.device)
