"""Every key a kept Triton launch is found by: what a compiled launch depends on, spelled once.

The caches they feed, two levels plus the launchers they share:

- ``TritonProvider._configs``: ``step_signature`` -> LaunchConfig (tiles, split count, grid: variants.step_variant);
- ``LaunchConfig.layers``: ``layer_signature`` -> step_launch.Armed (the compiled launchers of that layer
  signature, and its hot closures bound to device addresses once armed);
- ``TritonProvider._launchers``: ``launch_signature`` -> FastLaunch, one per compiled specialisation, shared by
  every configuration and layer signature that launches it (a new step shape re-uses an armed launcher);
- ``TritonProvider._warmed``: ``warm_signature``, the layer kinds warm-up has compiled;
- ``paging._LAUNCHERS``: ``token_pages_signature``.

A launcher is armed unchecked (launch.FastLaunch, check=False): Triton specialises a compiled kernel on every
tensor argument's dtype and 16-byte alignment and every int argument's value class (== 1, % 16; 32/64-bit), the
constexprs aside (docs/triton_launch.md). So a key must hold every input of what it selects; a field left out
silently re-uses a wrong specialisation. tests/test_triton_signature.py changes each field alone and asserts a
new key. The keys are plain tuples built inline (the layer signature runs per layer, on the hot path): cost is
one tuple of C-level attribute reads, no sorting, no hashing of dataclasses (call_id stands for LayerConsts).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...api import LayerConsts, LayerTensors, PagedStep, call_id

# layer_signature's field that holds the four tensors' alignment: True when all four are 16-byte aligned (the
# hot path arms only then), else a tuple of four bools
LAYER_ALIGNED = 16


def step_signature(step: PagedStep, call: LayerConsts, num_splits: Optional[int], addrs: tuple[int, int, int]) -> tuple:
    """The LaunchConfig key: everything a configuration (tiles, split count, grid, step constexprs, the step
    arguments its launchers specialise on) depends on. ``addrs``: (page_table, cache_seqlens, cu_seqlens_q)
    data_ptr(), which the caller reads once per step (the hot closures take them as their step slots).
    Raises AttributeError / TypeError on non-tensors.

    Fields, and why each is there:
      call_id(call)                 every LayerConsts field (heads, dims, scale, window, softcap, flags):
                                    tiles, grid, constexprs
      page_table / cache_seqlens / cu_seqlens_q: shape, stride, dtype, device index
                                    batch (grid axis 0), max pages (split count); the table's row stride
                                    (an int argument); pointer dtypes; the device (family, compute units)
      max_seqlen_q                  phase (decode / prefill), row tiles, split-K off in prefill
      page_size                     PAGE constexpr, max keys
      num_splits                    a forced split count (tests, benchmarks)
      three 16-byte alignments      the step tensors' pointer specialisation
    """
    pt, cs, cu = step.page_table, step.cache_seqlens, step.cu_seqlens_q
    # call_id's memo read inline (one call frame less per step; call_id itself on the first sight of a call)
    cid = call.__dict__.get("_vxa_id")
    return (
        call_id(call) if cid is None else cid,
        pt.shape,
        pt.stride(),
        pt.dtype,
        cs.shape,
        cs.stride(),
        cs.dtype,
        cu.shape,
        cu.stride(),
        cu.dtype,
        pt.get_device(),
        cs.get_device(),
        cu.get_device(),
        step.max_seqlen_q,
        step.page_size,
        num_splits,
        (addrs[0] & 15) == 0,
        (addrs[1] & 15) == 0,
        (addrs[2] & 15) == 0,
    )


def step_specialisation(step: PagedStep) -> tuple:
    """The step's own part of a compiled launch's specialisation, fixed for a configuration (its step signature
    holds every field): the page table's row stride and row count (int arguments stride_ptb / batch), the three
    step tensors' dtypes and 16-byte alignment."""
    pt, cs, cu = step.page_table, step.cache_seqlens, step.cu_seqlens_q
    return (
        pt.stride(0),
        pt.shape[0],
        pt.dtype,
        cs.dtype,
        cu.dtype,
        (pt.data_ptr() & 15) == 0,
        (cs.data_ptr() & 15) == 0,
        (cu.data_ptr() & 15) == 0,
    )


