"""The Triton provider's tuning: tile tables and the rules that read them, pure functions of ints and strings.

``TUNING[family][phase]`` = (BLOCK_M, BLOCK_N, num_warps, num_stages[, grf_mode]); the MLA kernel's latent tiles
(``MLA_LATENT_TILES``), the paged kernel's head-dim tiles (``PAGED_D_TILES``), the ALiBi form (``ALIBI_AS_DOT``)
and the split-K policy (``split_count_for``). A family is a string ("cuda_sm90", "cuda", "xpu", "cpu";
tiles.device_family maps a torch device to one).

Imports nothing but the standard library: ci/intel_lowering.py runs in a venv without torch and loads this file
(and variants.py) by path, so the Intel job compiles exactly what these rules pick (docs/intel_lowering.md).
Every rule that reads a table takes it as an optional argument (None: the shipped one, read at call time, so a
test that patches an entry is seen), which is how the job's --tile overrides and tile sweeps apply.
"""

from __future__ import annotations

from typing import Optional

# Phases: "prefill" / "decode" of the paged kernel; "prefill_ptr": the pointer-load prefill kernel where a step
# cannot take tensor descriptors (families that have descriptors); "prefill_ptr_wide" (and its fp32 variant): a
# layer whose cache strides refuse descriptors inside a descriptor step (the same BLOCK_M, so the same grid);
# "decode_fp8": decode over an FP8 cache (the same BLOCK_M; the split count at the FP8 fill, SPLIT_FILL);
# "decode_split": split-K decode over a 16-bit cache (the same BLOCK_M and split count); "decode_feature": decode
# of a layer with softcap, sinks, ALiBi or a sliding window (the same BLOCK_M and split count); "decode_window":
# decode of a sliding-window layer, before "decode_feature" where a family has both; "mla_decode" / "mla_wide":
# (BLOCK_H, BLOCK_N, num_warps, num_stages) of the absorbed-MLA kernel, "mla_wide" from 64 heads per rank
# (compute-bound: bigger head tiles). CUDA entries are tuned (docs/benchmarks.md); Intel entries are
# conservative (less register file and SLM on Xe).
TUNING: dict[str, dict[str, tuple]] = {
    "cuda_sm90": {
        "prefill": (128, 64, 4, 2),
        "prefill_ptr": (64, 64, 4, 3),
        # 8 warps: 128-row tiles with pointer loads spill at 4; fp32 spills at N=64, so N=16
        "prefill_ptr_wide": (128, 64, 8, 2),
        "prefill_ptr_wide_fp32": (128, 16, 8, 2),
        "decode": (16, 128, 8, 2),
        "mla_decode": (16, 32, 4, 2),
        "mla_wide": (64, 64, 8, 2),
        # fp8 -> 16-bit conversions raise register use: fewer warps and keys keep more blocks per SM
        "decode_fp8": (16, 64, 2, 3),
        # split-K: 8 warps x 128 keys (the fastest without split) hold 76-84 % of copy under split-K at
        # every count on an H100, 4 warps 94-102 % (benchmarks/lab/h100/splitk_sweep_h100.jsonl). At the 16-bit
        # fill 1, (16, 64, 4, 3) read 0.2-1.1 points higher at 4 of the 5 split shapes in one A/B
        # (h100/grid_tune2_fill_width_h100.jsonl); not shipped until benchmarks/lab/gpu_split_tile.sh re-measures
        # the published records and memchecks it
        "decode_split": (16, 128, 4, 2),
        # softcap / sinks / ALiBi / a sliding window: the 8-warp decode tile holds 78-83 % of copy at 64 x 4096,
        # 4 warps 98-101 % (benchmarks/lab/h100/feature_*_h100.jsonl); a 1,024-key window 80.7 % vs 69.7 %
        # (h100/sweep_window_h100.jsonl)
        "decode_feature": (16, 128, 4, 2),
        # a sliding window (with or without the features above): few key blocks a program, so a narrower, deeper
        # tile; engine path, H100, 64 x 4096, window 1024: 90.7 % of copy vs 88.5 % on decode_feature
        # (benchmarks/lab/h100/grid_tune_h100.jsonl)
        "decode_window": (16, 64, 8, 2),
        # head dim 64: 91.1 % of copy at 64 x 4096 vs 83.7 % on the D 128 tile (h100/sweep_d64_h100.jsonl)
        "decode_d64": (16, 64, 4, 3),
    },
    "cuda": {
        "prefill": (64, 64, 4, 2),
        "decode": (16, 64, 4, 2),
        "mla_decode": (16, 32, 4, 2),
        "mla_wide": (64, 32, 8, 2),
    },
    # the GRF mode Intel's backend is asked for (launch option grf_mode): 256 GRF ("large") and N=32 lower
    # with the least register spill (docs/intel_lowering.md)
    # "<phase>_d<D>": a head dim's own tiles where the phase's spill there (docs/intel_lowering.md)
    "xpu": {
        "prefill": (64, 32, 8, 2, "large"),
        "decode": (16, 32, 8, 2, "large"),
        "decode_d64": (16, 64, 4, 2, "large"),
        "mla_decode": (16, 16, 4, 2, "large"),
        "mla_wide": (16, 16, 4, 2, "large"),
    },
    # the interpreter (tests): the descriptor / pointer prefill split too, so both kernels run in CI
    "cpu": {
        "prefill": (16, 16, 1, 1),
        "prefill_ptr": (16, 16, 1, 1),
        "prefill_ptr_wide": (16, 16, 1, 1),
        "prefill_ptr_wide_fp32": (16, 16, 1, 1),
        "decode": (16, 16, 1, 1),
        "mla_decode": (16, 16, 1, 1),
        "mla_wide": (16, 16, 1, 1),
    },
}


