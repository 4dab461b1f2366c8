"""Which compiled kernel variants a layer launches: the constexprs, warps, stages and compile options of each, from
the family, the step's phase, the layer's dims and flags. Pure functions of ints, strings and bools.

The one place these decisions are made. The launch path (launch_config.LaunchConfig: ``step_variant``;
step_launch.TritonLaunch: ``attn_variant`` / ``merge_variant``), the warm-up (warmup.py: ``layer_points``, the
steps a layer kind can reach) and the Intel lowering job (ci/intel_lowering.py: ``launch_variant`` per case,
loaded by file path in a venv without torch) all call these; tests/test_triton_variants.py checks the job's
cases against what the warm-up launches for the same layer kinds.

A "call" below is anything with LayerConsts' fields (num_q_heads, num_kv_heads, head_dim, v_head_dim, causal,
window, softcap, return_lse, batch_invariant, mla): the provider passes its LayerConsts, the job a LayerKind.
Dtype names: "bf16", "fp16", "fp32" for q; those or "e4m3" / "e5m2" for the cache.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Union

try:  # in the package
    from . import tuning as _tuning
except ImportError:  # loaded by file path (ci/intel_lowering.py): tuning.py is loaded first, under this name
    import sys

    _tuning = sys.modules["vxa_triton_tuning"]

tile_config, head_dim_phase, paged_d_tiles = _tuning.tile_config, _tuning.head_dim_phase, _tuning.paged_d_tiles
mla_latent_tiles, mla_phase, alibi_as_dot = _tuning.mla_latent_tiles, _tuning.mla_phase, _tuning.alibi_as_dot
mla_kernel_form = _tuning.mla_kernel_form
pow2, cdiv, reachable_splits = _tuning.pow2, _tuning.cdiv, _tuning.reachable_splits

FP8_NAMES = ("e4m3", "e5m2")


@dataclasses.dataclass(frozen=True)
class Tables:
    """The tables the rules read; None: tuning.py's shipped one (the job passes its --tile / sweep copies)."""

    tuning: Optional[dict] = None  # TUNING
    mla_latent: Optional[dict] = None  # MLA_LATENT_TILES
    paged_d: Optional[dict] = None  # PAGED_D_TILES
    alibi_as_dot: Optional[dict] = None  # ALIBI_AS_DOT
    mla_form: Optional[dict] = None  # MLA_KERNEL_FORM
    fp8_operands: Optional[dict] = None  # FP8_OPERANDS


SHIPPED = Tables()


