"""Intel lowering check: every Triton kernel specialisation the provider launches, compiled
ahead of time for Intel GPUs, without an Intel GPU.

Runs in the ``intel`` venv (``ci/venvs.sh intel``: triton-xpu 3.3.0b1 + Debian sid's ocloc/IGC in a
private sysroot). Per case: Intel's Triton lowers the kernel to SPIR-V with the target's own device
properties (a child process with a timeout: some lowerings abort the process), then ``ocloc compile``
turns it into native code with the GRF mode the provider requests, and ``ocloc disasm`` gives IGC's
own figures (``.ze_info``: spill size, GRF count, SIMD width) and the ISA (``dpas.`` count, fp64).

Rules (a failed rule fails the job): compile error or timeout; fp64 on dg2/mtl; no DPAS in the paged
or MLA kernel in bf16/fp16 on bmg/pvc/lnl; SLM over the device limit; work-group over the device limit;
a launched kernel without cases, or a kernel parameter without a type here; spill > 0 in any bf16/fp16
case on bmg/pvc/lnl, unless it is within a residual recorded in KNOWN_SPILL (status "spill-known";
--strict fails it too). Spills elsewhere (fp32; dg2/mtl) are reported only.

The launched specialisations are the provider's own: tiles, warps, stages, the xpu GRF mode and every constexpr
come from variants.launch_variant (and its merge / write / paging siblings), the functions the provider's
launch path and warm-up call, over the tables of tuning.py (TUNING, MLA_LATENT_TILES, PAGED_D_TILES,
ALIBI_AS_DOT). Both files import no torch (this venv has none) and are loaded here by file path; this script
keeps only the case matrix (which layer kinds and points to compile) and the argument types. The kernels are
loaded from kernels.py's file. tests/test_triton_variants.py checks every case against what the provider's
warm-up launches for the same layer kind.

Usage: python ci/intel_lowering.py --sysroot DIR [--jobs 2] [--targets bmg,pvc,lnl,dg2,mtl]
       [--only REGEX] [--json FILE] [--md FILE] [--tile PHASE=M,N,WARPS,STAGES[,GRF]] [--timeout S]
       [--strict] [--sweep]      (or: bash ci/intel_lowering.sh run ...; docs/intel_lowering.md)
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import copy
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# VXA_INTEL_KERNELS: lower another copy of kernels.py (experiments); the job itself uses the package's
KERNELS = Path(
    os.environ.get("VXA_INTEL_KERNELS") or ROOT / "vllm_xpu_attn" / "kernels" / "providers" / "triton" / "kernels.py"
)
PROVIDER = ROOT / "vllm_xpu_attn" / "kernels" / "providers" / "triton" / "provider.py"
TRITON_DIR = ROOT / "vllm_xpu_attn" / "kernels" / "providers" / "triton"
TUNING_PY = TRITON_DIR / "tuning.py"  # the tile tables and rules (torch-free)
VARIANTS_PY = TRITON_DIR / "variants.py"  # the constexprs of a variant (torch-free)
STEP_LAUNCH = TRITON_DIR / "step_launch.py"  # launches the paged/MLA kernels
PAGING = TRITON_DIR / "paging.py"  # launches the token->page kernel


def _load(name: str, path: Path):
    """A torch-free module of the package by file path (importing the package would import torch). Registered
    in sys.modules first: variants.py finds tuning.py there, and dataclasses need their module."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


T = _load("vxa_triton_tuning", TUNING_PY)
V = _load("vxa_triton_variants", VARIANTS_PY)

# Device properties as torch.xpu.get_device_capability() reports them (what Intel's Triton is given on a
# real device). architecture: the SYCL enum value (architectures.def, intel-sycl-rt wheel). The DPAS /
# 2D-block / bf16-conversion flags are the ocloc device's OpenCL extensions (filled in at start-up).
# slm: shared local memory per work-group (pvc, dg2, mtl documented; bmg/lnl believed 128 KB).
TARGETS = {
    "bmg": dict(
        ocloc="bmg-g21",
        arch=0x0500400400,
        sub_group_sizes=[16, 32],
        has_fp64=True,
        slm=128 << 10,
        max_wg=1024,
        max_sg=64,
        dpas=True,
    ),
    "pvc": dict(
        ocloc="pvc",
        arch=0x030F000700,
        sub_group_sizes=[16, 32],
        has_fp64=True,
        slm=128 << 10,
        max_wg=1024,
        max_sg=64,
        dpas=True,
    ),
    "lnl": dict(
        ocloc="lnl-m",
        arch=0x0501000400,
        sub_group_sizes=[16, 32],
        has_fp64=True,
        slm=128 << 10,
        max_wg=1024,
        max_sg=64,
        dpas=True,
    ),
    "dg2": dict(
        ocloc="acm-g10",
        arch=0x030DC00800,
        sub_group_sizes=[8, 16, 32],
        has_fp64=False,
        slm=64 << 10,
        max_wg=1024,
        max_sg=128,
        dpas=False,
    ),
    "mtl": dict(
        ocloc="mtl-h",
        arch=0x0311C00400,
        sub_group_sizes=[8, 16, 32],
        has_fp64=False,
        slm=64 << 10,
        max_wg=1024,
        max_sg=128,
        dpas=False,
    ),
}
# What Intel's arch_parser.c returns per enum value (the backend's device_arch)
ARCH_NAMES = {0x030F000700: "pvc", 0x0500400400: "bmg", 0x0501000400: "lnl", 0x030DC00800: "dg2", 0x0311C00400: "mtl"}
GRF_FLAGS = {
    "small": "-cl-intel-128-GRF-per-thread",
    "large": "-cl-intel-256-GRF-per-thread",
    "auto": "-cl-intel-enable-auto-large-GRF-mode",
}
# intel driver.c: with no GRF mode requested, a kernel spilling more than this is rebuilt at 256 GRF
DRIVER_SPILL_RETRY = 1000
# The gate: every bf16/fp16 specialisation on the DPAS targets must lower with zero spill (GATED_TARGETS; fp32,
# a correctness mode, and dg2/mtl, no DPAS, are reported only). KNOWN_SPILL: the gated cases that still spill,
# bytes per (target, case name) as recorded; such a case spilling at most its entry is "spill-known" (a
# kernel change is needed, docs/intel_lowering.md), more fails; test_zero_spill_target xfails while any remain.
GATED_TARGETS = ("bmg", "pvc", "lnl")
KNOWN_SPILL: dict[tuple[str, str], int] = {}  # none: every gated case lowers without spill
TORCH_TO_TRITON = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "e4m3": "fp8e4nv", "e5m2": "fp8e5"}
FMAX = {"e4m3": 448.0, "e5m2": 57344.0}


# ---------------------------------------------------------------------------------------------------
# the provider's tile tables (tuning.py), copied so that --tile overrides and sweeps can edit them
def read_tuning() -> dict:
    """TUNING, with the MLA kernel's latent tiles (MLA_LATENT_TILES) under the key "mla_latent" and the paged
    kernel's head-dim tiles (PAGED_D_TILES) under "paged_d"."""
    return dict(
        copy.deepcopy(T.TUNING), mla_latent=copy.deepcopy(T.MLA_LATENT_TILES), paged_d=copy.deepcopy(T.PAGED_D_TILES)
    )