# The absorbed-MLA kernel's latent tiles, (BLOCK_DC, BLOCK_DV): the scores' chunk width over the latent and the
# output columns a program owns (D_C / BLOCK_DV programs per head tile). 0, or a width past a layer's latent,
# is the whole latent: (0, 0) is the fused form (one key load serves scores and output). xpu: chosen by spill in
# ci/intel_lowering.py's sweep (docs/intel_lowering.md); CUDA keeps the fused form (faster on the H200).
MLA_LATENT_TILES: dict[str, dict[str, tuple[int, int]]] = {
    "cuda_sm90": {"mla_decode": (0, 0), "mla_wide": (0, 0)},
    "cuda": {"mla_decode": (0, 0), "mla_wide": (0, 0)},
    "xpu": {"mla_decode": (64, 64), "mla_wide": (64, 64)},
    "cpu": {"mla_decode": (0, 0), "mla_wide": (0, 0)},
}


# Which absorbed-MLA kernel a family's MLA phase launches (issue #49, docs/mla-kernel.md): "gather" is
# _mla_attn_kernel (per-key page ids, any page size, any latent tiles: Intel's lowering and today's CUDA
# default); "page" is _mla_page_kernel (one page id per key block, affine pointer loads, the 512 value columns as
# two halves, unmasked fully-visible blocks: 0 B spill in its key loop on sm90 where _mla_attn_kernel's loop
# spills 43 loads / 26 stores per iteration, benchmarks/lab/mla_aot.py); "tma" is _mla_page_kernel with K/V by
# tensor descriptor where the cache allows (descriptors.desc_layer_ok), else as "page"; "ahead" is _mla_page_kernel
# with the scores made one key block ahead (AHEAD: QK^T computed once, not by both warpgroups of a 64-head tile;
# the values loaded again), score tiles by descriptor where the cache allows. The page forms need
# PAGE % BLOCK_N == 0 and the fused latent (MLA_LATENT_TILES (0, 0)); other steps keep "gather". Absent: "gather".
# cuda_sm90 ships "gather" until a GPU run shows the page kernel faster (benchmarks/lab/gpu_mla_new.sh).
MLA_KERNEL_FORM: dict[str, dict[str, str]] = {
    # H100, benchmarks/lab/h100/mla_new_h100.jsonl: 128 heads x 64 x 4096 328.8 us vs 498.8 (gather), 16 heads
    # 134.4 vs 150.2 us; e4m3 470.9 vs 702.6 / 165.8 vs 192.4 ("page" 129.9 us at 16 heads bf16, within 4 %)
    "cuda_sm90": {"mla_decode": "tma", "mla_wide": "tma"},
}
MLA_FORMS = ("gather", "page", "tma", "ahead")

# The paged kernel's head-dim tiles, (CHUNK_D, CHUNK_DV), by "<phase>_d<BLOCK_D>": the scores summed over CHUNK_D-wide
# slices of the head dim (one q slice and one key slice live at a time) and CHUNK_DV of the output columns per
# program (BLOCK_DV / CHUNK_DV programs per row tile, each recomputing the scores). Absent, or 0: the whole head
# dim (the fused form). xpu: chosen by spill in ci/intel_lowering.py's sweep (docs/intel_lowering.md): a 256-wide
# key block does not fit Intel's 256 GRF next to its accumulator, and D 64 prefill spills with sinks or a sliding
# window unless split; CUDA keeps the fused form. "decode_fp8_d<BLOCK_D>": decode over an FP8 cache (a layer of
# 1-byte cache elements; the step's other layers keep "decode_d<BLOCK_D>"): its own output-column programs.
PAGED_D_TILES: dict[str, dict[str, tuple[int, int]]] = {
    "xpu": {"decode_d256": (0, 128), "prefill_d256": (0, 128), "prefill_d64": (0, 32)},
}


