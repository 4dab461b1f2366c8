"""The ``triton`` provider: device-neutral Triton kernels behind the common contract.

Runs on CUDA and Intel XPU (Intel's Triton backend); on the CPU only through Triton's
interpreter (TRITON_INTERPRET=1), which is how CI checks it.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Optional, Sequence

import torch

from ..base import Feature, KernelProvider, KernelRequest, PagedLaunch
from ..guard import FLAGS
from ..contract import (FLOAT_DTYPES, FP8_DTYPES, NO_LAYER_ARGS, AttnPlan, LayerArgs, PagedCall, call_id,
                        check_paged_step, check_per_head, check_write_kv_all, check_write_kv_slots, is_fp8)

# Tile sizes per device family and phase: (BLOCK_M, BLOCK_N, num_warps, num_stages[, grf_mode]).
# Measured on an H200 (docs/benchmarks.md); Intel entries are conservative starting points
# (smaller tiles: less register file / SLM on Xe), not measured here.
TUNING: dict[str, dict[str, tuple]] = {
    # "mla_decode": (BLOCK_H, BLOCK_N, num_warps, num_stages) of the absorbed-MLA decode kernel
    # "mla_wide": the same for >= 64 heads per rank (compute-bound: big head tiles; benchmarks/bench_mla.py sweep)
    # cuda_sm90 "prefill": K/V tiles by tensor descriptor (TMA); "prefill_ptr": the pointer-load kernel where
    # a step cannot take descriptors (page not a multiple of 64, head dim not a power of two, batch-invariant
    # mode); "prefill_ptr_wide": a layer whose cache strides refuse descriptors inside a descriptor step (same
    # tiles, so the same grid; 8 warps: 128-row tiles with pointer loads spill at 4). benchmarks/prefill_lab.py
    # at fp32 the wide pointer kernel takes N=16 (ptxas, sm_90a: 1 KB stack instead of 8-9 KB at N=64)
    "cuda_sm90": {"prefill": (128, 64, 4, 2), "prefill_ptr": (64, 64, 4, 3), "prefill_ptr_wide": (128, 64, 8, 2),
                  "prefill_ptr_wide_fp32": (128, 16, 8, 2), "decode": (16, 128, 8, 2), "mla_decode": (16, 32, 4, 2),
                  "mla_wide": (64, 64, 8, 2),
                  # decode over an FP8 cache (per layer: the grid is the same): the fp8 -> 16-bit conversions take
                  # the default tile to 150 registers a thread, one 8-warp block per SM (12.5 % occupancy); 2
                  # warps x 64 keys measured 1.6-1.7x faster (benchmarks/lab/FP8_DECODE.md)
                  "decode_fp8": (16, 64, 2, 3)},
    "cuda": {"prefill": (64, 64, 4, 2), "decode": (16, 64, 4, 2), "mla_decode": (16, 32, 4, 2),
             "mla_wide": (64, 32, 8, 2)},
    # xpu: + the GRF mode Intel's backend is asked for (launch kwarg grf_mode); 256 GRF ("large"), 8 rows
    # per warp in prefill, N=32: the least spill of today's kernel (ci/intel_lowering.py, docs/intel_lowering.md)
    "xpu": {"prefill": (64, 32, 8, 2, "large"), "decode": (16, 32, 8, 2, "large"),
            "mla_decode": (16, 16, 4, 2, "large"), "mla_wide": (16, 16, 4, 2, "large")},
    # cpu (the interpreter, tests): the descriptor/pointer prefill split too, so both kernels run in CI
    "cpu": {"prefill": (16, 16, 1, 1), "prefill_ptr": (16, 16, 1, 1), "prefill_ptr_wide": (16, 16, 1, 1),
            "prefill_ptr_wide_fp32": (16, 16, 1, 1),
            "decode": (16, 16, 1, 1), "mla_decode": (16, 16, 1, 1), "mla_wide": (16, 16, 1, 1)},
}


def tile_config(family: str, phase: str) -> tuple[int, int, int, int, dict]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, compile options) of a family's phase (xpu: grf_mode)."""
    cfg = TUNING[family][phase]
    return (*cfg[:4], {"grf_mode": cfg[4]} if len(cfg) > 4 else {})


