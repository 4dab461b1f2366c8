"""The per-step paged launch: one step's tensors over a kept LaunchConfig, and the per-layer hot path.

``TritonLaunch.run(q, k_cache, v_cache, out, layer=...)``: q [total_q, Hq, D], caches [pages, page, Hkv, D|Dv]
(16-bit, fp32 or FP8), out [total_q, Hq, Dv] written in place (+ lse [Hq, total_q] fp32 for LSE calls). A layer
signature seen before launches through closures bound to device addresses (launch.py's FastLaunch.bind).
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch

from .... import env
from ...api import PagedLaunch
from ...api import NO_LAYER_TENSORS, PagedStep, LayerTensors, LayerConsts, is_fp8
from ...api import FLAGS
from .descriptors import DESC_DTYPES, desc_layer_ok, ensure_scratch_allocator
from .launch import FastLaunch
from .launch_config import LaunchConfig
from .tiles import TUNING, device_family, tile_config

# per-layer arguments of the attention kernel (the hot closure takes them per call; everything else is fixed
# for the configuration or read from the step's address slots)
_LAYER_TENSORS = ("SINKS", "ALIBI", "KDS", "VDS")
_STEP_SLOTS = {"PT": 0, "SEQ": 1, "CUQ": 2}


class LaunchHost(Protocol):
    """What a TritonLaunch asks of its provider: scratch and compiled launchers kept across steps."""

    def workspace(self, device: torch.device, numel: int) -> torch.Tensor:
        """fp32 [>= numel] scratch (split-K partials)."""

    def launcher(self, fn: Any, grid: tuple, consts: dict, warps: int, stages: int, spec_key: tuple,
                 options: Optional[dict] = None) -> FastLaunch:
        """The kept FastLaunch of one compiled specialisation."""

    def warm_once(self, step: PagedStep, call: LayerConsts, q: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, out: torch.Tensor, layer: LayerTensors) -> None:
        """The first call of a layer kind compiles every variant it can launch (warmup.py)."""


class TritonLaunch(PagedLaunch):
    """One step's sub-plan x one layer configuration: the step's tensors and their device addresses over
    a LaunchConfig (tiles, split count, grid, armed launchers) shared with every step of that shape."""

    __slots__ = ("cfg", "addrs")

    def __init__(self, provider: LaunchHost, step: PagedStep, call: LayerConsts, cfg: LaunchConfig,
                 addrs: Optional[tuple[int, int, int]]):
        PagedLaunch.__init__(self, provider, step, call)
        self.cfg = cfg
        self.addrs = addrs  # (page_table, cache_seqlens, cu_seqlens_q) device addresses, the closures' S

    def __getattr__(self, name: str) -> Any:  # the configuration's decisions read as the launch's (tests, benchmarks)
        if name in LaunchConfig.__slots__:
            return getattr(self.cfg, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, *,
            layer: LayerTensors = NO_LAYER_TENSORS):
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
        if s is None or self.call.return_lse or cfg.mla_decode or not isinstance(out, torch.Tensor):
            self.check(q, k_cache, v_cache, out, layer)
            return self._execute(q, k_cache, v_cache, out, layer)[0]
        qa, ka, va, oa = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr()
        key = (q.shape, k_cache.shape, v_cache.shape, out.shape, q.stride(), k_cache.stride(), v_cache.stride(),
               out.stride(), q.dtype, k_cache.dtype, v_cache.dtype, out.dtype, q.get_device(), k_cache.get_device(),
               v_cache.get_device(), out.get_device(), ((qa | ka | va | oa) & 15) == 0, layer.key)
        hot = cfg.hot.get(key)
        if hot is not None:
            attn, merge = hot
            attn(s, qa, ka, va, *layer.tensors, oa)
            if merge is not None:
                merge(s, oa, *layer.tensors[:1] if layer.sinks is not None else ())
            return out
        self.check(q, k_cache, v_cache, out, layer)
        res, launched = self._execute(q, k_cache, v_cache, out, layer)
        if launched is not None and key[-2]:
            attn, merge, args, margs = launched
            if attn.takes_addresses and (merge is None or merge.takes_addresses):
                present = tuple(n for n, t in zip(_LAYER_TENSORS, (layer.sinks, layer.alibi_slopes, layer.k_descale,
                                                                     layer.v_descale)) if t is not None)
                cfg.hot[key] = (
                    attn.bind_named(args, free=("Q", "K", "V", "O") + present, slots=_STEP_SLOTS),
                    merge.bind_named(margs, free=("O",) + (("SINKS",) if layer.sinks is not None else ()),
                                     slots={"CUQ": 2}) if merge is not None else None)
        return res

    def _execute(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
                 layer: LayerTensors) -> tuple[Any, Optional[tuple]]:
        """The checked launch: -> (result, (attn, merge, attention args, merge args) by name, or None when
        nothing was launched or the launch is not one the hot path replays)."""
        step, call, cfg = self.step, self.call, self.cfg
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
            o_part, l_part = ws[: splits * part * bdv], ws[splits * part * bdv: splits * part * (bdv + 1)]
        else:
            o_part = l_part = None
        os_ = out.stride()
        # the compiled specialisation these arguments need (beyond the configuration's)
        sig = (total_q, qs, ks, vs, os_, q.dtype, k_cache.dtype, _al(q), _al(k_cache), _al(v_cache), _al(out),
               None if lse is None else _al(lse), None if o_part is None else (_al(o_part), _al(l_part)), layer.key,
               cfg.desc and q.dtype in DESC_DTYPES and desc_layer_ok(k_cache, v_cache, step.page_size))
        fast = cfg.fast.get(sig)
        if fast is None:
            self.provider.warm_once(step, call, q, k_cache, v_cache, out, layer)  # every variant, once per layer kind
            fast = cfg.fast[sig] = self._launchers(sig, q, total_q, layer, per_head)
        attn, merge = fast
        if cfg.mla_decode:
            if v_cache.data_ptr() != k_cache.data_ptr() or per_head:
                raise ValueError("triton MLA decode: v_cache must be the first v_head_dim columns of k_cache (one "
                                 "latent cache) and the descale one per-tensor value")
            attn.call_named(dict(
                Q=q, KV=k_cache, PT=step.page_table, SEQ=step.cache_seqlens, CUQ=step.cu_seqlens_q, KDS=k_descale,
                O=out, LSE=lse, OP=o_part, LP=l_part, ERR=FLAGS.buffer(q.device), stride_qt=qs[0], stride_qh=qs[1],
                stride_kp=ks[0], stride_ks=ks[1], stride_ot=os_[0], stride_oh=os_[1],
                stride_ptb=step.page_table.stride(0), total_q=total_q, num_q_heads=hq, scale=call.softmax_scale,
                kv_rows=k_cache.shape[0] * step.page_size, pt_cols=step.page_table.shape[1]))
            launched = None
        else:
            args = dict(
                Q=q, K=k_cache, V=v_cache, PT=step.page_table, SEQ=step.cache_seqlens, CUQ=step.cu_seqlens_q,
                SINKS=sinks, ALIBI=alibi_slopes, KDS=k_descale, VDS=v_descale, O=out, LSE=lse, OP=o_part, LP=l_part,
                ERR=FLAGS.buffer(q.device),
                stride_qt=qs[0], stride_qh=qs[1], stride_kp=ks[0], stride_ks=ks[1], stride_kh=ks[2],
                stride_vp=vs[0], stride_vs=vs[1], stride_vh=vs[2], stride_ot=os_[0], stride_oh=os_[1],
                stride_ptb=step.page_table.stride(0), stride_ds_b=k_descale.stride(0) if per_head else 0,
                total_q=total_q, num_q_heads=hq, scale=call.softmax_scale, softcap=call.softcap,
                kv_rows=k_cache.shape[0] * step.page_size, pt_cols=step.page_table.shape[1])
            attn.call_named(args)
            launched = (attn, None, args, None)
        if merge is not None:
            margs = dict(OP=o_part, LP=l_part, O=out, LSE=lse, SINKS=sinks, CUQ=step.cu_seqlens_q, stride_ot=os_[0],
                         stride_oh=os_[1], total_q=total_q, num_q_heads=hq, batch=step.page_table.shape[0])
            merge.call_named(margs)
            if launched is not None:
                launched = (attn, merge, launched[2], margs)
        return done, launched

    def _launchers(self, sig: tuple, q: torch.Tensor, total_q: int, layer: LayerTensors,
                   per_head: bool) -> tuple[FastLaunch, Optional[FastLaunch]]:
        """(attention, split-K merge or None) launchers of one signature ``sig`` (_execute's), from the
        provider's kept ones: the configuration's constexprs plus this layer's flags and tiles."""
        from .kernels import _merge_splits, _mla_attn_kernel, _paged_attn_kernel

        step, cfg = self.step, self.cfg
        has_sinks, has_alibi, has_descale = layer.sinks is not None, layer.alibi_slopes is not None, layer.has_descale
        # the step's own part of the specialisation: its int arguments and its tensors' alignment
        spec_key = (sig, total_q, self.call.num_q_heads, step.page_table.stride(0), step.page_table.shape[0],
                    step.page_table.dtype, step.cache_seqlens.dtype, step.cu_seqlens_q.dtype, _al(step.page_table),
                    _al(step.cache_seqlens), _al(step.cu_seqlens_q))
        # the CPU interpreter mis-evaluates bf16 dots (numpy has no bf16): upcast there only (ALiBi layers of any
        # dtype: the causal bias is a bf16 dot, kernels._alibi_rows)
        fp32_dot = q.dtype == torch.float32 or (env.triton_interpreting()
                                                and (q.dtype == torch.bfloat16 or has_alibi))
        if cfg.mla_decode:
            consts = dict(cfg.static, HAS_DESCALE=has_descale, FP32_DOT=fp32_dot)
            attn = self.provider.launcher(_mla_attn_kernel, cfg.grid, consts, cfg.warps, cfg.stages, spec_key,
                                          cfg.options)
        else:
            use_desc = sig[-1]
            consts = dict(cfg.static, HAS_SINKS=has_sinks, HAS_ALIBI=has_alibi, HAS_DESCALE=has_descale,
                          DESCALE_PER_HEAD=per_head, FP32_DOT=fp32_dot, USE_DESC=use_desc)
            warps, stages = cfg.warps, cfg.stages
            family = device_family(q.device)
            if cfg.desc and not use_desc:  # this layer refuses descriptors: pointer loads, the same row tiles (grid)
                which = "prefill_ptr_wide_fp32" if q.dtype == torch.float32 else "prefill_ptr_wide"
                _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, which)
            elif cfg.phase == "decode" and is_fp8(sig[6]) and "decode_fp8" in TUNING[family] and cfg.block_m <= 16:
                # FP8 cache: its own key tile and warps, the same row tiles (grid) and split count
                _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, "decode_fp8")
            attn = self.provider.launcher(_paged_attn_kernel, cfg.grid, consts, warps, stages, spec_key,
                                          cfg.options)
        merge = None
        if cfg.num_splits > 1:
            merge = self.provider.launcher(_merge_splits, (total_q, self.call.num_q_heads, 1),
                                           dict(DV=self.call.v_head_dim, BLOCK_DV=cfg.bdv, NUM_SPLITS=cfg.num_splits,
                                                HAS_SINKS=has_sinks, WRITE_LSE=self.call.return_lse), 4, 1, spec_key)
        return attn, merge


def _al(t: torch.Tensor) -> bool:
    """16-byte alignment of a tensor's data, which Triton specialises pointer arguments on."""
    return (t.data_ptr() & 15) == 0