# The causal ALiBi bias as an exact bf16 matrix product accumulated into the scores (kernels._alibi_rows), per
# family: on Intel it lands in the scores' DPAS layout, where the broadcast [rows x keys] bias spilled 2.9-7.6 KB
# of the 256 GRF; the interpreter (CPU tests) runs it too. CUDA keeps the elementwise bias: the extra product
# costs H200 prefill 5-7 % (docs/intel_lowering.md).
ALIBI_AS_DOT: dict[str, bool] = {"xpu": True, "cpu": True}

# How a family's kernels take an FP8 cache's elements to the matrix units against 16-bit queries (kernels.py,
# FP8_CVT), per kernel ("paged": _paged_attn_kernel; "mla": _mla_page_kernel's "page" / "tma" forms): "cast"
# (default: Triton's conversion to the query dtype; Intel's Triton, the interpreter), "f16" (fp16 products, Triton's
# conversion), "ptx" (fp16 products, PTX cvt that keeps the tile's conversion out of the key loop's registers:
# NVIDIA sm89+). fp32 queries always take fp32 products. H100, engine path, paged decode: e4m3 1.58-1.63x and e5m2
# 1.56-1.61x bf16's time with "ptx", 1.29-1.52x with "cast" (benchmarks/lab/h100/fp8_ptx_ab_h100.jsonl,
# docs/fp8-engine-h100.json). MLA decode on an H200 (one-call A/B of the trees, benchmarks/lab/h200/
# fp8_ab_mla_h200.jsonl): e4m3 0.81x / 0.85x the "cast" form's time at 16 / 128 heads x 64 x 4096, e5m2 0.95x /
# 0.94x, bf16 unchanged (AOT: the 16-head tile spill-free at 214 registers, 550 instructions a key loop against 1,399).
FP8_OPERANDS: dict[str, dict[str, str]] = {"cuda_sm90": {"paged": "ptx", "mla": "ptx"}}
FP8_OPERAND_FORMS = ("cast", "f16", "ptx")


def fp8_operands(family: str, kernel: str, table: Optional[dict] = None) -> int:
    """The FP8_CVT constexpr of ``kernel`` ("paged" / "mla") on ``family`` (FP8_OPERANDS; None: the shipped table):
    0 cast, 1 f16, 2 ptx."""
    form = (FP8_OPERANDS if table is None else table).get(family, {}).get(kernel, "cast")
    if form not in FP8_OPERAND_FORMS:
        raise ValueError(f"FP8_OPERANDS[{family!r}][{kernel!r}]: {form!r} is not one of {FP8_OPERAND_FORMS}")
    return FP8_OPERAND_FORMS.index(form)


def tile_config(family: str, phase: str, tuning: Optional[dict] = None) -> tuple[int, int, int, int, dict]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages, compile options) of a family's phase (xpu: grf_mode)."""
    cfg = (TUNING if tuning is None else tuning)[family][phase]
    return (*cfg[:4], {"grf_mode": cfg[4]} if len(cfg) > 4 else {})


def head_dim_phase(family: str, phase: str, head_dim: int, tuning: Optional[dict] = None) -> str:
    """The TUNING key of ``phase`` at ``head_dim``: "<phase>_d<pow2(head_dim)>" where the family has one, else
    ``phase``."""
    key = f"{phase}_d{pow2(head_dim)}"
    return key if key in (TUNING if tuning is None else tuning)[family] else phase


def paged_d_tiles(
    family: str, phase: str, block_d: int, block_dv: int, paged_d: Optional[dict] = None, kv_bytes: int = 2
) -> tuple[int, int]:
    """(CHUNK_D, CHUNK_DV) of a family's paged ``phase`` (a TUNING phase) at head-dim tiles ``block_d`` /
    ``block_dv`` (key "<phase>_d<block_d>"; decode over a cache of 1-byte elements, ``kv_bytes`` 1, reads
    "decode_fp8_d<block_d>" where the family has one): each a power of two >= 16 dividing its width (0, a wider
    entry or none: the whole width)."""
    out = []
    table = PAGED_D_TILES if paged_d is None else paged_d
    if phase == "decode" and kv_bytes == 1 and f"decode_fp8_d{block_d}" in table.get(family, {}):
        phase = "decode_fp8"
    for w, full in zip(table.get(family, {}).get(f"{phase}_d{block_d}", (0, 0)), (block_d, block_dv)):
        w = full if w == 0 else min(w, full)
        if w < 16 or w & (w - 1):
            raise ValueError(f"PAGED_D_TILES[{family!r}][{phase}_d{block_d}]: {w} is not a power of two >= 16")
        out.append(w)
    return out[0], out[1]