def device_family(device: torch.device) -> str:
    return _family(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _family(dev_type: str, index) -> str:  # cached: a device query per step is host time
    if dev_type == "cuda":
        major, _ = torch.cuda.get_device_capability(index)
        return "cuda_sm90" if major >= 9 else "cuda"
    return dev_type if dev_type in TUNING else "cuda"


@functools.lru_cache(maxsize=None)
def _compute_units(dev_type: str, index) -> int:
    """SMs (CUDA) or sub-slices (XPU) of a device, queried once."""
    if dev_type == "cuda":
        return torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device()
                                                ).multi_processor_count
    return getattr(torch.xpu.get_device_properties(index), "gpu_subslice_count", 64)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _pow2(n: int, lo: int = 16) -> int:
    return max(lo, 1 << (max(n, 1) - 1).bit_length())


class TritonProvider(KernelProvider):
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
        if req.device_type == "cpu" and not _interpreting():
            r.append("on the CPU Triton runs only through its interpreter (TRITON_INTERPRET=1; tests only)")
        mla_ok = req.mla and mla_kernel_fits(PagedCall(req.num_q_heads, req.num_kv_heads, req.head_dim,
                                                        req.v_head_dim or req.head_dim, 1.0, req.causal, req.window,
                                                        req.softcap, mla=True))
        if req.head_dim > 256 and not (mla_ok and not req.batch_invariant):
            r.append(f"head dim {req.head_dim} > 256 (beyond 256 only MLA latent attention: power-of-two latent "
                     "and RoPE widths, causal, no window/softcap/batch-invariance)")
        return r

    # ---- paged attention: plan per step, run per layer ------------------------------------
    def plan_paged(self, step: AttnPlan, call: PagedCall, num_splits: Optional[int] = None) -> "TritonLaunch":
        """Per-step part: the step's tensors checked once, the launch configuration fixed (kept across steps)."""
        return self._planned(step, call, num_splits, checked=False)

    def _launch(self, step: AttnPlan, call: PagedCall, num_splits: Optional[int] = None) -> "TritonLaunch":
        """``num_splits`` forces the split-K count (tests, benchmarks); default: chosen per step."""
        return self._planned(step, call, num_splits, checked=True)

    def _planned(self, step: AttnPlan, call: PagedCall, num_splits: Optional[int], checked: bool) -> "TritonLaunch":
        """The step's launch over a LaunchConfig kept across steps.

        Everything a configuration decides (tiles, split count, grid, constexprs, the armed launchers and the
        per-layer closures) depends on the step only through the key below: the call, the step tensors'
        shapes, strides, dtypes, devices and 16-byte alignment, max_seqlen_q and the page size; their
        addresses are read per step and handed to the closures. A step with a known key checks nothing
        again (check_paged_step passed for that key) and builds one small object.
        """
        pt, cs, cu = step.page_table, step.cache_seqlens, step.cu_seqlens_q
        try:
            addrs = (pt.data_ptr(), cs.data_ptr(), cu.data_ptr())
            key = (call_id(call), pt.shape, pt.stride(), pt.dtype, cs.shape, cs.stride(), cs.dtype, cu.shape,
                   cu.stride(), cu.dtype, pt.get_device(), cs.get_device(), cu.get_device(), step.max_seqlen_q,
                   step.page_size, num_splits, (addrs[0] & 15) == 0, (addrs[1] & 15) == 0, (addrs[2] & 15) == 0)
            cfg = self._configs.get(key)
        except (AttributeError, TypeError):  # not tensors / unhashable: the checks below say what is wrong
            key = cfg = addrs = None
        if cfg is None:
            if not checked:
                check_paged_step(step)
            cfg = LaunchConfig(step, call, num_splits)
            if key is not None:
                if len(self._configs) >= 512:  # bounded: drop the oldest configuration
                    self._configs.pop(next(iter(self._configs)))
                self._configs[key] = cfg
        return TritonLaunch(self, step, call, cfg, addrs)

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        return self._launch(step, call)._execute(q, k_cache, v_cache, out, layer)[0]

    def workspace(self, device: torch.device, numel: int) -> torch.Tensor:
        """fp32 scratch of >= numel elements (split-K partials), owned by the provider and reused across
        layers and steps (one stream runs them in order). Grows by doubling; a replaced buffer is kept
        alive, since a captured graph may still address it."""
        buf = self._workspace.get(device)
        if buf is None or buf.numel() < numel:
            if buf is not None:
                self._retired.append(buf)
            buf = torch.empty(max(numel, 2 * (buf.numel() if buf is not None else 0), 1 << 16), dtype=torch.float32,
                              device=device)
            self._workspace[device] = buf
        return buf

    def __init__(self) -> None:
        self._workspace: dict[torch.device, torch.Tensor] = {}
        self._retired: list[torch.Tensor] = []
        self._scales: dict[tuple, torch.Tensor] = {}
        self._launchers: dict[tuple, object] = {}
        self._configs: dict[tuple, "LaunchConfig"] = {}

    def clear_caches(self) -> None:
        """Forget every launch configuration and compiled launcher (the next steps re-plan and re-arm)."""
        self._configs.clear()
        self._launchers.clear()

    def launched_variants(self, kernel: Optional[str] = None) -> list[dict]:
        """The constexprs of every specialisation this provider has armed (of ``kernel`` by name, or all):
        which kernel variants the steps so far launched."""
        return [dict(k[2]) for k in self._launchers if kernel is None or getattr(k[0], "__name__", "") == kernel]

    def launcher(self, fn, grid: tuple, consts: dict, warps: int, stages: int, spec_key: tuple,
                 options: Optional[dict] = None):
        """The FastLaunch of one compiled specialisation, kept across steps and layers.

        ``spec_key`` holds everything Triton specialises a compiled kernel on besides the constexprs
        (launch.py's module doc): every int argument's value and every tensor argument's dtype and
        16-byte alignment. The caller builds it from the arguments it passes, so the launcher runs
        unchecked (check=False): a call with another specialisation gets another launcher.
        """
        from .launch import FastLaunch

        # consts/options in insertion order (the callers build them in a fixed order; a different order would
        # only cost another launcher, never a wrong one): no sort per step
        key = (fn, tuple(grid), tuple(consts.items()), warps, stages, spec_key,
               tuple(options.items()) if options else ())
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
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("vllm-xpu-attn: an FP8 KV write without a scale tensor was first seen inside a "
                                   "CUDA graph capture; pass k_scale/v_scale tensors (the engines do) or warm up first")
            t = self._scales[(device, value)] = torch.full((1,), value, dtype=torch.float32, device=device)
        return t

    @staticmethod
    def _num_splits(device: torch.device, batch: int, hkv: int, max_seqlen_q: int, max_keys: int) -> int:
        """Flash-decoding: split long contexts when batch x heads cannot fill the device. Host-only math."""
        if max_seqlen_q > 1 or max_keys < 1024:
            return 1
        if device.type in ("cuda", "xpu"):
            sms = _compute_units(device.type, device.index)
        else:
            return 2 if max_keys >= 2048 else 1
        splits = 1
        while batch * hkv * splits < 2 * sms and splits < 32 and max_keys // (splits * 2) >= 512:
            splits *= 2
        return splits

    # ---- the rest of the contract ---------------------------------------------------
    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
                               alibi_slopes=None, return_softmax_lse=False, out=None):
        """Contiguous K/V: viewed as a page-size-1 cache with a device-built table (no host sync)."""
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise ValueError(f"q/k/v must be 3-D [tokens, heads, dim], got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
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
        return self.flash_attn_with_kvcache(q, kc, vc, table, lens, cu_seqlens_q.to(torch.int32), max_seqlen_q,
                                            softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                            softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
                                            return_softmax_lse=return_softmax_lse, out=out)

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        from .kernels import _merge_state_kernel

        if o_a.shape != o_b.shape or lse_a.shape != lse_b.shape or lse_a.shape != (o_a.shape[1], o_a.shape[0]):
            raise ValueError(f"merge_state: o {list(o_a.shape)}/{list(o_b.shape)}, lse {list(lse_a.shape)}/{list(lse_b.shape)} "
                             "must be o [T, H, D] and lse [H, T]")
        t, h, d = o_a.shape
        o_a, o_b = o_a.contiguous(), o_b.contiguous()
        o = torch.empty_like(o_a)
        lse = torch.empty(h, t, dtype=torch.float32, device=o_a.device)
        if t:
            _merge_state_kernel[(t, h)](o_a, lse_a.float().contiguous(), o_b, lse_b.float().contiguous(),
                                        sinks if sinks is not None else lse, o, lse, o.stride(0), o.stride(1), t,
                                        D=d, BLOCK_D=_pow2(d), HAS_SINKS=sinks is not None)
        return o, lse

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
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
                x, cache, slot_mapping, scale.reshape(-1), FLAGS.buffer(x.device), x.stride(0), x.stride(1),
                cache.stride(0), cache.stride(1), cache.stride(2), cache.shape[0] * cache.shape[1],
                H=x.shape[1], D=x.shape[2], PAGE=cache.shape[1],
                BLOCK_D=_pow2(x.shape[2], 1), QUANT=quant, FMAX=float(torch.finfo(cache.dtype).max) if quant else 0.0)
        if FLAGS.sync:
            FLAGS.check_now(slot_mapping.device)