@dataclasses.dataclass(frozen=True)
class LayerKind:
    """A layer configuration as the variants see it: LayerConsts' fields plus the dtypes and which per-layer
    tensors are bound (what the provider's warm-up compiles per layer kind)."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    causal: bool = True
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    return_lse: bool = False
    batch_invariant: bool = False
    mla: bool = False
    q_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    sinks: bool = False
    alibi: bool = False
    descale: bool = False  # k/v descale tensors bound (FP8 caches)
    descale_per_head: bool = False  # [batch, Hkv] descales rather than one value


@dataclasses.dataclass(frozen=True)
class Point:
    """One step a layer kind can meet, as far as variants go: the phase ("decode": one query row per sequence,
    else "prefill", which covers extend and verify), the split count (None: the policy's) and descriptor loads
    (None: as the device decides)."""

    phase: str
    num_splits: Optional[int] = None
    desc: Optional[bool] = None

    @property
    def max_seqlen_q(self) -> int:
        """The query rows of the point's dummy step (warm-up): 1 in decode, 2 in prefill."""
        return 1 if self.phase == "decode" else 2


@dataclasses.dataclass
class Variant:
    """One compiled specialisation: kernel name, constexprs (in the order the launch passes them), warps,
    stages and compile options (xpu: grf_mode)."""

    kernel: str
    constexprs: dict
    num_warps: int
    num_stages: int
    options: dict


@dataclasses.dataclass
class StepVariant:
    """What a step shape fixes for every layer of one configuration (LaunchConfig keeps it).

    ``phase``: "decode" / "prefill"; ``which``: the TUNING phase read; ``mla``: the absorbed-MLA kernel;
    ``row_tiles`` / ``grid_cols``: grid axes 1 and 2 (axis 0 is the batch): row tiles (MLA: head tiles), and
    KV heads x splits x output-column programs (MLA: splits x latent column programs); ``bd`` / ``bdv``:
    head-dim tile widths; ``static``: the constexprs fixed by the step.
    """

    phase: str
    which: str
    mla: bool
    block_m: int
    block_n: int
    warps: int
    stages: int
    options: dict
    num_splits: int
    row_tiles: int
    grid_cols: int
    bd: int
    bdv: int
    desc: bool
    static: dict
    mla_form: str = "gather"  # MLA: tuning.MLA_KERNEL_FORM's kernel form where the step allows it


def mla_kernel_fits(call: Any) -> bool:
    """Absorbed MLA the dedicated kernel serves: one latent cache (Hkv 1), power-of-two latent and RoPE
    widths (512 + 64 for DeepSeek), causal, no window or softcap."""
    d_rope = call.head_dim - call.v_head_dim
    return (
        call.mla
        and call.num_kv_heads == 1
        and call.causal
        and tuple(call.window) == (-1, -1)
        and call.softcap == 0
        and call.v_head_dim >= 16
        and pow2(call.v_head_dim, 1) == call.v_head_dim
        and d_rope >= 16
        and pow2(d_rope, 1) == d_rope
    )


def step_variant(
    family: str,
    call: Any,
    *,
    page_size: int,
    max_seqlen_q: int,
    splits: Union[int, Callable[[int], int]],
    desc: bool = False,
    tables: Tables = SHIPPED,
    kv_bytes: int = 2,
) -> StepVariant:
    """The tiles, split count, grid axes and step constexprs of a step of ``max_seqlen_q`` query rows per
    sequence at ``page_size``. ``splits``: the split count, or the policy as a function of the units per sequence
    (KV heads; MLA: head tiles); ignored in batch-invariant mode (no split-K). ``desc``: prefill K/V by tensor
    descriptor (descriptors.step_takes_descriptors decides, per device). ``kv_bytes``: the cache element width
    of the layers this configuration serves (1: FP8 decode's own head-dim tiles, tuning.paged_d_tiles)."""
    tun = tables.tuning
    hq, hkv, d, dv = call.num_q_heads, call.num_kv_heads, call.head_dim, call.v_head_dim
    group = hq // hkv
    max_q = int(max_seqlen_q)
    invariant = call.batch_invariant
    phase = "decode" if max_q <= 1 and not invariant else "prefill"
    if mla_kernel_fits(call) and not invariant:
        # absorbed MLA: its own kernel (latent rows loaded once for scores and values) for every absorbed step
        # (decode, extend, verify); batch-invariant MLA runs the general kernel over the same views
        which = mla_phase(hq)
        block_m, block_n, warps, stages, options = tile_config(family, which, tun)
        block_dc, block_dv = mla_latent_tiles(family, which, dv, tables.mla_latent)
        tiles = cdiv(max(max_q, 1) * hq, block_m)
        n = splits if isinstance(splits, int) else splits(tiles)
        static = dict(
            PAGE=page_size,
            D_C=dv,
            D_R=d - dv,
            BLOCK_H=block_m,
            BLOCK_N=block_n,
            BLOCK_DC=block_dc,
            BLOCK_DV=block_dv,
            NUM_SPLITS=n,
            WRITE_LSE=call.return_lse,
        )
        # the page-block kernel takes fused latent tiles and key blocks inside one page; other steps gather
        form = mla_kernel_form(family, which, tables.mla_form)
        if (block_dc, block_dv) != (dv, dv) or page_size % block_n:
            form = "gather"
        # axis 2: the key splits x the output-column programs (tuning.MLA_LATENT_TILES)
        return StepVariant(
            phase,
            which,
            True,
            block_m,
            block_n,
            warps,
            stages,
            options,
            n,
            tiles,
            n * (dv // block_dv),
            d,
            dv,
            False,
            static,
            form,
        )
    # families with a pointer-load prefill kernel use it where a step takes no descriptors
    which = (
        phase if desc or "prefill_ptr" not in (tun or _tuning.TUNING)[family] or phase != "prefill" else "prefill_ptr"
    )
    block_m, block_n, warps, stages, options = tile_config(family, head_dim_phase(family, which, d, tun), tun)
    block_m = max(block_m, pow2(group)) if phase == "decode" else block_m
    n = 1 if invariant else splits if isinstance(splits, int) else splits(hkv)
    # aligned tiles (batch-invariant mode) may start up to block_m - 1 rows before the first query
    tiles = cdiv(max(max_q, 1) * group + (block_m - 1 if invariant else 0), block_m)
    bd, bdv = pow2(d), pow2(dv)
    chunk_d, chunk_dv = paged_d_tiles(family, which, bd, bdv, tables.paged_d, kv_bytes)
    if desc and (chunk_d, chunk_dv) != (bd, bdv):
        raise ValueError(
            f"PAGED_D_TILES[{family!r}][{which}_d{bd}] chunks the head dim, which tensor "
            "descriptors cannot load: give this family's chunked phases pointer loads"
        )
    left, right = call.window
    static = dict(
        WIN_LEFT=left,
        WIN_RIGHT=right,
        PAGE=page_size,
        GROUP=group,
        D=d,
        DV=dv,
        BLOCK_D=bd,
        BLOCK_DV=bdv,
        CHUNK_D=chunk_d,
        CHUNK_DV=chunk_dv,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        NUM_SPLITS=n,
        CAUSAL=call.causal,
        HAS_SOFTCAP=call.softcap > 0,
        ALIBI_DOT=alibi_as_dot(family, tables.alibi_as_dot),
        WRITE_LSE=call.return_lse,
        ALIGN_ROWS=invariant,
        # unmasked fully-visible key blocks in prefill only; decode and batch-invariant mode keep one masked
        # loop (invariant mode must not round a row differently by where its chunk's tile starts)
        SPLIT_MASK=phase == "prefill" and not invariant,
    )
    # axis 2: KV heads x key splits x output-column programs (tuning.PAGED_D_TILES)
    return StepVariant(
        phase,
        which,
        False,
        block_m,
        block_n,
        warps,
        stages,
        options,
        n,
        tiles,
        hkv * n * (bdv // chunk_dv),
        bd,
        bdv,
        desc,
        static,
    )


def attn_variant(
    family: str,
    sv: StepVariant,
    *,
    q_dtype: str,
    kv_dtype: str,
    sinks: bool,
    alibi: bool,
    descale: bool,
    descale_per_head: bool,
    use_desc: bool,
    interpreting: bool = False,
    tables: Tables = SHIPPED,
) -> Variant:
    """The attention kernel's variant of one layer in a step of ``sv``: the step's constexprs plus the layer's
    flags, and the layer's own tiles where it has them (pointer loads inside a descriptor step: ``use_desc``
    False there; an FP8 cache in decode). ``interpreting``: Triton's CPU interpreter, which mis-evaluates bf16
    dots (numpy has no bf16): fp32 dots there (ALiBi layers of any dtype: the causal bias is a bf16 dot)."""
    # an FP8 cache against 16-bit queries: the family's operand form (tuning.FP8_OPERANDS; kernels.py FP8_CVT)
    fp8_cvt = 0
    # (MLA: the page kernel's "page" / "tma" forms; the gather kernel and the "ahead" form convert by cast)
    takes = (not sv.mla) or sv.mla_form in ("page", "tma")
    if kv_dtype in FP8_NAMES and q_dtype in ("bf16", "fp16") and takes:
        fp8_cvt = _tuning.fp8_operands(family, "mla" if sv.mla else "paged", tables.fp8_operands)
        if interpreting and fp8_cvt == 2:  # the interpreter runs no PTX: the same fp16 products by Triton's cast
            fp8_cvt = 1
    # (fp16 products over an FP8 cache need no fp32 stand-in in the interpreter: only bf16 products do)
    fp32_dot = q_dtype == "fp32" or (interpreting and ((q_dtype == "bf16" and fp8_cvt == 0) or alibi))
    if fp32_dot:
        fp8_cvt = 0
    if sv.mla:
        consts = dict(sv.static, HAS_DESCALE=descale, FP32_DOT=fp32_dot)
        if sv.mla_form == "gather":
            return Variant("_mla_attn_kernel", consts, sv.warps, sv.stages, sv.options)
        # the page-block kernel: K/V by descriptor in the "tma" / "ahead" forms where the layer's cache takes them
        consts["USE_DESC"] = sv.mla_form in ("tma", "ahead") and use_desc
        consts["AHEAD"] = sv.mla_form == "ahead"
        consts["FP8_CVT"] = fp8_cvt
        return Variant("_mla_page_kernel", consts, sv.warps, sv.stages, sv.options)
    consts = dict(
        sv.static,
        HAS_SINKS=sinks,
        HAS_ALIBI=alibi,
        HAS_DESCALE=descale,
        DESCALE_PER_HEAD=descale_per_head,
        FP32_DOT=fp32_dot,
        FP8_CVT=fp8_cvt,
        USE_DESC=use_desc,
    )
    warps, stages = sv.warps, sv.stages
    tun = tables.tuning if tables.tuning is not None else _tuning.TUNING
    if sv.desc and not use_desc:  # this layer refuses descriptors: pointer loads, the same row tiles (grid)
        which = "prefill_ptr_wide_fp32" if q_dtype == "fp32" else "prefill_ptr_wide"
        _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, which, tun)
    elif sv.phase == "decode" and kv_dtype in FP8_NAMES and "decode_fp8" in tun[family] and sv.block_m <= 16:
        # FP8 cache: its own key tile and warps, the same row tiles; its split count may differ (tuning.SPLIT_FILL)
        _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, "decode_fp8", tun)
    elif sv.phase == "decode" and sv.num_splits > 1 and "decode_split" in tun[family] and sv.block_m <= 16:
        # split-K decode: its own key tile and warps, the same row tiles (grid) and split count
        _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, "decode_split", tun)
    elif (
        sv.phase == "decode" and consts.get("WIN_LEFT", -1) >= 0 and "decode_window" in tun[family] and sv.block_m <= 16
    ):
        # sliding-window decode: its own key tile and warps, the same grid and split count
        _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, "decode_window", tun)
    elif (
        sv.phase == "decode"
        and (sinks or alibi or consts.get("HAS_SOFTCAP") or consts.get("WIN_LEFT", -1) >= 0)
        and "decode_feature" in tun[family]
        and sv.block_m <= 16
    ):
        # softcap / sinks / ALiBi / sliding-window decode: its own key tile and warps, the same grid and split count
        _, consts["BLOCK_N"], warps, stages, _ = tile_config(family, "decode_feature", tun)
    # the step's compile options either way (xpu: the GRF mode)
    return Variant("_paged_attn_kernel", consts, warps, stages, sv.options)