def tables(tuning: dict):
    """variants.Tables over a read_tuning() dict (edited or not)."""
    return V.Tables(tuning=tuning, mla_latent=tuning["mla_latent"], paged_d=tuning["paged_d"])


pow2 = T.pow2


def _grf(v) -> str:
    return v.options.get("grf_mode", "default")


# ---------------------------------------------------------------------------------------------------
# the case matrix. Argument types: what the provider passes (q bf16/fp16/fp32; caches of q's dtype or
# fp8; int32 tables; fp32 scales, sinks, LSE and split-K workspace; None for an absent optional
# pointer). Strides and caching-allocator pointers are 16-divisible (Triton's "D" specialisation).
def _ptr(t):
    return f"*{t}"


def _runtime_types(kernel: str, *, q: str, kv: str, sinks=False, alibi=False, fp8=False, lse=False, splits=1) -> dict:
    qt, kt = TORCH_TO_TRITON[q], TORCH_TO_TRITON[kv]
    opt = lambda on: "*fp32" if on else "none"  # noqa: E731 - an absent optional pointer is passed as None
    if kernel == "_paged_attn_kernel":
        return dict(
            Q=_ptr(qt),
            K=_ptr(kt),
            V=_ptr(kt),
            PT="*i32",
            SEQ="*i32",
            CUQ="*i32",
            SINKS=opt(sinks),
            ALIBI=opt(alibi),
            KDS=opt(fp8),
            VDS=opt(fp8),
            O=_ptr(qt),
            LSE=opt(lse),
            OP=opt(splits > 1),
            LP=opt(splits > 1),
            ERR="*i32",
            scale="fp32",
            softcap="fp32",
        )
    if "mla" in kernel:  # the absorbed-MLA kernel, whatever its name (mla_kernel_name)
        return dict(
            Q=_ptr(qt),
            KV=_ptr(kt),
            PT="*i32",
            SEQ="*i32",
            CUQ="*i32",
            KDS=opt(fp8),
            O=_ptr(qt),
            LSE=opt(lse),
            OP=opt(splits > 1),
            LP=opt(splits > 1),
            ERR="*i32",
            scale="fp32",
        )
    if kernel == "_merge_splits":
        return dict(OP="*fp32", LP="*fp32", O=_ptr(qt), LSE=opt(lse), SINKS=opt(sinks), CUQ="*i32")
    if kernel == "_merge_state_kernel":
        return dict(OA=_ptr(qt), LA="*fp32", OB=_ptr(qt), LB="*fp32", SINKS="*fp32", O=_ptr(qt), L="*fp32")
    if kernel == "_write_kv_kernel":
        return dict(X=_ptr(qt), C=_ptr(kt), SLOT="*i64", SCALE="*fp32", ERR="*i32")
    if kernel == "_token_pages_kernel":  # SGLang's req_to_token (int32) rows by req_pool_indices (int64)
        return dict(TT="*i32", ROWS="*i64", OUT="*i32", ERR="*i32", n_pages="i32")
    raise KeyError(kernel)


# int arguments that are not 16-divisible in general (sizes, per-head descale strides, table widths)
UNALIGNED_INTS = {"total_q", "num_q_heads", "batch", "total", "stride_ptb", "kv_rows", "pt_cols", "n_slots", "n_rows"}


def _case(
    target,
    kernel,
    name,
    types,
    consts,
    warps,
    stages,
    grf,
    *,
    phase,
    d,
    q,
    kv,
    feats,
    need_dpas=False,
    zero_spill=False,
    unaligned=(),
) -> dict:
    return dict(
        name=name,
        target=target,
        kernel=kernel,
        types=types,
        constexprs=consts,
        num_warps=warps,
        num_stages=stages,
        grf_mode=grf,
        phase=phase,
        head_dim=d,
        dtype=q,
        kv_dtype=kv,
        features=feats,
        need_dpas=need_dpas and TARGETS[target]["dpas"] and q in ("bf16", "fp16"),
        zero_spill=zero_spill or (target in GATED_TARGETS and q in ("bf16", "fp16")),
        unaligned=sorted(UNALIGNED_INTS | set(unaligned)),
    )


def paged_kind_point(
    *,
    phase,
    d=128,
    q="bf16",
    kv=None,
    group=4,
    page=64,
    softcap=False,
    sinks=False,
    window=None,
    alibi=False,
    splits=1,
    invariant=False,
    lse=False,
    per_head=False,
    tag=None,
):
    """(variants.LayerKind, variants.Point, page size) of a paged case: ``group`` query heads on one KV head (two
    with per-head descales, which need more than one value), head dim ``d``, causal, softcap 30 if on."""
    kv = kv or q
    fp8 = kv in V.FP8_NAMES
    kind = V.LayerKind(
        num_q_heads=group * (2 if per_head else 1),
        num_kv_heads=2 if per_head else 1,
        head_dim=d,
        v_head_dim=d,
        window=tuple(window) if window else (-1, -1),
        softcap=30.0 if softcap else 0.0,
        return_lse=lse,
        batch_invariant=invariant,
        q_dtype=q,
        kv_dtype=kv,
        sinks=sinks,
        alibi=alibi,
        descale=fp8,
        descale_per_head=fp8 and per_head,
    )
    # batch-invariant mode runs the prefill tiles, no split-K; xpu has no descriptor loads
    return kind, V.Point("prefill" if invariant else phase, splits, False), page


def paged_case(
    tuning,
    target,
    *,
    phase,
    d=128,
    q="bf16",
    kv=None,
    group=4,
    page=64,
    softcap=False,
    sinks=False,
    window=None,
    alibi=False,
    splits=1,
    invariant=False,
    lse=False,
    per_head=False,
    tag=None,
) -> dict:
    """One TritonLaunch specialisation of _paged_attn_kernel (variants.launch_variant on the xpu family)."""
    kv = kv or q
    fp8 = kv in V.FP8_NAMES
    kind, point, page = paged_kind_point(
        phase=phase,
        d=d,
        q=q,
        kv=kv,
        group=group,
        page=page,
        softcap=softcap,
        sinks=sinks,
        window=window,
        alibi=alibi,
        splits=splits,
        invariant=invariant,
        lse=lse,
        per_head=per_head,
    )
    phase = point.phase
    attn, _ = V.launch_variant("xpu", kind, point, page_size=page, tables=tables(tuning))
    left, right = kind.window
    feats = [
        f
        for f, on in (
            ("softcap", softcap),
            ("sinks", sinks),
            (f"window{left}", window),
            ("alibi", alibi),
            (f"kv-{kv}", kv != q),
            (f"splits{splits}", splits > 1),
            ("invariant", invariant),
            ("lse", lse),
            ("per-head-descale", fp8 and per_head),
            (f"page{page}", page != 64),
        )
        if on
    ]
    name = f"paged/{tag or phase}/d{d}/{q}" + ("/" + "+".join(feats) if feats else "")
    types = _runtime_types("_paged_attn_kernel", q=q, kv=kv, sinks=sinks, alibi=alibi, fp8=fp8, lse=lse, splits=splits)
    return _case(
        target,
        "_paged_attn_kernel",
        name,
        types,
        attn.constexprs,
        attn.num_warps,
        attn.num_stages,
        _grf(attn),
        phase=phase,
        d=d,
        q=q,
        kv=kv,
        feats=feats,
        need_dpas=True,
        unaligned=["stride_ds_b"] if fp8 and per_head else [],
    )