def mla_kernel_fits(call) -> bool:
    """Absorbed MLA the dedicated kernel serves: one latent cache (Hkv 1), power-of-two latent and RoPE
    widths (512 + 64 for DeepSeek), causal, no window or softcap."""
    d_rope = call.head_dim - call.v_head_dim
    return (call.mla and call.num_kv_heads == 1 and call.causal and call.window == (-1, -1) and call.softcap == 0
            and call.v_head_dim >= 16 and _pow2(call.v_head_dim, 1) == call.v_head_dim and d_rope >= 16
            and _pow2(d_rope, 1) == d_rope)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


class LaunchConfig:
    """What a paged launch fixes for every step of one shape: tiles, split count, grid, constexprs, and
    the compiled launchers and per-layer closures armed for it (kept across steps by the provider)."""

    __slots__ = ("phase", "block_m", "block_n", "warps", "stages", "num_splits", "grid", "static", "bd", "bdv",
                 "group", "invariant", "fast", "mla_decode", "options", "hot", "desc")

    def __init__(self, step: AttnPlan, call: PagedCall, num_splits: Optional[int] = None):
        # the per-layer hot path: layer signature -> closures over every argument but q/k/v/out and the
        # step's addresses
        self.hot: dict[tuple, tuple] = {}
        device = step.cache_seqlens.device
        hkv, d, dv = call.num_kv_heads, call.head_dim, call.v_head_dim
        self.group = group = call.num_q_heads // hkv
        batch = step.page_table.shape[0]
        max_q = int(step.max_seqlen_q)
        self.invariant = invariant = call.batch_invariant
        self.phase = phase = "decode" if max_q <= 1 and not invariant else "prefill"
        # batch-invariant mode: no split-K (each row's keys reduced in one fixed order)
        if invariant and num_splits not in (None, 1):
            raise ValueError(f"batch-invariant mode runs without split-K; got num_splits={num_splits}")
        if num_splits is not None and (num_splits < 1 or num_splits & (num_splits - 1)):
            raise ValueError(f"num_splits must be a power of two >= 1 (the merge reduces them as one block), "
                             f"got {num_splits}")
        family = device_family(device)
        # K/V by tensor descriptor (TMA): Hopper+ prefill whose key blocks lie in one page and whose head dims
        # fill the tile; a layer's cache strides are checked per layer (_desc_layer_ok)
        bn_desc = TUNING[family]["prefill"][1] if "prefill_ptr" in TUNING[family] else 0
        self.desc = (TritonProvider.tensor_descriptors if TritonProvider.tensor_descriptors is not None
                     else family == "cuda_sm90" and _cuda_major(device.index) == 9) and _descriptors_supported() \
            and "prefill_ptr" in TUNING[family] and phase == "prefill" and not invariant and not call.mla \
            and step.page_size % bn_desc == 0 and d == _pow2(d) <= 128 and dv == _pow2(dv) <= 128
        if self.desc:  # Triton allocates 256 B of descriptor scratch per program on every launch: bounded here
            programs = batch * triton_cdiv(max(max_q, 1) * group, TUNING[family]["prefill"][0]) * hkv
            self.desc = programs <= _DESC_MAX_PROGRAMS
        which = phase if self.desc or "prefill_ptr" not in TUNING[family] or phase != "prefill" else "prefill_ptr"
        block_m, self.block_n, self.warps, self.stages, self.options = tile_config(family, which)
        self.block_m = block_m = max(block_m, _pow2(group)) if phase == "decode" else block_m
        # absorbed MLA decode: its own kernel (latent rows loaded once for scores and values); other MLA
        # steps (extend, verify, batch-invariant) run the general kernel over the same views
        d_rope = d - dv
        self.mla_decode = mla_kernel_fits(call) and not invariant
        if self.mla_decode:  # every absorbed-MLA step (decode, extend, verify) runs the MLA kernel
            which = "mla_wide" if call.num_q_heads >= 64 else "mla_decode"
            block_m, self.block_n, self.warps, self.stages, self.options = tile_config(device_family(device), which)
            self.block_m = block_m
            tiles = triton_cdiv(max(max_q, 1) * call.num_q_heads, block_m)
            self.num_splits = num_splits or TritonProvider._num_splits(
                device, batch, tiles, max_q, step.page_table.shape[1] * step.page_size)
            self.grid = (batch, tiles, self.num_splits)
            self.bd, self.bdv = d, dv
            self.static = dict(PAGE=step.page_size, D_C=dv, D_R=d_rope, BLOCK_H=block_m, BLOCK_N=self.block_n,
                               NUM_SPLITS=self.num_splits, WRITE_LSE=call.return_lse)
            self.fast = {}
            return
        self.num_splits = 1 if invariant else num_splits or TritonProvider._num_splits(
            device, batch, hkv, max_q, step.page_table.shape[1] * step.page_size)
        # aligned tiles (batch-invariant mode) may start up to block_m - 1 rows before the first query
        tiles = triton_cdiv(max(max_q, 1) * group + (block_m - 1 if invariant else 0), block_m)
        self.grid = (batch, tiles, hkv * self.num_splits)
        self.bd, self.bdv = _pow2(d), _pow2(dv)
        left, right = call.window
        self.static = dict(
            WIN_LEFT=left, WIN_RIGHT=right, PAGE=step.page_size, GROUP=group, D=d, DV=dv, BLOCK_D=self.bd,
            BLOCK_DV=self.bdv, BLOCK_M=block_m, BLOCK_N=self.block_n, NUM_SPLITS=self.num_splits, CAUSAL=call.causal,
            HAS_SOFTCAP=call.softcap > 0, WRITE_LSE=call.return_lse, ALIGN_ROWS=invariant,
            # unmasked fully-visible key blocks in prefill; decode and batch-invariant mode keep one masked loop
            # (the split did not measure faster in decode; invariant mode must not round a row differently
            # by where its chunk's tile starts)
            SPLIT_MASK=phase == "prefill" and not invariant,
        )
        # compiled-kernel launchers, one per variant (tokens, sinks/ALiBi/FP8/dtype) the layers use: the
        # first call of a variant binds through Triton's JIT, the rest launch directly
        self.fast: dict[tuple, tuple] = {}