def layer_signature(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    layer: LayerTensors,
    qa: int,
    ka: int,
    va: int,
    oa: int,
) -> tuple:
    """The key of a layer's armed launch within a configuration (LaunchConfig.layers); ``qa``..``oa`` the
    tensors' data_ptr() (the caller reads them once: the hot path passes them to the launch too).

    Fields, and why each is there:
      q / k_cache / v_cache / out: shape   total_q (an int argument; grid rows are the configuration's), kv_rows,
                                           and check_paged_layer's verdict (a hit skips the checks)
      strides                              int arguments (Triton specialises on == 1 / % 16); the descriptor
                                           decision (descriptors.desc_layer_ok)
      dtypes                               pointer dtypes; FP8 tiles and descale; fp32 dots
      device indices                       the hot closures launch on the armed device
      16-byte alignment                    pointer specialisation (field LAYER_ALIGNED: True, or four bools)
      layer.key                            the bound per-layer tensors (sinks, ALiBi, descales): presence
                                           (HAS_* constexprs), dtype, alignment, per-head descale and its stride
    """
    return (
        q.shape,
        k_cache.shape,
        v_cache.shape,
        out.shape,
        q.stride(),
        k_cache.stride(),
        v_cache.stride(),
        out.stride(),
        q.dtype,
        k_cache.dtype,
        v_cache.dtype,
        out.dtype,
        q.get_device(),
        k_cache.get_device(),
        v_cache.get_device(),
        out.get_device(),
        ((qa | ka | va | oa) & 15) == 0 or ((qa & 15) == 0, (ka & 15) == 0, (va & 15) == 0, (oa & 15) == 0),
        layer.key,
    )


def launch_extras(
    lse: Optional[torch.Tensor], o_part: Optional[torch.Tensor], l_part: Optional[torch.Tensor], use_desc: bool
) -> tuple:
    """What a launch specialises on beyond its layer signature, read per checked launch: the alignment of the
    LSE output and of the split-K workspace slices (fresh or provider-owned buffers: None when absent), and
    whether this layer reads K/V by descriptor (derived from the layer signature, kept explicit)."""
    return (
        None if lse is None else (lse.data_ptr() & 15) == 0,
        None if o_part is None else ((o_part.data_ptr() & 15) == 0, (l_part.data_ptr() & 15) == 0),
        use_desc,
    )


def launch_specialisation(layer_sig: tuple, extras: tuple, step_spec: tuple, num_q_heads: int) -> tuple:
    """Everything a compiled paged / MLA / merge launch specialises on besides its constexprs, grid, warps,
    stages and options: the layer signature, the extras, the step's part and the query heads (an int argument)."""
    return layer_sig, extras, step_spec, num_q_heads


def launch_signature(
    fn: Any, grid: tuple, consts: dict, warps: int, stages: int, spec: tuple, options: Optional[dict]
) -> tuple:
    """The provider's FastLaunch key: the kernel, grid, constexprs, warps, stages, compile options and ``spec``
    (launch_specialisation). constexprs / options in insertion order (the callers build them in a fixed order;
    a different order only costs another launcher, never a wrong one): no sort."""
    return (fn, tuple(grid), tuple(consts.items()), warps, stages, spec, tuple(options.items()) if options else ())


def warm_signature(
    call: LayerConsts,
    page_size: int,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    layer: LayerTensors,
) -> tuple:
    """A layer kind as warm-up compiles it (TritonProvider._warmed): the call, page size, the four tensors'
    dtypes and strides, the device and the bound layer tensors. Steps are dummies, so no step field."""
    return (
        call_id(call),
        page_size,
        q.dtype,
        k_cache.dtype,
        v_cache.dtype,
        out.dtype,
        q.stride(),
        k_cache.stride(),
        v_cache.stride(),
        out.stride(),
        q.get_device(),
        layer.key,
    )


def int_class(v: int) -> tuple:
    """What Triton specialises an int argument on (docs/triton_launch.md): == 1, % 16, 32-bit range."""
    return (v == 1, v % 16 == 0, -(2**31) <= v < 2**31)


def token_pages_signature(
    batch: int,
    page_size: int,
    token_table: torch.Tensor,
    rows: torch.Tensor,
    has_rows: bool,
    out: torch.Tensor,
    n_pages: int,
) -> tuple:
    """paging._LAUNCHERS' key: the grid (batch), constexprs (page size, row index or not), the device, the
    pointers' dtypes and alignment, and the int arguments' classes (row stride, pages, table rows)."""
    return (
        batch,
        page_size,
        has_rows,
        token_table.device,
        token_table.dtype,
        rows.dtype,
        token_table.data_ptr() & 15 == 0,
        rows.data_ptr() & 15 == 0,
        out.data_ptr() & 15 == 0,
        int_class(token_table.stride(0)),
        int_class(n_pages),
        int_class(token_table.shape[0]),
    )