def mla_kernel_name() -> str:
    return next((n for n in launched_kernels() if "mla" in n), "_mla_attn_kernel")


def mla_kind_point(*, d_c=512, d_r=64, q="bf16", kv=None, splits=1, lse=False):
    """(LayerKind, Point, page size) of an MLA case: 16 heads (the "mla_decode" tiles; "mla_wide" is the same
    entry, test_shipped_tiles_are_the_sweeps_choice), one latent cache, decode."""
    kv = kv or q
    kind = V.LayerKind(
        num_q_heads=16,
        num_kv_heads=1,
        head_dim=d_c + d_r,
        v_head_dim=d_c,
        return_lse=lse,
        mla=True,
        q_dtype=q,
        kv_dtype=kv,
        descale=kv in V.FP8_NAMES,
    )
    return kind, V.Point("decode", splits, False), 64


def mla_case(tuning, target, *, d_c=512, d_r=64, q="bf16", kv=None, splits=1, lse=False) -> dict:
    """The absorbed-MLA kernel (TritonLaunch when mla_kernel_fits: one latent cache; every absorbed step,
    decode/extend/verify, with the "mla_decode" tiles; split-K in decode)."""
    kv = kv or q
    fp8 = kv in V.FP8_NAMES
    kind, point, page = mla_kind_point(d_c=d_c, d_r=d_r, q=q, kv=kv, splits=splits, lse=lse)
    attn, _ = V.launch_variant("xpu", kind, point, page_size=page, tables=tables(tuning))
    feats = [f for f, on in ((f"kv-{kv}", kv != q), (f"splits{splits}", splits > 1), ("lse", lse)) if on]
    kernel = mla_kernel_name()
    types = _runtime_types(kernel, q=q, kv=kv, fp8=fp8, lse=lse, splits=splits)
    return _case(
        target,
        kernel,
        f"mla/d{d_c}+{d_r}/{q}" + ("/" + "+".join(feats) if feats else ""),
        types,
        attn.constexprs,
        attn.num_warps,
        attn.num_stages,
        _grf(attn),
        phase="mla_decode",
        d=d_c + d_r,
        q=q,
        kv=kv,
        feats=feats,
        need_dpas=True,
    )


def merge_kind_point(*, d=128, splits=4, q="bf16"):
    """(LayerKind, Point, page size) whose split-K merge a merge case compiles: sinks and LSE on."""
    kind, point, page = paged_kind_point(phase="decode", d=d, q=q, sinks=True, lse=True, splits=splits)
    return kind, point, page


def merge_splits_case(target, d=128, splits=4, q="bf16") -> dict:
    kind, point, page = merge_kind_point(d=d, splits=splits, q=q)
    _, m = V.launch_variant("xpu", kind, point, page_size=page)
    return _case(
        target,
        "_merge_splits",
        f"merge_splits/d{d}/{q}/splits{splits}+sinks+lse",
        _runtime_types("_merge_splits", q=q, kv=q, sinks=True, lse=True),
        m.constexprs,
        m.num_warps,
        m.num_stages,
        _grf(m),
        phase="merge",
        d=d,
        q=q,
        kv=q,
        feats=["sinks", "lse"],
    )


def merge_state_case(target, d=128, q="bf16") -> dict:
    # provider: _merge_state_kernel[(t, h)](...) - Triton's defaults (4 warps; 2 stages on xpu)
    return _case(
        target,
        "_merge_state_kernel",
        f"merge_state/d{d}/{q}/sinks",
        _runtime_types("_merge_state_kernel", q=q, kv=q),
        V.merge_state_consts(d, True),
        4,
        2,
        "default",
        phase="merge",
        d=d,
        q=q,
        kv=q,
        feats=["sinks"],
    )


def write_kv_case(target, d=128, x="bf16", cache="bf16", page=64) -> dict:
    # provider: _write_kv_kernel[(T, H)](...) - Triton's defaults; H=8 KV heads
    quant = cache in V.FP8_NAMES
    return _case(
        target,
        "_write_kv_kernel",
        f"write_kv/d{d}/{x}->{cache}",
        _runtime_types("_write_kv_kernel", q=x, kv=cache),
        V.write_kv_consts(8, d, page, quant, FMAX.get(cache, 0.0)),
        4,
        2,
        "default",
        phase="write_kv",
        d=d,
        q=x,
        kv=cache,
        feats=["quant"] if quant else [],
    )


def token_pages_case(target, page=64) -> dict:
    # paging.py: FastLaunch of variants.token_pages_variant (SGLang's rows by req_pool_indices)
    v = V.token_pages_variant(page, True)
    return _case(
        target,
        "_token_pages_kernel",
        f"token_pages/page{page}",
        _runtime_types("_token_pages_kernel", q="bf16", kv="bf16"),
        v.constexprs,
        v.num_warps,
        v.num_stages,
        _grf(v),
        phase="paging",
        d=0,
        q="bf16",
        kv="bf16",
        feats=["rows"],
        unaligned=("stride_tt", "n_pages"),
    )


def case_specs(tuning: dict) -> list[tuple[str, dict]]:
    """The matrix of one target: (case builder in BUILDERS, its keyword arguments), in order."""
    out = []
    for phase in ("decode", "prefill"):
        P = lambda **kw: ("paged", dict(phase=phase, **kw))  # noqa: E731
        out += [P(d=d) for d in (64, 128, 256)]
        out += [
            P(softcap=True, sinks=True),
            P(window=(127, 0)),
            P(kv="e4m3"),
            P(kv="e5m2"),
            P(q="fp16"),
            P(q="fp32"),
            P(alibi=True),
            P(page=16),
        ]
        # D 256 and D 64 with their models' features (their own tiles): D_TILE_VARIANTS
        out += [P(d=d, **kw) for d, kws in D_TILE_VARIANTS.items() for kw in kws if kw]
        out += [P(d=d, **kw) for d in D_TILE_VARIANTS for kw in HEAD_DIM_DTYPES]
    P = lambda **kw: ("paged", kw)  # noqa: E731
    out += [
        P(phase="decode", splits=4, lse=True),
        P(phase="decode", d=256, splits=4, lse=True),
        P(phase="decode", kv="e4m3", per_head=True, splits=4),
        P(phase="prefill", invariant=True, tag="invariant"),
        P(phase="prefill", page=1, tag="varlen"),
    ]
    if "mla_decode" in tuning["xpu"]:
        out += [("mla", {}), ("mla", dict(kv="e4m3", splits=4, lse=True))]
    out += [
        ("merge_splits", {}),
        ("merge_state", {}),
        ("write_kv", {}),
        ("write_kv", dict(cache="e4m3")),
        ("write_kv", dict(cache="e5m2")),
        ("token_pages", {}),
    ]
    return out