# per-layer arguments of the attention kernel (the hot closure takes them per call; everything else is fixed
# for the configuration or read from the step's address slots)
_LAYER_TENSORS = ("SINKS", "ALIBI", "KDS", "VDS")
_STEP_SLOTS = {"PT": 0, "SEQ": 1, "CUQ": 2}


class TritonLaunch(PagedLaunch):
    """One step's sub-plan x one layer configuration: the step's tensors and their device addresses over
    a LaunchConfig (tiles, split count, grid, armed launchers) shared with every step of that shape."""

    __slots__ = ("cfg", "addrs")

    def __init__(self, provider: "TritonProvider", step: AttnPlan, call: PagedCall, cfg: LaunchConfig,
                 addrs: Optional[tuple[int, int, int]]):
        PagedLaunch.__init__(self, provider, step, call)
        self.cfg = cfg
        self.addrs = addrs  # (page_table, cache_seqlens, cu_seqlens_q) device addresses, the closures' S

    def __getattr__(self, name):  # the configuration's decisions read as the launch's (tests, benchmarks)
        if name in LaunchConfig.__slots__:
            return getattr(self.cfg, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor, *,
            layer: LayerArgs = NO_LAYER_ARGS):
        """PagedLaunch.run with a per-layer hot path: the layers of a step repeat one signature (shapes,
        strides, dtypes, devices, 16-byte alignment, the bound layer tensors' specialisation), and so do the
        steps of one configuration, so a signature that passed the checks and armed the compiled launchers
        once is looked up in one dict and launched with device addresses (the step's read from ``addrs``,
        the layer's bound tensors from ``layer``). LSE calls and MLA take the checked path every call."""
        cfg = self.cfg
        if cfg.desc:
            _ensure_scratch_allocator()
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

    def _execute(self, q, k_cache, v_cache, out, layer: LayerArgs):
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
               cfg.desc and q.dtype in _DESC_DTYPES and _desc_layer_ok(k_cache, v_cache, step.page_size))
        fast = cfg.fast.get(sig)
        if fast is None:
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

    def _launchers(self, sig: tuple, q: torch.Tensor, total_q: int, layer: LayerArgs, per_head: bool):
        from .kernels import _merge_splits, _mla_attn_kernel, _paged_attn_kernel

        step, cfg = self.step, self.cfg
        has_sinks, has_alibi, has_descale = layer.sinks is not None, layer.alibi_slopes is not None, layer.has_descale
        # the step's own part of the specialisation: its int arguments and its tensors' alignment
        spec_key = (sig, total_q, self.call.num_q_heads, step.page_table.stride(0), step.page_table.shape[0],
                    step.page_table.dtype, step.cache_seqlens.dtype, step.cu_seqlens_q.dtype, _al(step.page_table),
                    _al(step.cache_seqlens), _al(step.cu_seqlens_q))
        # the CPU interpreter mis-evaluates bf16 dots (numpy has no bf16): upcast there only
        fp32_dot = q.dtype == torch.float32 or (_interpreting() and q.dtype == torch.bfloat16)
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


