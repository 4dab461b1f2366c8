"""The per-step paged launch: one step's tensors over a kept LaunchConfig, and the per-layer hot path.

``TritonLaunch.run(q, k_cache, v_cache, out, layer=...)``: q [total_q, Hq, D], caches [pages, page, Hkv, D|Dv]
(16-bit, fp32 or FP8), out [total_q, Hq, Dv] written in place (+ lse [Hq, total_q] fp32 for LSE calls). A layer
signature (signature.layer_signature) seen before launches through closures bound to device addresses
(launch.py's FastLaunch.bind); which variants it launches is variants.attn_variant / merge_variant's decision.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch

from .... import env
from ...api import FLAGS, FP8_DTYPES, NO_LAYER_TENSORS, LayerConsts, LayerTensors, PagedLaunch, PagedStep
from .descriptors import DESC_DTYPES, desc_layer_ok, descriptors_supported, ensure_scratch_allocator
from .launch import FastLaunch
from .launch_config import LaunchConfig
from .signature import LAYER_ALIGNED, launch_extras, launch_specialisation, layer_signature
from .variants import attn_variant, merge_grid, merge_variant

# per-layer arguments of the attention kernel (the hot closure takes them per call; everything else is fixed
# for the configuration or read from the step's address slots)
_LAYER_TENSORS = ("SINKS", "ALIBI", "KDS", "VDS")
_STEP_SLOTS = {"PT": 0, "SEQ": 1, "CUQ": 2}
_Tensor = torch.Tensor  # one global load on the hot path instead of two
# variants' dtype names (fp32 dots, FP8 tiles)
_DTYPE = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    **{d: "e4m3" if "e4m3" in str(d) else "e5m2" for d in FP8_DTYPES},
}


class Armed:
    """One layer signature's launch in a configuration (LaunchConfig.layers): the compiled launchers, the
    extras they were armed for (signature.launch_extras), and once bound the hot closures (None until then,
    and for launches the hot path does not replay: LSE, MLA, unaligned tensors)."""

    __slots__ = ("attn", "merge", "extras", "hot_attn", "hot_merge")

    def __init__(self, attn: FastLaunch, merge: Optional[FastLaunch], extras: tuple):
        self.attn, self.merge, self.extras = attn, merge, extras
        self.hot_attn: Optional[Any] = None
        self.hot_merge: Optional[Any] = None


class LaunchHost(Protocol):
    """What a TritonLaunch asks of its provider: scratch and compiled launchers kept across steps."""

    def workspace(self, device: torch.device, numel: int) -> torch.Tensor:
        """fp32 [>= numel] scratch (split-K partials)."""

    def launcher(
        self,
        fn: Any,
        grid: tuple,
        consts: dict,
        warps: int,
        stages: int,
        spec_key: tuple,
        options: Optional[dict] = None,
    ) -> FastLaunch:
        """The kept FastLaunch of one compiled specialisation."""

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
        """The first call of a layer kind compiles every variant it can launch (warmup.py)."""


class TritonLaunch(PagedLaunch):
    """One step's sub-plan x one layer configuration: the step's tensors and their device addresses over
    a LaunchConfig (tiles, split count, grid, armed launchers) shared with every step of that shape."""

    __slots__ = ("cfg", "addrs")

    def __init__(
        self,
        provider: LaunchHost,
        step: PagedStep,
        call: LayerConsts,
        cfg: LaunchConfig,
        addrs: Optional[tuple[int, int, int]],
    ):
        PagedLaunch.__init__(self, provider, step, call)
        self.cfg = cfg
        self.addrs = addrs  # (page_table, cache_seqlens, cu_seqlens_q) device addresses, the closures' S

    def __getattr__(self, name: str) -> Any:  # the configuration's decisions read as the launch's (tests, benchmarks)
        if name in LaunchConfig.__slots__:
            return getattr(self.cfg, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def run(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        *,
        layer: LayerTensors = NO_LAYER_TENSORS,
    ):
        """PagedLaunch.run with a per-layer hot path: the layers of a step repeat one signature (shapes,
        strides, dtypes, devices, 16-byte alignment, the bound layer tensors' specialisation), and so do the
        steps of one configuration, so a signature that passed the checks and armed the compiled launchers
        once is looked up in one dict and launched with device addresses (the step's read from ``addrs``,
        the layer's bound tensors from ``layer``). LSE calls and MLA take the checked path every call."""
        cfg = self.cfg
        if cfg.desc:
            ensure_scratch_allocator()
        s = self.addrs
        if FLAGS.sync:  # debugging: every launch checked, its guard flags read at once (a device sync)
            self.check(q, k_cache, v_cache, out, layer)
            res = self._execute(q, k_cache, v_cache, out, layer)[0]
            FLAGS.check_now(q.device)
            return res
        if s is None or not cfg.replay or not isinstance(out, _Tensor):
            self.check(q, k_cache, v_cache, out, layer)
            return self._execute(q, k_cache, v_cache, out, layer)[0]
        qa, ka, va, oa = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr()
        key = layer_signature(q, k_cache, v_cache, out, layer, qa, ka, va, oa)
        armed = cfg.layers.get(key)
        if armed is not None:
            attn = armed.hot_attn
            if attn is not None:
                attn(s, qa, ka, va, *layer.tensors, oa)
                merge = armed.hot_merge
                if merge is not None:
                    merge(s, oa, *layer.tensors[:1] if layer.sinks is not None else ())
                return out
        self.check(q, k_cache, v_cache, out, layer)
        res, launched = self._execute(q, k_cache, v_cache, out, layer, key)
        if launched is not None and key[LAYER_ALIGNED] is True:
            armed, args, margs = launched
            attn, merge = armed.attn, armed.merge
            if attn.takes_addresses and (merge is None or merge.takes_addresses):
                present = tuple(
                    n
                    for n, t in zip(_LAYER_TENSORS, (layer.sinks, layer.alibi_slopes, layer.k_descale, layer.v_descale))
                    if t is not None
                )
                armed.hot_merge = (
                    merge.bind_named(
                        margs, free=("O",) + (("SINKS",) if layer.sinks is not None else ()), slots={"CUQ": 2}
                    )
                    if merge is not None
                    else None
                )
                armed.hot_attn = attn.bind_named(args, free=("Q", "K", "V", "O") + present, slots=_STEP_SLOTS)
        return res

    def _execute(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        layer: LayerTensors,
        key: Optional[tuple] = None,
    ) -> tuple[Any, Optional[tuple]]:
        """The checked launch: -> (result, (Armed, attention args, merge args) by name, or None when nothing was
        launched or the launch is not one the hot path replays). ``key``: the layer signature, if the caller has
        it."""
        step, call = self.step, self.call
        cfg = self.cfg.for_cache(step, call, k_cache.dtype)  # an FP8 cache may split differently
        sinks, alibi_slopes, k_descale, v_descale = layer.sinks, layer.alibi_slopes, layer.k_descale, layer.v_descale
        total_q, hq = q.shape[0], call.num_q_heads
        qs, ks, vs = q.stride(), k_cache.stride(), v_cache.stride()
        if qs[-1] != 1 or ks[-1] != 1 or vs[-1] != 1:
            raise ValueError("triton provider: q, k_cache and v_cache need a contiguous last (head_dim) dimension")
        lse = torch.empty(hq, total_q, dtype=torch.float32, device=q.device) if call.return_lse else None
        done = (out, lse) if call.return_lse else out
        if total_q == 0 or cfg.grid[0] == 0:
            return done, None
        splits, bdv = cfg.num_splits, cfg.bdv
        per_head = k_descale is not None and k_descale.numel() != 1
        # absent optional pointers go as None: Triton specialises them away (constexpr None; the kernel
        # reads them only under their HAS_* flag), and the launcher has fewer pointers to convert
        if splits > 1:
            part = total_q * hq
            ws = self.provider.workspace(q.device, splits * part * (bdv + 1))
            o_part, l_part = ws[: splits * part * bdv], ws[splits * part * bdv : splits * part * (bdv + 1)]
        else:
            o_part = l_part = None
        os_ = out.stride()
        if key is None:
            key = layer_signature(
                q, k_cache, v_cache, out, layer, q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr()
            )
        # beyond the layer signature: the LSE / workspace alignment and this layer's descriptor decision
        if cfg.mla_decode:
            # the MLA page kernel's "tma" / "ahead" forms: K/V by descriptor where Triton has them and the latent cache
            # takes them (tuning.MLA_KERNEL_FORM); the scratch allocator descriptors need is set here
            use_desc = (
                cfg.variant.mla_form in ("tma", "ahead")
                and descriptors_supported()
                and desc_layer_ok(k_cache, k_cache, step.page_size)
            )
            if use_desc:
                ensure_scratch_allocator()
        else:
            use_desc = cfg.desc and q.dtype in DESC_DTYPES and desc_layer_ok(k_cache, v_cache, step.page_size)
        extras = launch_extras(lse, o_part, l_part, use_desc)
        armed = cfg.layers.get(key)
        if armed is None or armed.extras != extras:
            self.provider.warm_once(step, call, q, k_cache, v_cache, out, layer)  # every variant, once per layer kind
            launchers = self._launchers(cfg, key, extras, q.dtype, k_cache.dtype, total_q, layer, per_head)
            armed = cfg.layers[key] = Armed(*launchers, extras)
        attn, merge = armed.attn, armed.merge
        if cfg.mla_decode:
            if v_cache.data_ptr() != k_cache.data_ptr() or per_head:
                raise ValueError(
                    "triton MLA decode: v_cache must be the first v_head_dim columns of k_cache (one "
                    "latent cache) and the descale one per-tensor value"
                )
            attn.call_named(
                dict(
                    Q=q,
                    KV=k_cache,
                    PT=step.page_table,
                    SEQ=step.cache_seqlens,
                    CUQ=step.cu_seqlens_q,
                    KDS=k_descale,
                    O=out,
                    LSE=lse,
                    OP=o_part,
                    LP=l_part,
                    ERR=FLAGS.buffer(q.device),
                    stride_qt=qs[0],
                    stride_qh=qs[1],
                    stride_kp=ks[0],
                    stride_ks=ks[1],
                    stride_ot=os_[0],
                    stride_oh=os_[1],
                    stride_ptb=step.page_table.stride(0),
                    total_q=total_q,
                    num_q_heads=hq,
                    scale=call.softmax_scale,
                    kv_rows=k_cache.shape[0] * step.page_size,
                    pt_cols=step.page_table.shape[1],
                )
            )
            launched = None
        else:
            args = dict(
                Q=q,
                K=k_cache,
                V=v_cache,
                PT=step.page_table,
                SEQ=step.cache_seqlens,
                CUQ=step.cu_seqlens_q,
                SINKS=sinks,
                ALIBI=alibi_slopes,
                KDS=k_descale,
                VDS=v_descale,
                O=out,
                LSE=lse,
                OP=o_part,
                LP=l_part,
                ERR=FLAGS.buffer(q.device),
                stride_qt=qs[0],
                stride_qh=qs[1],
                stride_kp=ks[0],
                stride_ks=ks[1],
                stride_kh=ks[2],
                stride_vp=vs[0],
                stride_vs=vs[1],
                stride_vh=vs[2],
                stride_ot=os_[0],
                stride_oh=os_[1],
                stride_ptb=step.page_table.stride(0),
                stride_ds_b=k_descale.stride(0) if per_head else 0,
                total_q=total_q,
                num_q_heads=hq,
                scale=call.softmax_scale,
                softcap=call.softcap,
                kv_rows=k_cache.shape[0] * step.page_size,
                pt_cols=step.page_table.shape[1],
            )
            attn.call_named(args)
            launched = (armed, args, None)
        if merge is not None:
            margs = dict(
                OP=o_part,
                LP=l_part,
                O=out,
                LSE=lse,
                SINKS=sinks,
                CUQ=step.cu_seqlens_q,
                stride_ot=os_[0],
                stride_oh=os_[1],
                total_q=total_q,
                num_q_heads=hq,
                batch=step.page_table.shape[0],
            )
            merge.call_named(margs)
            if launched is not None:
                launched = (armed, launched[1], margs)
        return done, launched

    def _launchers(
        self,
        cfg: LaunchConfig,
        key: tuple,
        extras: tuple,
        q_dtype: torch.dtype,
        kv_dtype: torch.dtype,
        total_q: int,
        layer: LayerTensors,
        per_head: bool,
    ) -> tuple[FastLaunch, Optional[FastLaunch]]:
        """(attention, split-K merge or None) launchers of one layer signature ``key`` with ``extras``, from the
        provider's kept ones: the variants (variants.py) of the configuration ``cfg`` (the step's, or its sibling
        for this layer's cache width: LaunchConfig.for_cache) and this layer's flags."""
        from .kernels import _merge_splits, _mla_attn_kernel, _mla_page_kernel, _paged_attn_kernel

        call = self.call
        has_sinks = layer.sinks is not None
        spec = launch_specialisation(key, extras, cfg.step_spec, call.num_q_heads)
        v = attn_variant(
            cfg.family,
            cfg.variant,
            q_dtype=_DTYPE.get(q_dtype, str(q_dtype)),
            kv_dtype=_DTYPE.get(kv_dtype, str(kv_dtype)),
            sinks=has_sinks,
            alibi=layer.alibi_slopes is not None,
            descale=layer.has_descale,
            descale_per_head=per_head,
            use_desc=extras[2],
            interpreting=env.triton_interpreting(),
        )
        fn = {"_mla_attn_kernel": _mla_attn_kernel, "_mla_page_kernel": _mla_page_kernel}.get(
            v.kernel, _paged_attn_kernel
        )
        attn = self.provider.launcher(fn, cfg.grid, v.constexprs, v.num_warps, v.num_stages, spec, v.options)
        m = merge_variant(cfg.variant, call.v_head_dim, sinks=has_sinks, return_lse=call.return_lse)
        merge = (
            None
            if m is None
            else self.provider.launcher(
                _merge_splits, merge_grid(m, total_q, call.num_q_heads), m.constexprs, m.num_warps, m.num_stages, spec
            )
        )
        return attn, merge