BUILDERS = {
    "paged": paged_case,
    "mla": mla_case,
    "merge_splits": lambda tuning, tg, **kw: merge_splits_case(tg, **kw),
    "merge_state": lambda tuning, tg, **kw: merge_state_case(tg, **kw),
    "write_kv": lambda tuning, tg, **kw: write_kv_case(tg, **kw),
    "token_pages": lambda tuning, tg, **kw: token_pages_case(tg, **kw),
}
# the builders whose cases are a layer kind's variant at one point: (LayerKind, Point, page) of their arguments
KIND_POINTS = {"paged": paged_kind_point, "mla": mla_kind_point, "merge_splits": merge_kind_point}


def cases(tuning: dict, targets: list[str]) -> list[dict]:
    return [BUILDERS[b](tuning, tg, **kw) for tg in targets for b, kw in case_specs(tuning)]


# kernels the provider launches on CUDA families only, with the tuning rule that would send one to "xpu": not
# compiled here while that rule keeps it off Intel. _mla_page_kernel (issue #49, docs/mla-kernel.md) is
# tuning.MLA_KERNEL_FORM's "page"/"tma" form; "xpu" has no entry there, so its MLA steps launch _mla_attn_kernel.
CUDA_ONLY_KERNELS = {"_mla_page_kernel": lambda: set(T.MLA_KERNEL_FORM.get("xpu", {}).values()) <= {"gather"}}