def mla_latent_tiles(family: str, phase: str, d_c: int, mla_latent: Optional[dict] = None) -> tuple[int, int]:
    """(BLOCK_DC, BLOCK_DV) of a family's MLA phase for a latent of width ``d_c`` (a power of two): each a power of
    two >= 16 dividing ``d_c``, so the chunks cover the latent exactly."""
    out = []
    for w in (MLA_LATENT_TILES if mla_latent is None else mla_latent)[family][phase]:
        w = d_c if w == 0 else min(w, d_c)
        if w < 16 or w & (w - 1):
            raise ValueError(f"MLA_LATENT_TILES[{family!r}][{phase!r}]: {w} is not a power of two >= 16")
        out.append(w)
    return out[0], out[1]


def mla_kernel_form(family: str, phase: str, table: Optional[dict] = None) -> str:
    """The MLA kernel form ("gather", "page", "tma", "ahead") of a family's MLA phase (``MLA_KERNEL_FORM``)."""
    form = (MLA_KERNEL_FORM if table is None else table).get(family, {}).get(phase, "gather")
    if form not in MLA_FORMS:
        raise ValueError(f"MLA_KERNEL_FORM[{family!r}][{phase!r}]: {form!r} is not one of {MLA_FORMS}")
    return form


def mla_phase(num_q_heads: int) -> str:
    """The MLA kernel's TUNING phase: "mla_wide" from 64 query heads per rank (compute-bound: bigger head
    tiles), else "mla_decode"."""
    return "mla_wide" if num_q_heads >= 64 else "mla_decode"


def alibi_as_dot(family: str, table: Optional[dict] = None) -> bool:
    """Whether the family computes the causal ALiBi bias as a bf16 matrix product (``ALIBI_AS_DOT``)."""
    return (ALIBI_AS_DOT if table is None else table).get(family, False)


# The split-K policy's bounds: at most MAX_SPLITS splits, each of at least MIN_SPLIT_KEYS keys, only from
# SPLIT_FROM_KEYS keys, and only while batch x units x splits < fill x the device's compute units (split_fill).
MAX_SPLITS, MIN_SPLIT_KEYS, SPLIT_FROM_KEYS = 32, 512, 1024
# The split-K merge's tile: a merge program holds [NUM_SPLITS, BLOCK_C] fp32 partials, BLOCK_C of the output
# columns (merge_columns). One program per query row and head over MLA's whole 512-wide row took 254 registers at 64
# splits and spilled 5.9 KB at 128 (sm90, 4 warps, sinks + LSE; benchmarks/lab/merge_aot.py), with only query rows x
# heads programs (16 at 16 heads x 1 token); at most 4,096 values a program (32 a thread): 56 registers at every
# count, a dense D 128 row stays whole up to 32 splits, a 512-wide row gets 2-16 programs at 16-128 splits.
MERGE_TILE_ELEMS = 4096


def merge_columns(num_splits: int, block_dv: int, elems: Optional[int] = None) -> int:
    """BLOCK_C, the output columns of one split-K merge program: a power of two >= 16 dividing ``block_dv``, at
    most ``elems`` (None: MERGE_TILE_ELEMS) partial values across ``num_splits`` splits, or ``block_dv`` whole."""
    per = (MERGE_TILE_ELEMS if elems is None else elems) // max(num_splits, 1)
    c = 16
    while c * 2 <= per and c * 2 <= block_dv:
        c *= 2
    return min(c, block_dv)


# Absorbed MLA's split bounds: an MLA key is 576 latent + rope values (1,152 B in bf16), a dense KV head's K + V at
# D 128 512 B, so an MLA split keeps fewer keys and may be more: at 16 heads x 1 x 8,192 (one head tile: the longest
# decode the batch cannot fill) device time on an H200 with the column-program merge (merge_columns; forced counts,
# benchmarks/lab/h200/mla_merge_new_h200.jsonl): 16 splits 34.1 us, 32 21.9, 64 16.2, 128 13.6 (64 keys a split;
# the whole-row merge took 72.6 us at 128). Where batch x head tiles already fill the device it changes nothing
# (16 x 64 x 4096, 128 x 64 x 4096 keep their counts).
MLA_MIN_SPLIT_KEYS, MLA_MAX_SPLITS = 64, 128