# fp32 (the IEEE-dot path) spills tens of KB per thread at 128-row tiles with descriptors (AOT ptxas, sm_90a):
# it takes the pointer kernel of the same tiles
_DESC_DTYPES = (torch.bfloat16, torch.float16)


# descriptor scratch per launch = programs x 2 x 128 B (16 MiB at this bound); larger grids (a long chunk in a
# big mixed batch) take the pointer kernel rather than a large transient allocation per layer
_DESC_MAX_PROGRAMS = 1 << 16


@functools.lru_cache(maxsize=None)
def _cuda_major(index) -> int:  # descriptors are measured on Hopper (sm90) only
    return torch.cuda.get_device_capability(index)[0]


@functools.lru_cache(maxsize=None)
def _descriptors_supported() -> bool:
    """Device-side tensor descriptors and the scratch allocator they need: Triton >= 3.4 (3.3 has neither
    ``tl.make_tensor_descriptor`` nor a ContextVar allocator)."""
    import triton.language as tl
    from triton.runtime import _allocation

    return hasattr(tl, "make_tensor_descriptor") and hasattr(_allocation._allocator, "get") and \
        hasattr(_allocation, "NullAllocator")


def _desc_layer_ok(k_cache: torch.Tensor, v_cache: torch.Tensor, page: int) -> bool:
    """Whether a layer's [pages, page, Hkv, D] caches can be read by tensor descriptor as [slots, columns]:
    pages laid end to end (stride(0) = page x stride(1)), every head inside its slot's row (a head-major cache
    permuted to this shape is not), 16-byte aligned base and row/head strides (TMA's rules), and slot rows
    indexable in int32."""
    for c in (k_cache, v_cache):
        st, elt = c.stride(), c.element_size()
        if st[0] != page * st[1] or st[3] != 1 or (c.shape[2] - 1) * st[2] + c.shape[3] > st[1] \
                or (st[1] * elt) % 16 or (st[2] * elt) % 16 or c.data_ptr() % 16 or c.shape[0] * page >= 2 ** 31:
            return False
    return True


def _ensure_scratch_allocator() -> None:
    """Device-side tensor descriptors need Triton's global-scratch allocator (the launcher asks it for 128
    bytes per descriptor per program on every launch). Where the calling thread's context has none set,
    set torch's caching allocator (what Triton's own tests use); one set by the engine is left alone."""
    global _ALLOCATION
    if _ALLOCATION is None:
        from triton.runtime import _allocation

        _ALLOCATION = _allocation
    if isinstance(_ALLOCATION._allocator.get(), _ALLOCATION.NullAllocator):
        _ALLOCATION._allocator.set(_torch_scratch)


_ALLOCATION = None  # triton.runtime._allocation, imported on first use


def _torch_scratch(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device=_scratch_device())


def _scratch_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device())


def _al(t: torch.Tensor) -> bool:
    """16-byte alignment of a tensor's data, which Triton specialises pointer arguments on."""
    return (t.data_ptr() & 15) == 0