def launched_kernels() -> list[str]:
    """The kernels provider.py, step_launch.py and paging.py import from kernels.py (``from .kernels import ...``):
    what they launch, less those only CUDA families launch (CUDA_ONLY_KERNELS, while their rule holds)."""
    names = set()
    for src in (PROVIDER, STEP_LAUNCH, PAGING):
        for node in ast.walk(ast.parse(src.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module == "kernels":
                names |= {alias.name for alias in node.names}
    return sorted(n for n in names if not (n in CUDA_ONLY_KERNELS and CUDA_ONLY_KERNELS[n]()))


# the feature sets compiled at D 256 and D 64 besides D 128's (Gemma 2/3: softcap, sliding window; GPT-OSS: sinks
# with a sliding window), in the matrix and in the head-dim tile sweep ({} = no feature)
D_TILE_VARIANTS = {
    256: [{}, dict(softcap=True, sinks=True), dict(window=(127, 0))],
    64: [{}, dict(sinks=True, window=(127, 0)), dict(softcap=True)],
}
# and the dtypes crossed with D 64 and D 256 (fp16 queries, an FP8 cache; 16-bit dots take other layouts): in the
# matrix, and in the D 64 decode tile sweep
HEAD_DIM_DTYPES = [dict(q="fp16"), dict(kv="e4m3")]


# --sweep: the tile / warp / GRF candidates tried for the zero-spill cases (docs/intel_lowering.md)
SWEEP = {
    "decode": [(16, 16, w, 2, "large") for w in (2, 4, 8, 16)]
    + [(16, 32, w, 2, "large") for w in (2, 4, 8, 16, 32)]
    + [(16, 64, w, 2, "large") for w in (4, 8, 16)]
    + [(16, 32, 4, 2, "small"), (16, 32, 8, 2, "small")],
    "prefill": [(8 * w, 32, w, 2, "large") for w in (2, 4, 8, 16, 32)]
    + [(32, 32, 8, 2, "large"), (64, 32, 16, 2, "large")]
    + [
        (64, 32, 4, 2, "large"),
        (128, 32, 8, 2, "large"),
        (64, 16, 8, 2, "large"),
        (128, 16, 16, 2, "large"),
        (64, 64, 8, 2, "large"),
        (128, 64, 16, 2, "large"),
        (64, 32, 8, 2, "small"),
    ],
}


# "decode_d64": the D 64 decode's own tiles (TUNING "decode_d64"); "mla_decode": (tiles, (BLOCK_DC, BLOCK_DV)) of
# the absorbed-MLA kernel: the latent chunk width and the output columns a program owns (MLA_LATENT_TILES)
# the shipped entries of the CHOSEN_BY_SWEEP phases are the job's choice among their candidates (sweep_choice),
# checked in CI
# D 64 decode candidates compiled with every D 64 feature set and dtype of the matrix (sweep_variants)
SWEEP["decode_d64"] = [(16, n, w, 2, "large") for n in (32, 64) for w in (4, 8)]
SWEEP["mla_decode"] = [
    ((bh, bn, w, 2, "large"), lat)
    for bh, bn, w in ((16, 16, 4), (8, 16, 4), (16, 32, 4), (16, 16, 2))
    for lat in ((512, 512), (128, 128), (64, 128), (64, 64))
]
# "d_tiles:<phase>_d<D>": the paged kernel's head-dim tiles (CHUNK_D, CHUNK_DV) at D (PAGED_D_TILES; 0 = the
# whole head dim), each candidate compiled with every D_TILE_VARIANTS feature set of that D (a candidate must be
# spill-free in all): the D 256 key blocks do not fit 256 GRF whole; D 64 prefill spills with sinks or a window
for _key in ("decode_d256", "prefill_d256"):
    SWEEP[f"d_tiles:{_key}"] = [(0, 0), (0, 128), (0, 64), (128, 128), (64, 128)]
SWEEP["d_tiles:prefill_d64"] = [(0, 0), (0, 32), (32, 64), (32, 32)]
CHOSEN_BY_SWEEP = ("decode_d64", "mla_decode", "d_tiles:decode_d256", "d_tiles:prefill_d256", "d_tiles:prefill_d64")


def sweep_variants(phase: str) -> list[dict]:
    """The feature sets / dtypes each candidate of a sweep phase is compiled with; a candidate must be spill-free
    in all of them to be chosen."""
    if phase.startswith("d_tiles:"):
        return D_TILE_VARIANTS[int(phase.rpartition("_d")[2])]
    if phase == "decode_d64":
        return D_TILE_VARIANTS[64] + HEAD_DIM_DTYPES
    return [{}]


def _rank(phase: str, tiles, tuning: dict) -> tuple:
    """Among zero-spill candidates, the larger the better: MLA: output columns per program (less score
    recompute), head rows, keys, latent chunk, then warps nearest the shipped; paged head-dim tiles: output columns
    per program, then the score chunk (0: whole); paged: the tile's area, then warps nearest the phase's base
    tile."""
    if phase == "mla_decode":
        (bh, bn, w, *_), (dc, dv) = tiles
        return dv, bh, bn, dc, -abs(w - 4)
    if phase.startswith("d_tiles:"):  # output columns per program (less score recompute), then the score chunk
        cd, cdv = (w or 1 << 20 for w in tiles)
        return cdv, cd
    m, n, w, *_ = tiles
    return m * n, -abs(w - tuning["xpu"][phase.partition("_d")[0]][2])


def _shipped(phase: str, tuning: dict):
    """What tuning.py ships for a sweep phase, in the candidates' form."""
    if phase == "mla_decode":
        return tuning["xpu"]["mla_decode"], tuning["mla_latent"]["xpu"]["mla_decode"]
    if phase.startswith("d_tiles:"):
        return tuning["paged_d"].get("xpu", {}).get(phase.split(":", 1)[1], (0, 0))
    return tuning["xpu"].get(phase)


def sweep_choice(sweep: list[dict], tuning: dict, targets: list[str]) -> dict:
    """{phase: shipped, chosen (the best candidate with zero spill and no failure on every DPAS target run)}."""
    out = {}
    for phase in CHOSEN_BY_SWEEP:
        cands = {}
        for r in sweep:
            if r.get("sweep_phase") == phase:
                cands.setdefault(json.dumps(r["sweep_tiles"]), []).append(r)
        dpas = [t for t in targets if TARGETS[t]["dpas"]]
        ok = [
            json.loads(k)
            for k, rs in cands.items()
            if len(rs) == len(dpas) * len(sweep_variants(phase))
            and all(r["status"] != "fail" and r.get("spill", 1) == 0 for r in rs)
        ]
        norm = (lambda t: [list(t[0]), list(t[1])]) if phase == "mla_decode" else list
        chosen = max(ok, key=lambda t: _rank(phase, t, tuning)) if ok else None
        shipped = _shipped(phase, tuning)
        out[phase] = dict(
            shipped=None if shipped is None else norm(shipped), chosen=chosen, candidates=len(cands), zero_spill=len(ok)
        )
    return out


def sweep_cases(tuning: dict, targets: list[str], phases=None, from_shipped: bool = False) -> list[dict]:
    """The sweep's cases. ``from_shipped`` (CI): only the candidates ranked at or above the shipped tiles of a
    CHOSEN_BY_SWEEP phase (_rank), the ones that can decide whether the shipped tiles are the choice."""
    out = []
    for tg in targets:
        for phase, grid in SWEEP.items():
            if phases is not None and phase not in phases:
                continue
            if from_shipped and phase in CHOSEN_BY_SWEEP and _shipped(phase, tuning) is not None:
                shipped = _shipped(phase, tuning)
                if json.dumps(shipped) not in {json.dumps(t) for t in grid}:
                    # the verdict "the shipped tiles are the sweep's choice" needs them among the candidates
                    raise SystemExit(
                        f"[intel] --sweep-from-shipped: the shipped tiles of {phase} {shipped} are not "
                        f"among SWEEP[{phase!r}]'s candidates; add them there"
                    )
                floor = _rank(phase, shipped, tuning)
                grid = [t for t in grid if _rank(phase, t, tuning) >= floor]
            for tiles in grid:
                if phase == "mla_decode":
                    tiles, (dc, dv) = tiles
                    latent = dict(tuning["mla_latent"], xpu=dict(tuning["mla_latent"]["xpu"], mla_decode=(dc, dv)))
                    c = mla_case(dict(tuning, xpu=dict(tuning["xpu"], mla_decode=tiles), mla_latent=latent), tg)
                    label = f" @ {tiles[0]},{tiles[1]}/w{tiles[2]}/{tiles[4]}/dc{dc}/dv{dv}"
                    swept = [list(tiles), [dc, dv]]
                elif phase.startswith("d_tiles:"):
                    key = phase.split(":", 1)[1]
                    base, _, d = key.partition("_d")
                    chunks = dict(tuning["paged_d"], xpu=dict(tuning["paged_d"].get("xpu", {}), **{key: tiles}))
                    for kw in sweep_variants(phase):
                        c = paged_case(dict(tuning, paged_d=chunks), tg, phase=base, d=int(d), **kw)
                        out.append(
                            dict(
                                c,
                                name=c["name"] + f" @ chunks {tiles[0]}/{tiles[1]}",
                                zero_spill=False,
                                sweep=True,
                                sweep_phase=phase,
                                sweep_tiles=list(tiles),
                            )
                        )
                    continue
                else:
                    base, _, d = phase.partition("_d")
                    for kw in sweep_variants(phase):
                        c = paged_case(
                            dict(tuning, xpu=dict(tuning["xpu"], **{phase: tiles})),
                            tg,
                            phase=base,
                            d=int(d or 128),
                            **kw,
                        )
                        out.append(
                            dict(
                                c,
                                name=c["name"] + f" @ {tiles[0]},{tiles[1]}/w{tiles[2]}/{tiles[4]}",
                                zero_spill=False,
                                sweep=True,
                                sweep_phase=phase,
                                sweep_tiles=list(tiles),
                            )
                        )
                    continue
                out.append(
                    dict(c, name=c["name"] + label, zero_spill=False, sweep=True, sweep_phase=phase, sweep_tiles=swept)
                )
    return out


def kernel_params() -> dict:
    """{kernel: (runtime params, constexpr params)} of every launched kernel, read from kernels.py."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vxa_triton_kernels", KERNELS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = {}
    for name in launched_kernels():
        fn = getattr(mod, name)
        out[name] = ([p.name for p in fn.params if not p.is_constexpr], [p.name for p in fn.params if p.is_constexpr])
    return out


def complete(case: dict, params: dict) -> dict:
    """Full signature of a case; a kernel parameter this script does not know is a failure (the kernels
    changed: teach the matrix the new argument)."""
    runtime, constexpr = params[case["kernel"]]
    sig, aligned, unknown = {}, [], []
    for n in runtime:
        if n in case["types"]:
            sig[n] = case["types"][n]
            if sig[n].startswith("*"):
                aligned.append(n)
        elif n.startswith("stride_") or n in UNALIGNED_INTS:
            sig[n] = "i32"
            if n not in case["unaligned"]:
                aligned.append(n)
        else:
            unknown.append(n)
    missing = [n for n in constexpr if n not in case["constexprs"]]
    extra = [n for n in case["constexprs"] if n not in constexpr]
    problems = (
        ([f"kernel parameters without a type here: {unknown}"] if unknown else [])
        + ([f"constexprs without a value here: {missing}"] if missing else [])
        + ([f"constexprs the kernel no longer has: {extra}"] if extra else [])
    )
    return dict(case, signature=sig, aligned=aligned, setup_problems=problems)


# ---------------------------------------------------------------------------------------------------
# one case, in a child process: Triton -> SPIR-V (+ llir, ttgir, metadata)
def lower(case: dict, workdir: Path) -> dict:
    """Runs in the child (``--lower``). Writes k.spv, k.llir, k.ttgir; returns the metadata."""
    import importlib.util

    import triton
    import triton.runtime.build as tbuild

    tbuild.is_xpu = lambda: False  # it imports torch; only used to build C modules, which are not built here
    from triton.backends import backends

    class _ArchUtils:  # arch_parser.c needs SYCL headers; it only maps the enum to a name
        @staticmethod
        def parse_device_arch(v):
            return ARCH_NAMES.get(v, "")

    # the backend's compiler module is loaded by file (triton.backends._load_module): patch its globals
    backends["intel"].compiler.__init__.__globals__["compile_module_from_src"] = lambda *a, **k: _ArchUtils()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("vxa_triton_kernels", KERNELS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = getattr(mod, case["kernel"])
    t = TARGETS[case["target"]]
    props = dict(
        case["props"],
        architecture=t["arch"],
        sub_group_sizes=t["sub_group_sizes"],
        has_fp64=t["has_fp64"],
        max_work_group_size=t["max_wg"],
        max_num_sub_groups=t["max_sg"],
        name=case["target"],
    )
    sig, consts = {}, {}
    for name in fn.arg_names:
        if name in case["constexprs"]:
            sig[name], consts[name] = "constexpr", case["constexprs"][name]
        elif case["signature"][name] == "none":  # the provider passes None: Triton makes it constexpr None
            sig[name], consts[name] = "constexpr", None
        else:
            sig[name] = case["signature"][name]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in case["aligned"]}
    opts = dict(num_warps=case["num_warps"], num_stages=case["num_stages"])
    if case["grf_mode"] != "default":
        opts["grf_mode"] = case["grf_mode"]
    # the real driver's target: GPUTarget("xpu", props, 32); the launch passes no threads_per_warp
    k = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("xpu", props, 32), options=opts)
    (workdir / "k.spv").write_bytes(k.asm["spv"])
    (workdir / "k.llir").write_text(k.asm["llir"])
    (workdir / "k.ttgir").write_text(k.asm["ttgir"])
    md = k.metadata
    return dict(
        shared=int(md.shared or 0),
        threads_per_warp=int(md.threads_per_warp),
        num_warps=int(md.num_warps),
        build_flags=md.build_flags,
        kernel_name=md.name,
        dpas_layout="triton_intel_gpu.dpas" in k.asm["ttgir"] or "#ttig.dpas" in k.asm["ttgir"],
    )


# ---------------------------------------------------------------------------------------------------
# ocloc
def _uniq(lines) -> list[str]:
    out = []
    for ln in lines:
        if ln.strip() and ln not in out:
            out.append(ln)
    return out


class Ocloc:
    def __init__(self, sysroot: Path):
        self.exe = str(sysroot / "bin" / "ocloc")
        self.version = (
            (sysroot / "OCL_DRIVER_VERSION").read_text().strip()
            if (sysroot / "OCL_DRIVER_VERSION").exists()
            else self.query("OCL_DRIVER_VERSION")
        )

    def query(self, what: str, device: str | None = None) -> str:
        with tempfile.TemporaryDirectory() as d:  # `ocloc query X` writes a file X into the cwd
            cmd = [self.exe, "query", what] + (["-device", device] if device else [])
            subprocess.run(cmd, cwd=d, check=True, capture_output=True, timeout=60)
            return (Path(d) / what).read_text(errors="replace").replace("\0", "").strip()

    def extensions(self, device: str) -> dict:
        ext = set(self.query("CL_DEVICE_EXTENSIONS", device).split())
        return dict(
            has_subgroup_matrix_multiply_accumulate="cl_intel_subgroup_matrix_multiply_accumulate" in ext,
            has_subgroup_matrix_multiply_accumulate_tensor_float32="cl_intel_subgroup_matrix_multiply_accumulate_tensor_float32"
            in ext
            or "cl_intel_subgroup_matrix_multiply_accumulate_tf32" in ext,
            has_subgroup_2d_block_io="cl_intel_subgroup_2d_block_io" in ext,
            has_bfloat16_conversions="cl_intel_bfloat16_conversions" in ext,
        )

    def build(self, spv: Path, device: str, flags: str, kernel: str, timeout: float) -> dict:
        """ocloc compile + disasm: spill/GRF/SIMD from .ze_info, dpas and fp64 counts from the ISA."""
        wd = spv.parent
        tag = {"": "default"}.get(flags, str(abs(hash(flags)) % 10**8))
        cmd = [
            self.exe,
            "compile",
            "-file",
            spv.name,
            "-spirv_input",
            "-device",
            device,
            "-output_no_suffix",
            "-output",
            f"k_{tag}",
        ] + (["-options", flags] if flags else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=wd)
        log = (r.stdout + r.stderr).strip()
        binf = next((p for p in (wd / f"k_{tag}", wd / f"k_{tag}.bin") if p.is_file()), None)
        if r.returncode != 0 or binf is None:
            msg = " | ".join(_uniq(log.splitlines()))
            return dict(ok=False, error=f"ocloc compile rc={r.returncode}: {msg[-3000:]}")
        dump = wd / f"dump_{tag}"
        r2 = subprocess.run(
            [self.exe, "disasm", "-file", str(binf), "-dump", str(dump), "-device", device],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=wd,
        )
        info = dump / ".ze_info"
        if r2.returncode != 0 or not info.exists():
            return dict(ok=False, error=f"ocloc disasm rc={r2.returncode}: {(r2.stdout + r2.stderr)[-2000:]}")
        zi = info.read_text()
        # .ze_info lists every kernel of the module (IGC may add Intel_Symbol_Table_Void_Program): ours only
        blocks = re.split(r"^  - name:\s*", zi.split("\nkernels_misc_info:")[0], flags=re.M)
        mine = next((bl for bl in blocks[1:] if bl.split()[0] == kernel), None)
        if mine is None:
            return dict(ok=False, error=f"kernel {kernel} not in {info}")
        get = lambda key: [int(v) for v in re.findall(rf"^\s*{key}:\s*(\d+)", mine, re.M)]  # noqa: E731
        asm_files = [p for p in dump.glob("*.asm") if kernel in p.name]
        if not asm_files:
            return dict(ok=False, error=f"no ISA dump for {kernel} in {dump}")
        asm = "".join(p.read_text(errors="replace") for p in asm_files)
        res = dict(
            ok=True,
            spill=max(get("spill_size") or [0]),
            grf=max(get("grf_count") or [0]),
            simd=max(get("simd_size") or [0]),
            private=max(get("private_size") or [0]),
            dpas=len(re.findall(r"\bdpas\.", asm)),
            fp64_isa=len(re.findall(r":df\b", asm)),
            isa_lines=asm.count("\n"),
            warnings=[ln for ln in log.splitlines() if "warning" in ln.lower()][:5],
        )
        return res


# ---------------------------------------------------------------------------------------------------
def run_case(case: dict, ocloc: Ocloc, timeout: float, strict: bool = False) -> dict:
    t0 = time.time()
    res = {
        k: v
        for k, v in case.items()
        if k not in ("signature", "aligned", "props", "types", "unaligned", "setup_problems")
    }
    res.update(status="ok", problems=list(case["setup_problems"]), notes=[])
    wd = Path(tempfile.mkdtemp(prefix="vxa-intel-"))
    try:
        if res["problems"]:
            res["status"] = "fail"
            return res
        # ocloc on PATH: Intel's backend queries the device's extensions with it
        env = dict(
            os.environ, TRITON_CACHE_DIR=str(wd / "cache"), PATH=f"{Path(ocloc.exe).parent}:{os.environ['PATH']}"
        )
        env.pop("TRITON_INTERPRET", None)
        try:
            r = subprocess.run(
                [sys.executable, __file__, "--lower", str(wd)],
                input=json.dumps(case),
                text=True,
                capture_output=True,
                timeout=timeout,
                env=env,
            )
        except subprocess.TimeoutExpired:
            res.update(status="fail", problems=[f"Triton lowering timed out after {timeout:.0f}s"])
            return res
        if r.returncode != 0:
            lines = (r.stderr or r.stdout).strip().splitlines()
            errs = _uniq(ln.strip() for ln in lines if "error" in ln.lower() or "Error" in ln)[:6]
            res.update(
                status="fail",
                problems=[f"Triton lowering failed (rc={r.returncode}): " + " | ".join(errs + lines[-3:])],
            )
            return res
        meta = json.loads(r.stdout.strip().splitlines()[-1])
        res.update(meta)
        t = TARGETS[case["target"]]
        flags = meta["build_flags"] or ""
        try:
            nat = ocloc.build(wd / "k.spv", t["ocloc"], flags, meta["kernel_name"], timeout)
            if nat["ok"] and not flags and nat["spill"] > DRIVER_SPILL_RETRY:
                # what Intel's driver does with no GRF mode requested: rebuild at 256 GRF
                res["notes"].append(f"default GRF spilled {nat['spill']} B: the driver rebuilds at 256 GRF")
                res["spill_default_grf"] = nat["spill"]
                flags = GRF_FLAGS["large"]
                nat = ocloc.build(wd / "k.spv", t["ocloc"], flags, meta["kernel_name"], timeout)
        except subprocess.TimeoutExpired:
            res.update(status="fail", problems=[f"ocloc timed out after {timeout:.0f}s"])
            return res
        res["effective_flags"] = flags
        if not nat["ok"]:
            res.update(status="fail", problems=[nat["error"]])
            return res
        res.update({k: v for k, v in nat.items() if k != "ok"})
        llir = (wd / "k.llir").read_text()
        res["fp64_ir"] = len(re.findall(r"\bdouble\b", llir))
        res["wg_size"] = meta["num_warps"] * meta["threads_per_warp"]
        p = res["problems"]
        if not t["has_fp64"] and (res["fp64_ir"] or res["fp64_isa"]):
            p.append(f"fp64 on {case['target']} (llir 'double' x{res['fp64_ir']}, ISA :df x{res['fp64_isa']})")
        if case["need_dpas"] and res["dpas"] == 0:
            p.append(f"no DPAS instruction in {case['kernel']} ({case['dtype']} dots fell back to FMA)")
        if res["shared"] > t["slm"]:
            p.append(f"SLM {res['shared']} B over the {t['slm']} B limit")
        if res["wg_size"] > t["max_wg"]:
            p.append(f"work-group {res['wg_size']} over the {t['max_wg']} limit")
        known = KNOWN_SPILL.get((case["target"], case["name"]), 0)
        if case["zero_spill"] and res["spill"] > 0:
            if strict or res["spill"] > known:
                p.append(
                    f"spill {res['spill']} B (target: zero for every bf16/fp16 case on "
                    f"{'/'.join(GATED_TARGETS)}; known residual {known} B{'; --strict' if strict else ''})"
                )
            else:
                res["status"] = "spill-known"
                res["notes"].append(
                    f"zero-spill target missed: {res['spill']} B <= known residual {known} B "
                    "(KNOWN_SPILL; kernel change needed, docs/intel_lowering.md)"
                )
        elif res["spill"] > 0:
            res["notes"].append(f"spill {res['spill']} B (reported, not a failure)")
        if p:
            res["status"] = "fail"
        return res
    finally:
        res["seconds"] = round(time.time() - t0, 1)
        shutil.rmtree(wd, ignore_errors=True)


def grf_label(res: dict) -> str:
    f = res.get("effective_flags", "")
    return "256" if "256-GRF" in f else "128" if "128-GRF" in f else "auto" if "auto" in f else "default"


def tiles_of(r: dict) -> str:
    c = r["constexprs"]
    m = c.get("BLOCK_M", c.get("BLOCK_H"))
    latent = f" dc{c['BLOCK_DC']}/dv{c['BLOCK_DV']}" if "BLOCK_DC" in c else ""
    if "CHUNK_D" in c and (c["CHUNK_D"], c["CHUNK_DV"]) != (c["BLOCK_D"], c["BLOCK_DV"]):
        latent = f" chunks {c['CHUNK_D']}/{c['CHUNK_DV']}"
    return (f"{m},{c['BLOCK_N']}" if m else "-") + latent + f" / {r['num_warps']} / {r['num_stages']}"


def markdown(results: list[dict], header: dict) -> str:
    lines = [
        f"ocloc {header['ocloc_driver_version']} ({header['ocloc_packages']}), triton-xpu {header['triton']}; "
        f"xpu tiles {header['xpu_tuning']}; {header['cases']} cases, {header['failed']} failed, "
        f"{header['spill_known']} spill-known; wall {header['wall_s']} s with {header['jobs']} jobs",
        "",
    ]
    for tg in header["targets"]:
        t = TARGETS[tg]
        lines += [
            f"### {tg} (ocloc -device {t['ocloc']}; SLM limit {t['slm'] // 1024} KB, work-group limit {t['max_wg']})",
            "",
            "| kernel/phase/D/dtype/features | M,N / warps / stages | GRF mode -> GRF | spill B | DPAS | SLM B "
            "| WG (SIMD) | status |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in results if r["target"] == tg):
            st = r["status"]
            if st == "fail":
                st = "**FAIL**: " + "; ".join(r["problems"])[:160]
            elif r.get("spill"):
                st += " (spill reported)" if st == "ok" else ""
            mode = r["grf_mode"] + (" (driver: 256)" if r.get("spill_default_grf") else "")
            lines.append(
                f"| {r['name']} | {tiles_of(r)} | {mode} -> {r.get('grf', '?')} | {r.get('spill', '?')} "
                f"| {r.get('dpas', '?')} | {r.get('shared', '?')} | {r.get('wg_size', '?')} "
                f"({r.get('simd', '?')}) | {st} |"
            )
        lines.append("")
    return "\n".join(lines)


def sweep_markdown(sweep: list[dict]) -> str:
    rows, tg = {}, []
    for r in sweep:
        cfg = r["name"].split(" @ ")[1]
        rows.setdefault((r.get("sweep_phase", r["phase"]), cfg), {})[r["target"]] = r
        tg += [r["target"]] if r["target"] not in tg else []
    lines = [
        "| phase | BLOCK_M,BLOCK_N / warps / GRF | BLOCK_M / warps (< 8: warps repeat rows) | "
        + " | ".join(f"{t} spill B" for t in tg)
        + " | DPAS | SLM B | WG |",
        "|---|---|---|" + "---|" * len(tg) + "---|---|---|",
    ]

    def order(key):
        m, n, w, g = re.match(r"(\d+),(\d+)/w(\d+)/(\w+)", key[1]).groups()
        return key[0], g != "large", int(m) // int(w) < 8, int(n), int(m), int(w)

    for (phase, cfg), by in sorted(rows.items(), key=lambda kv: order(kv[0])):
        r = next(iter(by.values()))
        c = r["constexprs"]
        lines.append(
            f"| {phase} | {cfg} | {c.get('BLOCK_M', c.get('BLOCK_H')) / r['num_warps']:g} | "
            + " | ".join(str(by[t].get("spill", by[t]["status"])) if t in by else "-" for t in tg)
            + f" | {r.get('dpas', '?')} | {r.get('shared', '?')} | {r.get('wg_size', '?')} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sysroot", type=Path, help="the ocloc sysroot (ci/intel_lowering.sh sysroot)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="per step of a case, seconds")
    ap.add_argument("--targets", default="bmg,pvc,lnl,dg2,mtl")
    ap.add_argument("--only", default=None, help="regex on 'target:case name'")
    ap.add_argument(
        "--tile",
        action="append",
        default=[],
        help="override: PHASE=M,N,WARPS,STAGES[,GRF], mla_latent=BLOCK_DC,BLOCK_DV, or "
        "d_tiles:PHASE_dD=CHUNK_D,CHUNK_DV (the paged kernel's head-dim tiles, PAGED_D_TILES)",
    )
    ap.add_argument(
        "--strict",
        action="store_true",
        default=os.environ.get("VXA_INTEL_STRICT") == "1",
        help="any spill in a zero-spill case fails (ignore KNOWN_SPILL)",
    )
    ap.add_argument(
        "--sweep",
        nargs="?",
        const="all",
        default=None,
        help="also the SWEEP tile candidates (all, or a comma list of its phases) on bmg/pvc/lnl, "
        "reported under 'sweep', never failing: the data behind the docs and the tiles chosen "
        "by spill (header 'sweep_choice')",
    )
    ap.add_argument(
        "--sweep-from-shipped",
        action="store_true",
        help="sweep only the candidates ranked at or above the shipped tiles (what decides the choice)",
    )
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path)
    ap.add_argument("--lower", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.lower:  # child: one case's Triton lowering
        meta = lower(json.loads(sys.stdin.read()), a.lower)
        print(json.dumps(meta))
        return 0
    if a.sysroot is None:
        ap.error("--sysroot is required")
    t0 = time.time()
    ocloc = Ocloc(a.sysroot.resolve())
    tuning = read_tuning()
    for o in a.tile:
        phase, vals = o.split("=")
        v = vals.split(",")
        if phase == "mla_latent":
            tuning["mla_latent"]["xpu"]["mla_decode"] = (int(v[0]), int(v[1]))
            continue
        if phase.startswith("d_tiles:"):  # d_tiles:KEY=CHUNK_D,CHUNK_DV (PAGED_D_TILES)
            tuning["paged_d"].setdefault("xpu", {})[phase.split(":", 1)[1]] = (int(v[0]), int(v[1]))
            continue
        tuning["xpu"][phase] = tuple(int(x) for x in v[:4]) + tuple(v[4:])
    targets = [t for t in a.targets.split(",") if t]
    props = {t: ocloc.extensions(TARGETS[t]["ocloc"]) for t in targets}
    params = kernel_params()
    matrix = cases(tuning, targets)
    missing = sorted(set(params) - {c["kernel"] for c in matrix})
    if a.sweep:
        matrix += sweep_cases(
            tuning,
            [t for t in targets if TARGETS[t]["dpas"]],
            None if a.sweep == "all" else a.sweep.split(","),
            a.sweep_from_shipped,
        )
    todo = [
        complete(dict(c, props=props[c["target"]]), params)
        for c in matrix
        if a.only is None or re.search(a.only, f"{c['target']}:{c['name']}")
    ]
    # slowest first (big paged / MLA kernels, fp32 FMA paths), so the workers finish together
    todo.sort(
        key=lambda c: (
            c["kernel"] != "_paged_attn_kernel" and "mla" not in c["kernel"],
            -c["head_dim"],
            c["dtype"] != "fp32",
        )
    )
    import triton

    print(
        f"[intel] ocloc {ocloc.version}, triton {triton.__version__}, xpu tiles {tuning['xpu']}, "
        f"{len(todo)} cases, {a.jobs} at a time{', strict' if a.strict else ''}",
        flush=True,
    )
    results = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        futs = [ex.submit(run_case, c, ocloc, a.timeout, a.strict) for c in todo]
        for f in cf.as_completed(futs):
            r = f.result()
            results.append(r)
            extra = "; ".join(r["problems"] + r["notes"])
            print(
                f"[intel] {r['status']:11} {r['target']}:{r['name']} tiles={tiles_of(r)} grf={r.get('grf', '?')} "
                f"spill={r.get('spill', '?')} dpas={r.get('dpas', '?')} slm={r.get('shared', '?')} "
                f"wg={r.get('wg_size', '?')} simd={r.get('simd', '?')} isa={r.get('isa_lines', '?')} {r['seconds']}s {extra}",  # noqa: E501
                flush=True,
            )
    for r in results:
        for k in ("warnings", "kernel_name", "build_flags", "dpas_layout"):
            r.pop(k, None)
    results.sort(key=lambda r: (targets.index(r["target"]), r["kernel"], r["name"]))
    sweep = [r for r in results if r.get("sweep")]
    results = [r for r in results if not r.get("sweep")]
    pkgs = (a.sysroot / "PACKAGES").read_text().splitlines() if (a.sysroot / "PACKAGES").exists() else []
    header = dict(
        ocloc_driver_version=ocloc.version,
        ocloc_packages=", ".join(p for p in pkgs if p.startswith(("intel-ocloc", "libigc2"))),
        triton=triton.__version__,
        xpu_tuning={k: list(v) for k, v in tuning["xpu"].items()},
        xpu_mla_latent_tiles={k: list(v) for k, v in tuning["mla_latent"]["xpu"].items()},
        xpu_paged_d_tiles={k: list(v) for k, v in tuning["paged_d"].get("xpu", {}).items()},
        xpu_alibi_as_dot=T.alibi_as_dot("xpu"),
        targets=targets,
        jobs=a.jobs,
        strict=a.strict,
        wall_s=round(time.time() - t0, 1),
        cases=len(results),
        failed=sum(r["status"] == "fail" for r in results),
        spill_known=sum(r["status"] == "spill-known" for r in results),
        known_spill={f"{t}/{p}": v for (t, p), v in KNOWN_SPILL.items()},
        sweep_choice=sweep_choice(sweep, tuning, targets) if a.sweep else None,
        sweep_from_shipped=a.sweep_from_shipped if a.sweep else None,
        kernels_not_covered=missing,
        kernels_sha256=hashlib.sha256(KERNELS.read_bytes()).hexdigest()[:16],
        provider_sha256=hashlib.sha256(
            b"".join(
                f.read_bytes() for f in (PROVIDER, TUNING_PY, VARIANTS_PY, STEP_LAUNCH, TRITON_DIR / "launch_config.py")
            )
        ).hexdigest()[:16],
    )
    if a.json:
        # the header pretty, one line per case (diffs stay readable)
        body = {k: "@" + k for k in (("results", "sweep") if a.sweep else ("results",))}
        text = json.dumps(dict(header, **body), indent=1, default=str)
        for k in body:
            rows = [r for r in (sweep if k == "sweep" else results)]
            text = text.replace(f'"@{k}"', "[\n" + ",\n".join("  " + json.dumps(r, default=str) for r in rows) + "\n ]")
        a.json.write_text(text + "\n")
    if a.md:
        a.md.write_text(markdown(results, header) + ("\n" + sweep_markdown(sweep) if sweep else "") + "\n")
    bad = [r for r in results + sweep if r["status"] == "fail" and not r.get("sweep")]
    if missing and a.only is None:
        print(f"[intel] FAIL kernels in kernels.py with no case here: {missing}")
    print(
        f"[intel] {len(results) - len(bad)}/{len(results)} passed ({header['spill_known']} spill-known), "
        f"{len(bad)} failed, wall {header['wall_s']} s"
    )
    for r in bad:
        print(f"[intel] FAIL {r['target']}:{r['name']}: {'; '.join(r['problems'])}")
    return 1 if bad or (missing and a.only is None) else 0


if __name__ == "__main__":
    sys.exit(main())