def merge_variant(sv: StepVariant, v_head_dim: int, *, sinks: bool, return_lse: bool) -> Optional[Variant]:
    """The split-K merge of a step of ``sv`` (None without split-K): 4 warps, 1 stage, BLOCK_DV / BLOCK_C
    column programs per query row and head (tuning.merge_columns; ``merge_grid``)."""
    if sv.num_splits <= 1:
        return None
    return Variant(
        "_merge_splits",
        dict(
            DV=v_head_dim,
            BLOCK_DV=sv.bdv,
            BLOCK_C=_tuning.merge_columns(sv.num_splits, sv.bdv),
            NUM_SPLITS=sv.num_splits,
            HAS_SINKS=sinks,
            WRITE_LSE=return_lse,
        ),
        4,
        1,
        {},
    )


def merge_grid(merge: Variant, total_q: int, num_q_heads: int) -> tuple[int, int, int]:
    """The launch grid of a ``merge_variant``: (query rows, heads, column programs)."""
    c = merge.constexprs
    return (total_q, num_q_heads, c["BLOCK_DV"] // c["BLOCK_C"])


def layer_points(
    family: str,
    call: Any,
    compute_units: Optional[int],
    tables: Tables = SHIPPED,
    reachable: Optional[Callable[[int, int], tuple[int, ...]]] = None,
    kv_bytes: Optional[int] = None,
) -> list[Point]:
    """Every point a layer configuration can reach, one per variant: decode at every split count the policy
    can pick on a device of ``compute_units`` (None: the CPU policy), prefill (a spec-decode verify or extend
    step is the same kernel) with descriptors as the device decides and, where the family has a pointer-load
    prefill, with pointer loads (big grids); batch-invariant mode has one point. ``reachable``: units -> split
    counts, where the caller caches tuning.reachable_splits (default: computed for ``compute_units``).
    ``reachable``: (units, fill factor, cap) -> split counts. ``kv_bytes``: the cache element width the split policy
    reads (tuning.split_fill; None: 1 for an FP8 ``kv_dtype`` of a LayerKind, else 2)."""
    tun = tables.tuning if tables.tuning is not None else _tuning.TUNING
    if call.batch_invariant:
        return [Point("prefill")]
    mla = mla_kernel_fits(call)
    if mla:
        units = cdiv(call.num_q_heads, tile_config(family, mla_phase(call.num_q_heads), tun)[0])
    else:
        units = call.num_kv_heads
    if kv_bytes is None:
        kv_bytes = 1 if getattr(call, "kv_dtype", "bf16") in FP8_NAMES else 2
    fill = _tuning.split_fill(family, mla, kv_bytes)
    cap = _tuning.max_splits(mla)
    counts = reachable(units, fill, cap) if reachable is not None else reachable_splits(compute_units, units, fill, cap)
    out = [Point("decode", s) for s in counts]
    out.append(Point("prefill"))
    if not call.mla and "prefill_ptr" in tun[family]:
        out.append(Point("prefill", None, False))
    return out


def launch_variant(
    family: str,
    kind: LayerKind,
    point: Point,
    *,
    page_size: int,
    splits: Optional[Callable[[int], int]] = None,
    desc: bool = False,
    interpreting: bool = False,
    tables: Tables = SHIPPED,
) -> tuple[Variant, Optional[Variant]]:
    """(attention, split-K merge or None) variants a layer of ``kind`` launches at ``point``: ``step_variant``
    then ``attn_variant`` / ``merge_variant``, as the launch path calls them. ``splits``: the policy where the
    point leaves the count to it (default 1); ``desc``: the device's descriptor decision where the point leaves
    it (the layer takes descriptors when the step does)."""
    use = point.desc if point.desc is not None else desc
    n = point.num_splits if point.num_splits is not None else (splits or (lambda units: 1))
    sv = step_variant(
        family,
        kind,
        page_size=page_size,
        max_seqlen_q=point.max_seqlen_q,
        splits=n,
        desc=use,
        tables=tables,
        kv_bytes=1 if kind.kv_dtype in FP8_NAMES else 2,
    )
    attn = attn_variant(
        family,
        sv,
        q_dtype=kind.q_dtype,
        kv_dtype=kind.kv_dtype,
        sinks=kind.sinks,
        alibi=kind.alibi,
        descale=kind.descale,
        descale_per_head=kind.descale_per_head,
        use_desc=sv.desc,
        interpreting=interpreting,
        tables=tables,
    )
    return attn, merge_variant(sv, kind.v_head_dim, sinks=kind.sinks, return_lse=kind.return_lse)


def enumerate_variants(
    family: str,
    kind: LayerKind,
    *,
    page_size: int,
    compute_units: Optional[int],
    desc: bool = False,
    interpreting: bool = False,
    tables: Tables = SHIPPED,
) -> list[tuple[Point, Variant, Optional[Variant]]]:
    """(point, attention, merge) for every point of ``layer_points``: every variant a layer of ``kind`` can
    launch, what the warm-up compiles for it."""
    return [
        (p, *launch_variant(family, kind, p, page_size=page_size, desc=desc, interpreting=interpreting, tables=tables))
        for p in layer_points(family, kind, compute_units, tables)
    ]


# ---- the provider's other kernels (launched with Triton's default warps / stages unless given) -------------
def merge_state_consts(head_dim: int, sinks: bool) -> dict:
    """_merge_state_kernel's constexprs (Triton's default warps and stages)."""
    return dict(D=head_dim, BLOCK_D=pow2(head_dim), HAS_SINKS=sinks)


def write_kv_consts(kv_heads: int, head_dim: int, page_size: int, quant: bool, fmax: float) -> dict:
    """_write_kv_kernel's constexprs (Triton's default warps and stages); ``fmax`` the FP8 format's largest
    value (0.0 unquantised)."""
    return dict(
        H=kv_heads, D=head_dim, PAGE=page_size, BLOCK_D=pow2(head_dim, 1), QUANT=quant, FMAX=fmax if quant else 0.0
    )


TOKEN_PAGES_BLOCK = 256


def token_pages_variant(page_size: int, has_rows: bool) -> Variant:
    """_token_pages_kernel's variant (paging.py): a block of 256 page columns per program, 4 warps, 1 stage."""
    return Variant("_token_pages_kernel", dict(PAGE=page_size, HAS_ROWS=has_rows, BLOCK=TOKEN_PAGES_BLOCK), 4, 1, {})