def max_splits(mla: bool) -> int:
    """The split policy's cap for a layer kind: MLA_MAX_SPLITS for absorbed MLA, else MAX_SPLITS."""
    return MLA_MAX_SPLITS if mla else MAX_SPLITS


# The fill factor by family and cache kind: "kv16" a 16- or 32-bit cache, "fp8" a 1-byte cache (FP8 KV), "mla" the
# absorbed-MLA kernel; absent: SPLIT_FILL_DEFAULT. cuda_sm90 "kv16" 1 (one program per SM before the last
# doubling): through the engine path on an H100, 16 q / 2 KV heads x 64 x 4096 88.5 vs 84.6 % of copy at fill 2,
# 8 x 32768 98.8 vs 97.7 %, 16 x 16384 98.8 vs 97.7 %, 2 x 65536 94.9 vs 93.8 % (benchmarks/lab/h100/
# grid_tune_h100.jsonl). "fp8" keeps 2: at fill 1 e4m3 at 8 x 32768 took 459 us against 283 us, slower than bf16
# (h100/fp8_engine_fill1_h100.json): FP8 decode is latency-bound (255 registers, 11.6 % occupancy) and needs the
# second program per SM. The split count is therefore per layer cache width (LaunchConfig.for_cache).
SPLIT_FILL: dict[str, dict[str, int]] = {"cuda_sm90": {"kv16": 1}}
SPLIT_FILL_DEFAULT = 2


def split_fill(family: str, mla: bool, kv_bytes: int = 2, table: Optional[dict] = None) -> int:
    """The split policy's fill factor for a layer of ``family``: absorbed-MLA decode ("mla"), a cache of 1-byte
    elements ("fp8") or any wider cache ("kv16"), from ``SPLIT_FILL`` (None: the shipped one)."""
    kind = "mla" if mla else ("fp8" if kv_bytes == 1 else "kv16")
    return (SPLIT_FILL if table is None else table).get(family, {}).get(kind, SPLIT_FILL_DEFAULT)


def split_count_for(
    compute_units: Optional[int],
    batch: int,
    units: int,
    max_seqlen_q: int,
    max_keys: int,
    fill: int = SPLIT_FILL_DEFAULT,
    min_keys: int = MIN_SPLIT_KEYS,
    cap: int = MAX_SPLITS,
) -> int:
    """Flash-decoding's split count: split long contexts while batch x ``units`` (KV heads, or MLA head tiles)
    x splits cannot fill ``fill`` x the device's ``compute_units`` (SMs / sub-slices; None: the CPU interpreter's
    policy, 2 splits from 2,048 keys so that tests reach split-K), each split keeping ``min_keys`` keys
    (MLA_MIN_SPLIT_KEYS for absorbed MLA), at most ``cap`` splits (max_splits). Host-only math."""
    if max_seqlen_q > 1 or max_keys < SPLIT_FROM_KEYS:
        return 1
    if compute_units is None:
        return 2 if max_keys >= 2 * SPLIT_FROM_KEYS else 1
    splits = 1
    while batch * units * splits < fill * compute_units and splits < cap and max_keys // (splits * 2) >= min_keys:
        splits *= 2
    return splits


# the longest context and the most sequences reachable_splits considers: every split count the policy can pick is
# reached below them (it splits only while batch x units x splits < fill x compute units)
_MAX_KEYS, _MAX_BATCH = 1 << 22, 1024


def reachable_splits(
    compute_units: Optional[int], units: int, fill: int = SPLIT_FILL_DEFAULT, cap: int = MAX_SPLITS
) -> tuple[int, ...]:
    """Every split count ``split_count_for`` can pick for ``units`` per sequence on a device of
    ``compute_units`` at ``fill`` and ``cap``, over every batch and context length (sorted)."""
    seen = set()
    keys = 1
    while keys <= _MAX_KEYS:
        for batch in range(1, _MAX_BATCH + 1):
            s = split_count_for(compute_units, batch, units, 1, keys, fill, cap=cap)
            seen.add(s)
            if s == 1:
                break  # more sequences only lower the count
        keys *= 2
    return tuple(sorted(seen))


def pow2(n: int, lo: int = 16) -> int:
    """The power of two >= n and >= lo (a tile width covering n)."""
    return max(lo, 1 << (max(n, 1) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints (tiles covering a rows of b each)."""
    return -(-a // b)
