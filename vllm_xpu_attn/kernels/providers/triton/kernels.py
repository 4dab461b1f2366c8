"""Device-neutral Triton kernels for the provider contract (CUDA and Intel's Triton backend).

Rules kept here: no fp64, no vendor intrinsics (tanh is written with exp), every address
that scales with the cache size is formed in int64, and the same code runs under
TRITON_INTERPRET=1 on the CPU (the CI check).

One attention kernel serves prefill, extend and decode. A program owns one KV head of one
sequence and a tile of BLOCK_M "rows", a row being (query token, query head of the GQA
group): the group's heads share every K/V tile they load. Decode splits the keys of a
sequence over NUM_SPLITS programs (flash-decoding); ``_merge_splits`` combines them.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


if hasattr(tl, "make_tensor_descriptor"):

    @triton.jit
    def _slot_rows(base, rows, cols, row_stride, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        """A cache as a [rows, cols] tensor descriptor (row-major, ``row_stride`` elements per row)."""
        return tl.make_tensor_descriptor(
            base, shape=[rows, cols], strides=[row_stride, 1], block_shape=[BLOCK_ROWS, BLOCK_COLS]
        )
else:  # Triton < 3.4 (Intel's 3.3 build): no device-side descriptors. Triton resolves every name a kernel
    # uses when it hashes it, so the name must exist; the provider sets USE_DESC on CUDA sm90 alone.
    @triton.jit
    def _slot_rows(base, rows, cols, row_stride, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        tl.static_assert(False, "tensor descriptors need Triton >= 3.4")
        return base


@triton.jit
def _tanh(x):
    # tanh without libdevice: 1 - 2 / (exp(2x) + 1) saturates correctly at +-inf
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


# FP8 caches against 16-bit queries (FP8_CVT, tuning.FP8_OPERANDS): 0 converts the cache's elements to the
# query dtype (Triton's cast: on NVIDIA it converts the tile in registers after a scalar byte-wise shared-memory
# read, since an 8-bit operand cannot take ldmatrix; e4m3 -> bf16 goes through fp32); 1 puts the products in
# fp16 (e4m3 / e5m2 -> fp16 is exact); 2 is 1 with the conversion as PTX cvt (NVIDIA sm89+) that Triton cannot
# move past the operand's shared-memory copy: the tile is converted once, stored as fp16 and read by ldmatrix,
# which halves the registers of the key loop. bf16 queries enter the fp16 products as q x 2^-8 (exact for
# 2^-6 <= |q| < 1.6e7: bf16's 8-bit significand fits fp16's 11; below, fp16's subnormal step is 2^-16 in q's
# units); the scores' scale takes the 2^8 back. p in [0, 1] is at least as precise in fp16 as in bf16.
FP8_Q_SHIFT = tl.constexpr(0.00390625)


@triton.jit
def _mma_q(x, FP8_CVT: tl.constexpr):
    """q (or a head-dim slice of it) in the dtype the products take against an FP8 cache (see FP8_CVT)."""
    Q_BF16: tl.constexpr = x.dtype == tl.bfloat16
    if FP8_CVT > 0:
        if Q_BF16:
            x = (x.to(tl.float32) * FP8_Q_SHIFT).to(tl.float16)
    return x


@triton.jit
def _mma_scale(scale, Q, FP8_CVT: tl.constexpr):
    """The scores' scale with _mma_q's 2^-8 on bf16 queries taken back."""
    Q_BF16: tl.constexpr = Q.dtype.element_ty == tl.bfloat16
    if FP8_CVT > 0:
        if Q_BF16:
            scale = scale * (1.0 / FP8_Q_SHIFT)
    return scale


@triton.jit
def _fp8_f16_ptx(x):
    """FP8 [..] -> fp16 by PTX cvt.rn.f16x2 (four elements per call), opaque to Triton (is_pure=False) so that
    the conversion stays after the operand's shared-memory load instead of being hoisted into it."""
    E5M2: tl.constexpr = x.dtype == tl.float8e5
    if E5M2:
        y = tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e5m2x2 $0, lo; cvt.rn.f16x2.e5m2x2 $1, hi; }",
            "=r,=r,r",
            [x.to(tl.uint8, bitcast=True)],
            dtype=tl.float16,
            is_pure=False,
            pack=4,
        )
    else:
        y = tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.rn.f16x2.e4m3x2 $0, lo; cvt.rn.f16x2.e4m3x2 $1, hi; }",
            "=r,=r,r",
            [x.to(tl.uint8, bitcast=True)],
            dtype=tl.float16,
            is_pure=False,
            pack=4,
        )
    return y


@triton.jit
def _mma_kv(x, dt: tl.constexpr, FP8_CVT: tl.constexpr):
    """A K or V tile as a product operand: in ``dt`` (the query side's dtype), or fp16 from FP8 (FP8_CVT)."""
    if FP8_CVT == 2:
        y = _fp8_f16_ptx(x)
    elif FP8_CVT == 1:
        y = x.to(tl.float16)
    else:
        y = x.to(dt)
    return y


@triton.jit
def _flag(ERR, code: tl.constexpr, index, value):
    """Record a bad index value found on the device (kernels/guard.py reads it at a step boundary)."""
    tl.atomic_max(ERR + 2 * code, (index + 1).to(tl.int32))
    tl.atomic_xchg(ERR + 2 * code + 1, value.to(tl.int32))


@triton.jit
def _checked_lengths(ERR, CUQ, SEQ, b, total_q, max_keys, first):
    """Sequence b's query rows [q_start, q_end) (CUQ) and key count k_len (SEQ), clamped into what exists: rows
    inside q/out (total_q rows) and keys inside its page-table row (max_keys); a bad value is flagged once (by the
    ``first`` program of the sequence). Returns (q_start, q_end, k_len, bad): a bad sequence's rows that exist
    come out NaN (guard.py)."""
    q_start = tl.load(CUQ + b)
    q_end = tl.load(CUQ + b + 1)
    k_len = tl.load(SEQ + b)
    rows_bad = (q_start < 0) | (q_end < q_start) | (q_end > total_q)
    keys_bad = (k_len < 0) | (k_len > max_keys)
    if rows_bad:
        if first:
            _flag(ERR, 0, b, q_end)
        q_start = tl.minimum(tl.maximum(q_start, 0), total_q)
        q_end = tl.minimum(tl.maximum(q_end, q_start), total_q)
    if keys_bad:
        if first:
            _flag(ERR, 1, b, k_len)
        k_len = tl.minimum(tl.maximum(k_len, 0), max_keys)
    return q_start, q_end, k_len, rows_bad | keys_bad


@triton.jit
def _checked_pages(ERR, b, pt_row, j, j_ok, n_pages, PAGE: tl.constexpr):
    """Page ids int64 [BLOCK_N] of keys j (masked by j_ok) from a page-table row; an id outside [0, n_pages)
    reads page 0 instead and is flagged. Returns (pages, any_bad)."""
    page = tl.load(pt_row + j // PAGE, mask=j_ok, other=0).to(tl.int64)
    page_bad = ((page < 0) | (page >= n_pages)) & j_ok
    any_bad = tl.max(page_bad.to(tl.int32), 0) > 0
    if any_bad:
        _flag(ERR, 2, b, tl.max(tl.where(page_bad, page, -(1 << 40)), 0))
    return tl.where(page_bad, 0, page), any_bad


@triton.jit
def _split3(x):
    """fp32 x as three bf16-exact fp32 parts, high to low, summing to x exactly (8 significant bits each)."""
    h = x.to(tl.bfloat16).to(tl.float32)
    r = x - h  # exact: x and h share their leading bits
    m = r.to(tl.bfloat16).to(tl.float32)
    return h, m, (r - m).to(tl.bfloat16).to(tl.float32)


@triton.jit
def _alibi_rows(slope, dpos):
    """The row operand [BLOCK_M, 16] fp32 of the causal ALiBi bias as a matrix product (_alibi_keys): columns
    0-8 the base-2 slope's three bf16 parts (each key part meets each), 9-11 the per-row term slope x dpos
    (dpos = ref - pos >= 0: the tile's reference position minus the row's), 12-15 zero. Every entry is a bf16
    value, so a bf16 dot multiplies them exactly and sums in fp32."""
    k = tl.arange(0, 16)[None, :]
    sh, sm, sl = _split3(slope)
    gh, gm, gl = _split3(slope * dpos.to(tl.float32))
    part = k % 3
    sp = tl.where(part == 0, sh[:, None], tl.where(part == 1, sm[:, None], sl[:, None]))
    gp = tl.where(part == 0, gh[:, None], tl.where(part == 1, gm[:, None], gl[:, None]))
    return tl.where(k < 9, sp, tl.where(k < 12, gp, 0.0))


@triton.jit
def _alibi_keys(j, ref):
    """The key operand [16, BLOCK_N] fp32 of the causal ALiBi bias (_alibi_rows): e = j - ref in three signed
    8-bit digits (x 65536, x 256, x 1; |e| capped at 2**24 - 1, far past any key a bias leaves visible), each
    in three rows (one per slope part), then three rows of ones (the per-row term), four of zeros. rows . keys
    = slope x (j - ref) + slope x (ref - pos) = slope x (j - pos), the bias of every key a causal row sees."""
    e = j - ref
    a = tl.minimum(tl.abs(e), (1 << 24) - 1)
    sg = tl.where(e < 0, -1.0, 1.0)
    e2 = (a >> 16).to(tl.float32) * (65536.0 * sg)
    e1 = ((a >> 8) & 255).to(tl.float32) * (256.0 * sg)
    e0 = (a & 255).to(tl.float32) * sg
    k = tl.arange(0, 16)[:, None]
    digit = tl.where(k < 3, e2[None, :], tl.where(k < 6, e1[None, :], e0[None, :]))
    return tl.where(k < 9, digit, tl.where(k < 12, 1.0, 0.0))


@triton.jit
def _attn_block(
    acc,
    l_i,
    m_i,
    q,
    start,
    hi,
    k_len,
    pos,
    row_ok,
    K,
    V,
    k_desc,
    v_desc,
    pt_row,
    n_pages,
    vis_lo,
    ERR,
    b,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    kvh,
    qk_scale,
    qk_scale_log2,
    softcap,
    slope,
    alibi_ref,
    offs_d,
    offs_dv,
    WIN_LEFT: tl.constexpr,
    WIN_RIGHT: tl.constexpr,
    PAGE: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    CHUNK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    ALIBI_DOT: tl.constexpr,
    FP32_DOT: tl.constexpr,
    FP8_CVT: tl.constexpr,
    HAS_DESCALE: tl.constexpr,
    USE_DESC: tl.constexpr,
    MASKED: tl.constexpr,
    ZERO_V: tl.constexpr,
):
    """Keys [start, start + BLOCK_N) folded into a tile's running softmax: m_i, l_i [BLOCK_M] fp32 (base 2),
    acc [BLOCK_M, CHUNK_DV] fp32. MASKED=False only for blocks every row of the tile fully sees (no key
    past ``hi``, k_len or a window edge): those run without masks. USE_DESC: K/V tiles by tensor descriptor
    (TMA on Hopper) over the cache's slot rows; masked-off keys are read (they are in the page) and dropped
    by the scores' mask; ZERO_V (descriptor path, the block that holds ``hi``): V rows past ``hi`` are zeroed,
    since a page's unwritten tail may hold NaN/Inf and p = 0 there does not cancel it (0 x NaN = NaN). Only
    that block pays for it: the select takes V through registers, which costs the whole kernel spill when it
    sits in the loop.

    Bounds (guard.py): a page id outside [0, n_pages) reads page 0 instead, is flagged, and turns the
    tile's l_i to NaN (its rows come out NaN). ``vis_lo``: the tile's first key inside the window (0 without
    one): V rows before it are not read (slots that left every row's window may hold anything)."""
    j = start + tl.arange(0, BLOCK_N)
    j_ok = j < hi
    pg_bad = False
    if USE_DESC or PAGE % BLOCK_N == 0:
        # the whole key block lies in one page: one page id
        pg = tl.load(pt_row + start // PAGE).to(tl.int64)
        pg_bad = (pg < 0) | (pg >= n_pages)
        if pg_bad:
            _flag(ERR, 2, b, pg)
        pg = tl.where(pg_bad, 0, pg)
    if USE_DESC:
        # slot row of the block's first key (the block lies in one page: PAGE % BLOCK_N == 0); int32 (the
        # provider checks pages x PAGE < 2**31)
        r = pg.to(tl.int32) * PAGE + start % PAGE  # (int64 tables too)
        k = k_desc.load([r, kvh * stride_kh])
    elif PAGE % BLOCK_N == 0:
        # affine addresses within the one page (vectorisable loads)
        k_base = K + pg * stride_kp + kvh * stride_kh
        v_base = V + pg * stride_vp + kvh * stride_vh
        in_page = (start % PAGE + tl.arange(0, BLOCK_N)).to(tl.int64)
        k_row = k_base + in_page * stride_ks
        v_row = v_base + in_page * stride_vs
    else:
        page, pg_bad = _checked_pages(ERR, b, pt_row, j, j_ok, n_pages, PAGE)
        slot_off = (j % PAGE).to(tl.int64)
        k_row = K + page * stride_kp + slot_off * stride_ks + kvh * stride_kh
        v_row = V + page * stride_vp + slot_off * stride_vs + kvh * stride_vh
    if CHUNK_D == BLOCK_D:
        if USE_DESC:
            pass
        elif MASKED:
            k = tl.load(k_row[:, None] + offs_d[None, :], mask=j_ok[:, None] & (offs_d[None, :] < D), other=0.0)
        elif D == BLOCK_D:
            k = tl.load(k_row[:, None] + offs_d[None, :])
        else:
            k = tl.load(k_row[:, None] + offs_d[None, :], mask=offs_d[None, :] < D, other=0.0)
        k = tl.trans(k)  # [BLOCK_D, BLOCK_N]
        if FP32_DOT:
            s = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee")
        else:
            s = tl.dot(q, _mma_kv(k, q.dtype, FP8_CVT))
        qdt = q.dtype
    else:
        # the scores summed over CHUNK_D-wide slices of the head dim: q is the tile's row pointers, and one q
        # slice (reloaded per key block: cache hits) and one key slice are live at a time (tiles.PAGED_D_TILES)
        s = tl.zeros([q.shape[0], BLOCK_N], tl.float32)
        for c in tl.static_range(BLOCK_D // CHUNK_D):
            cols = c * CHUNK_D + offs_d
            qc = _mma_q(tl.load(q + c * CHUNK_D, mask=row_ok[:, None] & (cols[None, :] < D), other=0.0), FP8_CVT)
            if MASKED:
                kc = tl.load(k_row[:, None] + cols[None, :], mask=j_ok[:, None] & (cols[None, :] < D), other=0.0)
            elif D == BLOCK_D:
                kc = tl.load(k_row[:, None] + cols[None, :])
            else:
                kc = tl.load(k_row[:, None] + cols[None, :], mask=cols[None, :] < D, other=0.0)
            if FP32_DOT:
                s = tl.dot(qc.to(tl.float32), tl.trans(kc.to(tl.float32)), s, input_precision="ieee")
            else:
                s = tl.dot(qc, tl.trans(_mma_kv(kc, qc.dtype, FP8_CVT)), s)
        qdt = q.dtype.element_ty
        if FP8_CVT > 0:
            qdt = tl.float16
    # (pairs: Triton 3.3, Intel's build, refuses a chain of three or more boolean operands)
    if ((not MASKED) and (not HAS_SOFTCAP)) and (((not HAS_ALIBI) and (not FP32_DOT)) and (not HAS_DESCALE)):
        # the plain unmasked block: the max is taken before scaling (softmax_scale > 0: LayerConsts.make),
        # so one FMA per score forms the exponent
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale_log2)
        p = tl.exp2(s * qk_scale_log2 - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
    else:
        # scores go to base 2 for exp2; log2(e) is folded into a multiply already there where possible (one
        # multiply less per score, which keeps Intel's 256-GRF paged tiles free of register spill)
        if FP32_DOT:
            s = s * qk_scale
            if HAS_SOFTCAP:
                s = softcap * _tanh(s / softcap)
            s = s * LOG2E
        elif HAS_SOFTCAP:
            # softcap x tanh(x / softcap) in base 2 as c - 2c / (2^(2 log2(e) x / softcap) + 1), c = softcap x
            # log2(e): the constants fold into one multiply before and one after (saturates at +-c); the
            # tanh form's extra passes over the scores spilled prefill with sinks on Intel's 256 GRF
            s = (softcap * LOG2E) - (2.0 * LOG2E * softcap) / (tl.exp2(s * ((2.0 * LOG2E) * qk_scale / softcap)) + 1.0)
        else:
            s = s * qk_scale_log2
        if HAS_ALIBI:  # base 2: the kernel scaled the slopes by log2(e)
            if CAUSAL and ALIBI_DOT:
                # slope x (j - pos) as an exact [BLOCK_M, 16] x [16, BLOCK_N] product accumulated into the
                # scores (slope: _alibi_rows' operand): the bias arrives in the scores' own layout, where a
                # broadcast [rows x keys] term cost Intel's 256-GRF tiles 2.9-7.6 KB of spill
                kb = _alibi_keys(j, alibi_ref)
                if FP32_DOT:
                    s = tl.dot(slope, kb, s, input_precision="ieee")
                else:
                    s = tl.dot(slope.to(tl.bfloat16), kb.to(tl.bfloat16), s)
            else:
                s = s - slope[:, None] * tl.abs(j[None, :] - pos[:, None]).to(tl.float32)
        if MASKED:
            rel = j[None, :] - pos[:, None]
            ok = row_ok[:, None] & j_ok[None, :] & (j[None, :] < k_len)
            if CAUSAL:
                ok = ok & (rel <= 0)
            elif WIN_RIGHT >= 0:
                ok = ok & (rel <= WIN_RIGHT)
            if WIN_LEFT >= 0:
                ok = ok & (rel >= -WIN_LEFT)
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = m_new
        alpha = tl.exp2(m_i - m_safe)
        p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    l_i = tl.where(pg_bad, float("nan"), l_i)
    v_ok = j_ok
    if WIN_LEFT >= 0:
        v_ok = v_ok & (j >= vis_lo)
    if USE_DESC:
        v = v_desc.load([r, kvh * stride_vh])
        if ZERO_V:
            v = tl.where(v_ok[:, None], v, 0.0)
    elif MASKED:
        v = tl.load(v_row[:, None] + offs_dv[None, :], mask=v_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)
    elif DV == BLOCK_DV:
        v = tl.load(v_row[:, None] + offs_dv[None, :])
    else:
        v = tl.load(v_row[:, None] + offs_dv[None, :], mask=offs_dv[None, :] < DV, other=0.0)
    acc = acc * alpha[:, None]
    if FP32_DOT:
        acc = tl.dot(p, v.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(p.to(qdt), _mma_kv(v, qdt, FP8_CVT), acc)
    return acc, l_i, m_new


# per-step sizes (a cache's slot count, the token count, the table width): not specialised on their value
# (== 1, % 16), so one compiled kernel serves every step of a layer instead of up to three
@triton.jit(do_not_specialize=["kv_rows", "total_q", "num_q_heads", "stride_ptb", "stride_ds_b", "pt_cols"])
def _paged_attn_kernel(
    Q,
    K,
    V,
    PT,
    SEQ,
    CUQ,
    SINKS,
    ALIBI,
    KDS,
    VDS,
    O,
    LSE,
    OP,
    LP,
    ERR,
    stride_qt,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_ot,
    stride_oh,
    stride_ptb,
    stride_ds_b,
    total_q,
    num_q_heads,
    scale,
    softcap,
    kv_rows,
    pt_cols,
    WIN_LEFT: tl.constexpr,
    WIN_RIGHT: tl.constexpr,
    PAGE: tl.constexpr,
    GROUP: tl.constexpr,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    CHUNK_D: tl.constexpr,
    CHUNK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    HAS_ALIBI: tl.constexpr,
    ALIBI_DOT: tl.constexpr,
    HAS_DESCALE: tl.constexpr,
    DESCALE_PER_HEAD: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    FP32_DOT: tl.constexpr,
    FP8_CVT: tl.constexpr,
    ALIGN_ROWS: tl.constexpr,
    SPLIT_MASK: tl.constexpr,
    USE_DESC: tl.constexpr,
):
    b = tl.program_id(0)
    # the longest causal tiles (the last queries) first: less idle tail at the end of the grid
    tile = tl.num_programs(1) - 1 - tl.program_id(1)
    # axis 2: KV head x key split x output-column program (BLOCK_DV // CHUNK_DV of them; one in the fused form)
    tl.static_assert(
        (not USE_DESC) or ((CHUNK_D == BLOCK_D) and (CHUNK_DV == BLOCK_DV)),
        "tensor descriptors load whole rows: head-dim chunks take pointer loads",
    )
    COLS: tl.constexpr = BLOCK_DV // CHUNK_DV
    col = tl.program_id(2) % COLS
    kvh_split = tl.program_id(2) // COLS
    kvh = kvh_split // NUM_SPLITS
    split = kvh_split % NUM_SPLITS

    # bounds (guard.py): rows outside q/out and keys beyond the table row are never touched; such a
    # sequence is flagged and its rows that exist come out NaN (l_i starts NaN)
    q_start, q_end, k_len, seq_bad = _checked_lengths(
        ERR, CUQ, SEQ, b, total_q, pt_cols * PAGE, (tile == 0) & (tl.program_id(2) == 0)
    )
    q_len = q_end - q_start
    # ALIGN_ROWS (batch-invariant mode): tiles cover fixed absolute (position, head) rows, so a query
    # sits at the same place in its tile however its sequence's queries were chunked or batched
    # (matrix units and BLAS kernels may round a row differently by its place in the tile)
    shift = ((k_len - q_len) * GROUP) % BLOCK_M if ALIGN_ROWS else 0
    if tile * BLOCK_M >= q_len * GROUP + shift:
        return

    rows_s = tile * BLOCK_M + tl.arange(0, BLOCK_M) - shift
    rows = tl.maximum(rows_s, 0)
    t = rows // GROUP  # query token within the sequence
    head = kvh * GROUP + rows % GROUP
    row_ok = (t < q_len) & (rows_s >= 0)
    pos = k_len - q_len + t  # bottom-right aligned position of each query

    offs_d = tl.arange(0, CHUNK_D)
    offs_dv = col * CHUNK_DV + tl.arange(0, CHUNK_DV)  # this program's output columns
    # row addresses: an int64 base for the tile's first token and head, plus small int32 offsets within
    # the tile (fewer registers live across the key loop than per-row int64 addresses)
    t0 = tl.maximum(tile * BLOCK_M - shift, 0) // GROUP
    h0 = kvh * GROUP
    dt = t - t0
    dh = rows % GROUP
    q_base = Q + (q_start + t0).to(tl.int64) * stride_qt + h0.to(tl.int64) * stride_qh
    q = q_base + (dt * stride_qt + dh * stride_qh)[:, None] + offs_d[None, :]
    if CHUNK_D == BLOCK_D:
        q = _mma_q(tl.load(q, mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0), FP8_CVT)
    # (else: the row pointers, loaded a head-dim slice at a time in _attn_block)

    qk_scale = _mma_scale(scale, Q, FP8_CVT)
    v_scale = 1.0
    if HAS_DESCALE:
        if DESCALE_PER_HEAD:
            qk_scale = qk_scale * tl.load(KDS + b * stride_ds_b + kvh)
            v_scale = tl.load(VDS + b * stride_ds_b + kvh)
        else:
            qk_scale = qk_scale * tl.load(KDS)
            v_scale = tl.load(VDS)
    qk_scale_log2 = qk_scale * LOG2E
    slope = 0.0
    alibi_ref = 0
    if HAS_ALIBI:
        slope = tl.load(ALIBI + head, mask=row_ok, other=0.0).to(tl.float32) * LOG2E  # base 2, as the scores

    # key range this tile can see
    pos_lo = k_len - q_len + tl.maximum(tile * BLOCK_M - shift, 0) // GROUP
    pos_hi = tl.minimum(k_len - q_len + (tile * BLOCK_M + BLOCK_M - 1 - shift) // GROUP, k_len - 1)
    if HAS_ALIBI and (CAUSAL and ALIBI_DOT):  # the bias's row operand, once per tile (_alibi_rows)
        # the reference: the tile's last row position, unclamped, so that under ALIGN_ROWS it is an absolute
        # position (the same however the prefill is chunked: the bias's rounding depends on it)
        alibi_ref = k_len - q_len + (tile * BLOCK_M + BLOCK_M - 1 - shift) // GROUP
        slope = _alibi_rows(slope, alibi_ref - pos)
    lo = 0
    hi = k_len
    if CAUSAL:
        hi = tl.minimum(hi, pos_hi + 1)
    elif WIN_RIGHT >= 0:
        hi = tl.minimum(hi, pos_hi + WIN_RIGHT + 1)
    if WIN_LEFT >= 0:
        lo = tl.maximum(pos_lo - WIN_LEFT, 0)
    lo = (lo // BLOCK_N) * BLOCK_N
    if NUM_SPLITS > 1:
        per = tl.cdiv(tl.cdiv(hi - lo, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = lo + split * per
        hi = tl.minimum(hi, lo + per)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32) + tl.where(seq_bad, float("nan"), 0.0)
    acc = tl.zeros([BLOCK_M, CHUNK_DV], tl.float32)
    pt_row = PT + b.to(tl.int64) * stride_ptb
    n_pages = kv_rows // PAGE
    vis_lo = 0
    if WIN_LEFT >= 0:
        vis_lo = pos_lo - WIN_LEFT  # the tile's first key inside a window (its first row's left edge)
    k_desc = K
    v_desc = V
    if USE_DESC:
        # the cache as [kv_rows slots, the columns up to the last head's end]; a KV head's tile is
        # [BLOCK_N slots, D] at column kvh * stride_kh (D == BLOCK_D; strides 16-byte multiples: provider)
        hkv = num_q_heads // GROUP
        k_desc = _slot_rows(K, kv_rows, (hkv - 1) * stride_kh + D, stride_ks, BLOCK_N, BLOCK_D)
        v_desc = _slot_rows(V, kv_rows, (hkv - 1) * stride_vh + DV, stride_vs, BLOCK_N, BLOCK_DV)
    if SPLIT_MASK:
        # key blocks every row of the tile fully sees run without the mask (most of a long causal prefill);
        # only window-edge blocks before them and the diagonal/tail blocks after them pay for it
        full_lo = lo
        full_hi = hi
        if CAUSAL:
            full_hi = tl.minimum(full_hi, pos_lo + 1)  # the tile's first row sees keys <= pos_lo
        elif WIN_RIGHT >= 0:
            full_hi = tl.minimum(full_hi, pos_lo + WIN_RIGHT + 1)
        if WIN_LEFT >= 0:
            full_lo = tl.maximum(full_lo, pos_hi - WIN_LEFT)  # its last row sees keys >= pos_hi - window
        # inward to whole blocks: lo <= full_lo <= full_hi <= hi whenever lo <= hi (an empty split has
        # hi < lo, and then all three loops are empty)
        full_lo = tl.maximum(tl.minimum(lo + tl.cdiv(full_lo - lo, BLOCK_N) * BLOCK_N, hi), lo)
        full_hi = tl.minimum(tl.maximum(lo + tl.maximum(full_hi - lo, 0) // BLOCK_N * BLOCK_N, full_lo), hi)
        if WIN_LEFT >= 0:  # window-edge blocks exist only with a left window (no loop compiled otherwise)
            for start in range(lo, full_lo, BLOCK_N):
                acc, l_i, m_i = _attn_block(
                    acc,
                    l_i,
                    m_i,
                    q,
                    start,
                    hi,
                    k_len,
                    pos,
                    row_ok,
                    K,
                    V,
                    k_desc,
                    v_desc,
                    pt_row,
                    n_pages,
                    vis_lo,
                    ERR,
                    b,
                    stride_kp,
                    stride_ks,
                    stride_kh,
                    stride_vp,
                    stride_vs,
                    stride_vh,
                    kvh,
                    qk_scale,
                    qk_scale_log2,
                    softcap,
                    slope,
                    alibi_ref,
                    offs_d,
                    offs_dv,
                    WIN_LEFT,
                    WIN_RIGHT,
                    PAGE,
                    D,
                    DV,
                    BLOCK_D,
                    BLOCK_DV,
                    CHUNK_D,
                    BLOCK_N,
                    CAUSAL,
                    HAS_SOFTCAP,
                    HAS_ALIBI,
                    ALIBI_DOT,
                    FP32_DOT,
                    FP8_CVT,
                    HAS_DESCALE,
                    USE_DESC,
                    True,
                    True,
                )
        for start in range(full_lo, full_hi, BLOCK_N):
            acc, l_i, m_i = _attn_block(
                acc,
                l_i,
                m_i,
                q,
                start,
                hi,
                k_len,
                pos,
                row_ok,
                K,
                V,
                k_desc,
                v_desc,
                pt_row,
                n_pages,
                vis_lo,
                ERR,
                b,
                stride_kp,
                stride_ks,
                stride_kh,
                stride_vp,
                stride_vs,
                stride_vh,
                kvh,
                qk_scale,
                qk_scale_log2,
                softcap,
                slope,
                alibi_ref,
                offs_d,
                offs_dv,
                WIN_LEFT,
                WIN_RIGHT,
                PAGE,
                D,
                DV,
                BLOCK_D,
                BLOCK_DV,
                CHUNK_D,
                BLOCK_N,
                CAUSAL,
                HAS_SOFTCAP,
                HAS_ALIBI,
                ALIBI_DOT,
                FP32_DOT,
                FP8_CVT,
                HAS_DESCALE,
                USE_DESC,
                False,
                False,
            )
        # descriptor path: the block holding hi (when hi is not a block edge) is peeled off the masked loop,
        # the one block whose V needs zeroing past hi (every block before it lies wholly below hi)
        tail_hi = hi
        if USE_DESC:
            tail_hi = tl.maximum(hi // BLOCK_N * BLOCK_N, full_hi)
        for start in range(full_hi, tail_hi, BLOCK_N):
            acc, l_i, m_i = _attn_block(
                acc,
                l_i,
                m_i,
                q,
                start,
                hi,
                k_len,
                pos,
                row_ok,
                K,
                V,
                k_desc,
                v_desc,
                pt_row,
                n_pages,
                vis_lo,
                ERR,
                b,
                stride_kp,
                stride_ks,
                stride_kh,
                stride_vp,
                stride_vs,
                stride_vh,
                kvh,
                qk_scale,
                qk_scale_log2,
                softcap,
                slope,
                alibi_ref,
                offs_d,
                offs_dv,
                WIN_LEFT,
                WIN_RIGHT,
                PAGE,
                D,
                DV,
                BLOCK_D,
                BLOCK_DV,
                CHUNK_D,
                BLOCK_N,
                CAUSAL,
                HAS_SOFTCAP,
                HAS_ALIBI,
                ALIBI_DOT,
                FP32_DOT,
                FP8_CVT,
                HAS_DESCALE,
                USE_DESC,
                True,
                not USE_DESC,
            )
        if USE_DESC:
            if tail_hi < hi:
                acc, l_i, m_i = _attn_block(
                    acc,
                    l_i,
                    m_i,
                    q,
                    tail_hi,
                    hi,
                    k_len,
                    pos,
                    row_ok,
                    K,
                    V,
                    k_desc,
                    v_desc,
                    pt_row,
                    n_pages,
                    vis_lo,
                    ERR,
                    b,
                    stride_kp,
                    stride_ks,
                    stride_kh,
                    stride_vp,
                    stride_vs,
                    stride_vh,
                    kvh,
                    qk_scale,
                    qk_scale_log2,
                    softcap,
                    slope,
                    alibi_ref,
                    offs_d,
                    offs_dv,
                    WIN_LEFT,
                    WIN_RIGHT,
                    PAGE,
                    D,
                    DV,
                    BLOCK_D,
                    BLOCK_DV,
                    CHUNK_D,
                    BLOCK_N,
                    CAUSAL,
                    HAS_SOFTCAP,
                    HAS_ALIBI,
                    ALIBI_DOT,
                    FP32_DOT,
                    FP8_CVT,
                    HAS_DESCALE,
                    USE_DESC,
                    True,
                    True,
                )
    else:
        for start in range(lo, hi, BLOCK_N):
            acc, l_i, m_i = _attn_block(
                acc,
                l_i,
                m_i,
                q,
                start,
                hi,
                k_len,
                pos,
                row_ok,
                K,
                V,
                k_desc,
                v_desc,
                pt_row,
                n_pages,
                vis_lo,
                ERR,
                b,
                stride_kp,
                stride_ks,
                stride_kh,
                stride_vp,
                stride_vs,
                stride_vh,
                kvh,
                qk_scale,
                qk_scale_log2,
                softcap,
                slope,
                alibi_ref,
                offs_d,
                offs_dv,
                WIN_LEFT,
                WIN_RIGHT,
                PAGE,
                D,
                DV,
                BLOCK_D,
                BLOCK_DV,
                CHUNK_D,
                BLOCK_N,
                CAUSAL,
                HAS_SOFTCAP,
                HAS_ALIBI,
                ALIBI_DOT,
                FP32_DOT,
                FP8_CVT,
                HAS_DESCALE,
                USE_DESC,
                True,
                True,
            )

    acc = acc * v_scale
    out_rows = (q_start + t).to(tl.int64)
    o_base = O + (q_start + t0).to(tl.int64) * stride_ot + h0.to(tl.int64) * stride_oh
    if NUM_SPLITS == 1:
        rescale = 1.0
        if HAS_SINKS:
            sink = tl.load(SINKS + head, mask=row_ok, other=0.0).to(tl.float32) * LOG2E
            m_fin = tl.maximum(m_i, sink)
            m_fin_safe = tl.where(m_fin == float("-inf"), 0.0, m_fin)  # no key and a sink of -inf
            rescale = tl.exp2(m_i - m_fin_safe)
            l_i = l_i * rescale + tl.exp2(sink - m_fin_safe)
            m_i = m_fin
        # a row that saw no key: out 0, LSE -inf (the sink's logit with a sink); l_i NaN (bad input) stays NaN
        empty = l_i == 0
        # one per-row factor (the sink's rescale over the denominator): no second [rows x columns] pass
        o = acc * (rescale / tl.where(empty, 1.0, l_i))[:, None]
        tl.store(
            o_base + (dt * stride_ot + dh * stride_oh)[:, None] + offs_dv[None, :],
            o.to(O.dtype.element_ty),
            mask=row_ok[:, None] & (offs_dv[None, :] < DV),
        )
        if WRITE_LSE:
            lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * LN2)
            if col == 0:  # one writer among the column programs
                tl.store(LSE + head.to(tl.int64) * total_q + out_rows, lse, mask=row_ok)
    else:
        # partial result of this split, unnormalised-by-sink: o = acc / l, lse in natural log (NaN stays NaN)
        empty = l_i == 0
        o = acc / tl.where(empty, 1.0, l_i)[:, None]
        base = split.to(tl.int64) * total_q * num_q_heads
        idx = base + out_rows * num_q_heads + head
        tl.store(OP + idx[:, None] * BLOCK_DV + offs_dv[None, :], o, mask=row_ok[:, None])
        lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * LN2)
        if col == 0:
            tl.store(LP + idx, lse, mask=row_ok)


@triton.jit(do_not_specialize=["total_q", "num_q_heads", "batch"])
def _merge_splits(
    OP,
    LP,
    O,
    LSE,
    SINKS,
    CUQ,
    stride_ot,
    stride_oh,
    total_q,
    num_q_heads,
    batch,
    DV: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_C: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HAS_SINKS: tl.constexpr,
    WRITE_LSE: tl.constexpr,
):
    """Split-K partials (OP [NUM_SPLITS, total_q x H, BLOCK_DV] fp32, LP [NUM_SPLITS, total_q x H] fp32 natural-log
    LSE) of one query row and head -> O's columns [col x BLOCK_C, (col + 1) x BLOCK_C) (axis 2; every column program
    weighs the splits alike: the same bits as one program over the row) and, by column program 0, LSE."""
    tok = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    col = tl.program_id(2)
    if tok >= tl.load(CUQ + batch):  # a padded token row (graph replays): no split wrote it, leave it alone
        return
    offs = col * BLOCK_C + tl.arange(0, BLOCK_C)
    splits = tl.arange(0, NUM_SPLITS)
    idx = splits.to(tl.int64) * total_q * num_q_heads + tok * num_q_heads + h
    lse = tl.load(LP + idx)  # [NUM_SPLITS]
    m = tl.max(lse, 0)
    if HAS_SINKS:
        sink = tl.load(SINKS + h).to(tl.float32)
        m = tl.maximum(m, sink)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse - m_safe)
    denom = tl.sum(w, 0)
    if HAS_SINKS:
        denom = denom + tl.exp(sink - m_safe)
    o = tl.load(OP + idx[:, None] * BLOCK_DV + offs[None, :])
    acc = tl.sum(o * w[:, None], 0)
    has = denom > 0
    out = acc / tl.where(has, denom, 1.0)
    tl.store(O + tok * stride_ot + h * stride_oh + offs, out.to(O.dtype.element_ty), mask=offs < DV)
    if WRITE_LSE:
        if col == 0:
            tl.store(
                LSE + h.to(tl.int64) * total_q + tok,
                tl.where(has, m_safe + tl.log(tl.where(has, denom, 1.0)), float("-inf")),
            )


@triton.jit
def _merge_state_kernel(
    OA,
    LA,
    OB,
    LB,
    SINKS,
    O,
    L,
    stride_t,
    stride_h,
    total,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_SINKS: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    offs = tl.arange(0, BLOCK_D)
    la = tl.load(LA + h * total + t)
    lb = tl.load(LB + h * total + t)
    m = tl.maximum(la, lb)
    if HAS_SINKS:  # the sink joins the softmax denominator once, with no value
        sink = tl.load(SINKS + h).to(tl.float32)
        m = tl.maximum(m, sink)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    wa = tl.exp(la - m_safe)
    wb = tl.exp(lb - m_safe)
    den = wa + wb
    if HAS_SINKS:
        den = den + tl.exp(sink - m_safe)
    has = den > 0
    dn = tl.where(has, den, 1.0)
    msk = offs < D
    oa = tl.load(OA + t * stride_t + h * stride_h + offs, mask=msk, other=0.0).to(tl.float32)
    ob = tl.load(OB + t * stride_t + h * stride_h + offs, mask=msk, other=0.0).to(tl.float32)
    tl.store(O + t * stride_t + h * stride_h + offs, ((oa * wa + ob * wb) / dn).to(O.dtype.element_ty), mask=msk)
    tl.store(L + h * total + t, tl.where(has, m_safe + tl.log(dn), float("-inf")))


@triton.jit(do_not_specialize=["n_slots"])
def _write_kv_kernel(
    X,
    C,
    SLOT,
    SCALE,
    ERR,
    stride_xt,
    stride_xh,
    stride_cp,
    stride_cs,
    stride_ch,
    n_slots,
    H: tl.constexpr,
    D: tl.constexpr,
    PAGE: tl.constexpr,
    BLOCK_D: tl.constexpr,
    QUANT: tl.constexpr,
    FMAX: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    slot = tl.load(SLOT + t).to(tl.int64)
    if slot < 0:  # padding (the engines' convention)
        return
    if slot >= n_slots:  # bounds (guard.py): never written, flagged
        if h == 0:
            _flag(ERR, 3, t, slot)
        return
    offs = tl.arange(0, BLOCK_D)
    msk = offs < D
    x = tl.load(X + t * stride_xt + h * stride_xh + offs, mask=msk, other=0.0)
    dst = C + (slot // PAGE) * stride_cp + (slot % PAGE) * stride_cs + h * stride_ch + offs
    if QUANT:
        # the documented FP8 semantics: IEEE x / s (div_rn: Triton's "/" is approximate), saturated to
        # the format's finite range, then round-to-nearest-even by the cast; NaN stays NaN
        y = tl.div_rn(x.to(tl.float32), tl.load(SCALE))
        y = tl.where(y != y, y, tl.minimum(tl.maximum(y, -FMAX), FMAX))
        tl.store(dst, y.to(C.dtype.element_ty), mask=msk)
    else:
        tl.store(dst, x.to(C.dtype.element_ty), mask=msk)


@triton.jit
def _mla_rows(tile, q_len, k_len, num_q_heads, BLOCK_H: tl.constexpr):
    """The BLOCK_H rows of an MLA head tile, a row being (query token, head) in token-major order: (token t,
    head, row inside the sequence's queries r_ok, causal position pos), each [BLOCK_H]; queries are aligned to
    the end of the keys."""
    rows = tile * BLOCK_H + tl.arange(0, BLOCK_H)
    t = rows // num_q_heads
    heads = rows % num_q_heads
    r_ok = t < q_len
    pos = k_len - q_len + t  # bottom-right aligned position of each row's query
    return t, heads, r_ok, pos


@triton.jit
def _mla_key_range(split, tile, q_len, k_len, num_q_heads, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                   NUM_SPLITS: tl.constexpr):  # fmt: skip
    """Keys [lo, hi) of one MLA program: causal (no key after the head tile's last query row), then split
    ``split`` of NUM_SPLITS whole-BLOCK_N shares of them (split-K decode)."""
    last = tl.minimum(q_len - 1, (tile * BLOCK_H + BLOCK_H - 1) // num_q_heads)
    hi = tl.minimum(k_len, k_len - q_len + last + 1)  # causal: no key after this tile's last query
    lo = 0
    if NUM_SPLITS > 1:
        per = tl.cdiv(tl.cdiv(hi, NUM_SPLITS), BLOCK_N) * BLOCK_N
        lo = split * per
        hi = tl.minimum(hi, lo + per)
    return lo, hi


@triton.jit
def _softmax_fold(s, m_i, l_i, bad):
    """One key block's scores s [rows, keys] fp32 (base 2, masked keys -inf) folded into the running max m_i and
    sum l_i [rows]: (m_new, alpha = the old sum's rescale, p [rows, keys], l_i); ``bad`` turns l_i NaN."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = tl.where(bad, float("nan"), l_i * alpha + tl.sum(p, 1))
    return m_new, alpha, p, l_i


# total_q and the table's row stride change per step: not specialised, so the variants compiled at warm-up
# (warmup.py) serve every step (num_q_heads is the layer's)
@triton.jit(do_not_specialize=["kv_rows", "pt_cols", "total_q", "stride_ptb"])
def _mla_attn_kernel(
    Q,
    KV,
    PT,
    SEQ,
    CUQ,
    KDS,
    O,
    LSE,
    OP,
    LP,
    ERR,
    stride_qt,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_ot,
    stride_oh,
    stride_ptb,
    total_q,
    num_q_heads,
    scale,
    kv_rows,
    pt_cols,
    PAGE: tl.constexpr,
    D_C: tl.constexpr,
    D_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HAS_DESCALE: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    FP32_DOT: tl.constexpr,
):
    """Absorbed MLA over the latent rows [c_KV (D_C) | k_R (D_R)] of one cache, any step.

    A program owns BLOCK_H rows of one sequence, a row being (query token, head) in token-major
    order, so decode (one token) takes BLOCK_H heads and extend/verify rows take consecutive
    tokens' heads; causal, queries aligned to the end of the keys. The value of a key is its c_KV
    part, so in the fused form each key block is loaded once for the scores and the output.
    Split-K over the keys for decode; partials in the layout ``_merge_splits`` reads.

    Register tiles (what keeps the kernel from spilling, on Intel's 256 GRF above all): the scores sum the
    latent product in BLOCK_DC-wide chunks (q and key chunks live one at a time), and a program owns
    BLOCK_DV of the D_C output columns (grid axis 2 = NUM_SPLITS x D_C / BLOCK_DV; each recomputes the
    scores). BLOCK_DC = BLOCK_DV = D_C is the fused form: one key load serves scores and output."""
    b = tl.program_id(0)
    tile = tl.program_id(1)
    split = tl.program_id(2) // (D_C // BLOCK_DV)
    dv0 = (tl.program_id(2) % (D_C // BLOCK_DV)) * BLOCK_DV  # this program's first output column
    # bounds as in _paged_attn_kernel (guard.py)
    q_start, q_end, k_len, seq_bad = _checked_lengths(
        ERR, CUQ, SEQ, b, total_q, pt_cols * PAGE, (tile == 0) & (tl.program_id(2) == 0)
    )
    q_len = q_end - q_start
    if tile * BLOCK_H >= q_len * num_q_heads:  # past this sequence's rows (or a padded request)
        return
    t, heads, r_ok, pos = _mla_rows(tile, q_len, k_len, num_q_heads, BLOCK_H)
    FUSED: tl.constexpr = (BLOCK_DC == D_C) and (BLOCK_DV == D_C)
    offs_c = tl.arange(0, BLOCK_DC)
    offs_v = dv0 + tl.arange(0, BLOCK_DV)
    offs_r = tl.arange(0, D_R)
    q_rows = (q_start + t).to(tl.int64)
    q_row = Q + q_rows[:, None] * stride_qt + heads[:, None].to(tl.int64) * stride_qh
    if FUSED:
        q_c = tl.load(q_row + offs_c[None, :], mask=r_ok[:, None], other=0.0)
    q_r = tl.load(q_row + D_C + offs_r[None, :], mask=r_ok[:, None], other=0.0)
    qk_scale = scale * LOG2E
    kv_scale = 1.0
    if HAS_DESCALE:
        kv_scale = tl.load(KDS).to(tl.float32)
        qk_scale = qk_scale * kv_scale

    lo, hi = _mla_key_range(split, tile, q_len, k_len, num_q_heads, BLOCK_H, BLOCK_N, NUM_SPLITS)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32) + tl.where(seq_bad, float("nan"), 0.0)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    pt_row = PT + b.to(tl.int64) * stride_ptb
    n_pages = kv_rows // PAGE
    for start in range(lo, hi, BLOCK_N):
        j = start + tl.arange(0, BLOCK_N)
        j_ok = j < hi
        page, pg_bad = _checked_pages(ERR, b, pt_row, j, j_ok, n_pages, PAGE)
        row = KV + page * stride_kp + (j % PAGE).to(tl.int64) * stride_ks
        if FUSED:
            kc = tl.load(row[:, None] + offs_c[None, :], mask=j_ok[:, None], other=0.0)  # [BLOCK_N, D_C]: K and V
            kr = tl.load(row[:, None] + D_C + offs_r[None, :], mask=j_ok[:, None], other=0.0)
            if FP32_DOT:
                s = tl.dot(q_c.to(tl.float32), tl.trans(kc.to(tl.float32)), input_precision="ieee")
                s += tl.dot(q_r.to(tl.float32), tl.trans(kr.to(tl.float32)), input_precision="ieee")
            else:
                kc = kc.to(q_c.dtype)
                s = tl.dot(q_c, tl.trans(kc))
                s += tl.dot(q_r, tl.trans(kr.to(q_r.dtype)))
        else:
            kr = tl.load(row[:, None] + D_C + offs_r[None, :], mask=j_ok[:, None], other=0.0)
            if FP32_DOT:
                s = tl.dot(q_r.to(tl.float32), tl.trans(kr.to(tl.float32)), input_precision="ieee")
            else:
                s = tl.dot(q_r, tl.trans(kr.to(q_r.dtype)))
            for c in tl.static_range(D_C // BLOCK_DC):
                # q's chunk reloaded per key block (cache hits): a chunk at a time is what stays live
                qc = tl.load(q_row + c * BLOCK_DC + offs_c[None, :], mask=r_ok[:, None], other=0.0)
                kc = tl.load(row[:, None] + c * BLOCK_DC + offs_c[None, :], mask=j_ok[:, None], other=0.0)
                if FP32_DOT:
                    s += tl.dot(qc.to(tl.float32), tl.trans(kc.to(tl.float32)), input_precision="ieee")
                else:
                    s += tl.dot(qc, tl.trans(kc.to(qc.dtype)))
            kc = tl.load(row[:, None] + offs_v[None, :], mask=j_ok[:, None], other=0.0)  # [BLOCK_N, BLOCK_DV]: V
            if not FP32_DOT:
                kc = kc.to(q_r.dtype)
        ok = r_ok[:, None] & j_ok[None, :] & (j[None, :] <= pos[:, None])
        s = tl.where(ok, s * qk_scale, float("-inf"))
        m_new, alpha, p, l_i = _softmax_fold(s, m_i, l_i, pg_bad)
        if FP32_DOT:
            acc = acc * alpha[:, None] + tl.dot(p, kc.to(tl.float32), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(kc.dtype), kc)
        m_i = m_new

    acc = acc * kv_scale
    empty = l_i == 0  # no key: out 0, LSE -inf; NaN (bad input) stays NaN
    o = acc / tl.where(empty, 1.0, l_i)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * LN2)
    # the LSE is every column program's: the first writes it
    if NUM_SPLITS == 1:
        tl.store(
            O + q_rows[:, None] * stride_ot + heads[:, None].to(tl.int64) * stride_oh + offs_v[None, :],
            o.to(O.dtype.element_ty),
            mask=r_ok[:, None],
        )
        if WRITE_LSE:
            if dv0 == 0:
                tl.store(LSE + heads.to(tl.int64) * total_q + q_rows, lse, mask=r_ok)
    else:
        idx = split.to(tl.int64) * total_q * num_q_heads + q_rows * num_q_heads + heads
        tl.store(OP + idx[:, None] * D_C + offs_v[None, :], o, mask=r_ok[:, None])
        if dv0 == 0:
            tl.store(LP + idx, lse, mask=r_ok)


@triton.jit
def _token_pages_kernel(
    TT, ROWS, OUT, ERR, stride_tt, n_pages, n_rows, PAGE: tl.constexpr, HAS_ROWS: tl.constexpr, BLOCK: tl.constexpr
):
    """Token table -> page table, one program per request: OUT[b, j] = TT[row(b), j * PAGE] // PAGE with
    row(b) = ROWS[b] (a pool row, SGLang's req_pool_indices) or b. Slots are >= 0 (engine allocation).
    A pool row outside [0, n_rows) is flagged (guard.py) and its pages written as -1, which the attention
    kernels flag again and answer with NaN rows."""
    b = tl.program_id(0).to(tl.int64)
    row_bad = False
    if HAS_ROWS:
        row = tl.load(ROWS + b).to(tl.int64)
        row_bad = (row < 0) | (row >= n_rows)
        if row_bad:
            _flag(ERR, 4, b, row)
        row = tl.where(row_bad, 0, row)
    else:
        row = b
        row_bad = b < 0  # never: one type for the select below
    for start in range(0, n_pages, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < n_pages
        slot = tl.load(TT + row * stride_tt + cols.to(tl.int64) * PAGE, mask=m, other=0)
        tl.store(OUT + b * n_pages + cols, tl.where(row_bad, -1, slot // PAGE).to(tl.int32), mask=m)


@triton.jit
def _mla_page_block(
    q_c0,
    q_c1,
    q_r,
    kc_desc,
    kr_desc,
    KV,
    pt_row,
    ERR,
    b,
    start,
    hi,
    pos,
    r_ok,
    m_i,
    l_i,
    acc0,
    acc1,
    stride_kp,
    stride_ks,
    qk_scale,
    n_pages,
    PAGE: tl.constexpr,
    D_C: tl.constexpr,
    D_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    FP32_DOT: tl.constexpr,
    FP8_CVT: tl.constexpr,
    USE_DESC: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Keys [start, start + BLOCK_N) of one page folded into a head tile's running softmax (_mla_page_kernel).

    q_c0 / q_c1 [BLOCK_H, D_C / 2] and q_r [BLOCK_H, D_R]: the tile's latent halves and RoPE query part (16-bit,
    or fp32 when FP32_DOT); m_i, l_i [BLOCK_H] fp32 (base 2); acc0 / acc1 [BLOCK_H, D_C / 2] fp32: the two
    halves of the output columns (FlashMLA's split of the 512-wide value accumulator, here two products of
    N = D_C / 2, so a TMA box (<= 256 columns) loads each half). MASKED=False: every key of the block is
    visible to every row (no key at or past ``hi`` nor after a row's causal position): no mask, no select, no
    zeroing. MASKED: keys past ``hi`` are read as 0 by masked pointer loads (descriptors or not: a page's unwritten
    tail may hold NaN, and p = 0 does not cancel it) and the scores masked.
    A page id outside [0, n_pages) reads page 0 instead, is flagged (guard.py) and turns l_i NaN."""
    HALF: tl.constexpr = D_C // 2
    pg = tl.load(pt_row + start // PAGE).to(tl.int64)  # the block lies in one page (PAGE % BLOCK_N == 0)
    pg_bad = (pg < 0) | (pg >= n_pages)
    if pg_bad:
        _flag(ERR, 2, b, pg)
    pg = tl.where(pg_bad, 0, pg)
    j = start + tl.arange(0, BLOCK_N)
    j_ok = j < hi
    offs_h = tl.arange(0, HALF)
    if USE_DESC and not MASKED:
        # slot row of the block's first key; int32 (the provider checks pages x PAGE < 2**31)
        r = pg.to(tl.int32) * PAGE + start % PAGE
        kc0 = kc_desc.load([r, 0])  # [BLOCK_N, HALF]
        kc1 = kc_desc.load([r, HALF])
        kr = kr_desc.load([r, 0])  # [BLOCK_N, D_R]
    else:
        # the masked tail takes pointer loads under USE_DESC too: zeroing a descriptor tile (a page's unwritten
        # tail may hold NaN) takes it through registers, which spilled 364 B at 64 heads x 64 keys (AOT, sm90)
        # affine addresses inside the one page: one 64-bit base, int32 row offsets
        row = KV + pg * stride_kp + (start % PAGE + tl.arange(0, BLOCK_N)) * stride_ks
        if MASKED:
            kc0 = tl.load(row[:, None] + offs_h[None, :], mask=j_ok[:, None], other=0.0)
            kc1 = tl.load(row[:, None] + HALF + offs_h[None, :], mask=j_ok[:, None], other=0.0)
            kr = tl.load(row[:, None] + D_C + tl.arange(0, D_R)[None, :], mask=j_ok[:, None], other=0.0)
        else:
            kc0 = tl.load(row[:, None] + offs_h[None, :])
            kc1 = tl.load(row[:, None] + HALF + offs_h[None, :])
            kr = tl.load(row[:, None] + D_C + tl.arange(0, D_R)[None, :])
    # the scores over the latent as two products (each key half is both a K and a V operand), then the RoPE part
    if FP32_DOT:
        kc0 = kc0.to(tl.float32)
        kc1 = kc1.to(tl.float32)
        s = tl.dot(q_c0, tl.trans(kc0), input_precision="ieee")
        s += tl.dot(q_c1, tl.trans(kc1), input_precision="ieee")
        s += tl.dot(q_r, tl.trans(kr.to(tl.float32)), input_precision="ieee")
    else:
        # (an FP8 latent tile is converted once and serves as both the K and the V operand: FP8_CVT)
        kc0 = _mma_kv(kc0, q_c0.dtype, FP8_CVT)
        kc1 = _mma_kv(kc1, q_c0.dtype, FP8_CVT)
        s = tl.dot(q_c0, tl.trans(kc0))
        s += tl.dot(q_c1, tl.trans(kc1))
        s += tl.dot(q_r, tl.trans(_mma_kv(kr, q_r.dtype, FP8_CVT)))
    s = s * qk_scale
    if MASKED:
        ok = r_ok[:, None] & j_ok[None, :] & (j[None, :] <= pos[:, None])
        s = tl.where(ok, s, float("-inf"))
    m_new, alpha, p, l_i = _softmax_fold(s, m_i, l_i, pg_bad)
    if FP32_DOT:
        acc0 = acc0 * alpha[:, None] + tl.dot(p, kc0, input_precision="ieee")
        acc1 = acc1 * alpha[:, None] + tl.dot(p, kc1, input_precision="ieee")
    else:
        pb = p.to(kc0.dtype)
        acc0 = acc0 * alpha[:, None] + tl.dot(pb, kc0)
        acc1 = acc1 * alpha[:, None] + tl.dot(pb, kc1)
    return m_new, l_i, acc0, acc1


@triton.jit
def _opaque(x):
    """x unchanged through an identity the compiler cannot see into (CUDA PTX): a product summed through it does
    not become another product's accumulator, so it is no "chained dot" to Triton's warp layout rule."""
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _mla_scores(q_c0, q_c1, q_r, kc_desc, kr_desc, KV, pt_row, ERR, b, start, stride_kp, stride_ks, n_pages,
                PAGE: tl.constexpr, D_C: tl.constexpr, D_R: tl.constexpr, BLOCK_N: tl.constexpr,
                FP32_DOT: tl.constexpr, USE_DESC: tl.constexpr):  # fmt: skip
    """The raw scores of key block [start, start + BLOCK_N), inside one page, as three products [BLOCK_H, BLOCK_N]
    fp32 (two latent halves, RoPE; unscaled, unmasked; ``_sum_scores`` adds them), and whether its page id was bad
    (flagged; page 0 read instead). Keys past the sequence end are read as they are (finite or not): the caller's
    mask selects them away. None of the products feeds another, so with the scores used only in the next iteration
    (_mla_page_kernel's AHEAD loop) Triton splits their keys over the warpgroups instead of having each compute all
    of them, and their wgmma can run while the current block's softmax does (the sum is taken at the end)."""
    HALF: tl.constexpr = D_C // 2
    pg = tl.load(pt_row + start // PAGE).to(tl.int64)
    pg_bad = (pg < 0) | (pg >= n_pages)
    if pg_bad:
        _flag(ERR, 2, b, pg)
    pg = tl.where(pg_bad, 0, pg)
    if USE_DESC:
        r = pg.to(tl.int32) * PAGE + start % PAGE
        kc0 = kc_desc.load([r, 0])
        kc1 = kc_desc.load([r, HALF])
        kr = kr_desc.load([r, 0])
    else:
        row = KV + pg * stride_kp + (start % PAGE + tl.arange(0, BLOCK_N)) * stride_ks
        kc0 = tl.load(row[:, None] + tl.arange(0, HALF)[None, :])
        kc1 = tl.load(row[:, None] + HALF + tl.arange(0, HALF)[None, :])
        kr = tl.load(row[:, None] + D_C + tl.arange(0, D_R)[None, :])
    if FP32_DOT:  # the interpreter (no inline PTX; no warp layouts either)
        s0 = tl.dot(q_c0, tl.trans(kc0.to(tl.float32)), input_precision="ieee")
        s1 = tl.dot(q_c1, tl.trans(kc1.to(tl.float32)), input_precision="ieee")
        s2 = tl.dot(q_r, tl.trans(kr.to(tl.float32)), input_precision="ieee")
    else:
        s0 = tl.dot(q_c0, tl.trans(kc0.to(q_c0.dtype)))
        s1 = tl.dot(q_c1, tl.trans(kc1.to(q_c0.dtype)))
        s2 = tl.dot(q_r, tl.trans(kr.to(q_r.dtype)))
    return s0, s1, s2, pg_bad


@triton.jit
def _sum_scores(s0, s1, s2, FP32_DOT: tl.constexpr):
    """The three score products summed; on 16-bit dots through ``_opaque``, so that none is another's
    accumulator (the chained-dot rule) and the wait for their wgmma lands where the sum is taken."""
    if FP32_DOT:
        return s0 + s1 + s2
    return _opaque(s0) + _opaque(s1) + _opaque(s2)


# the same arguments as _mla_attn_kernel (one launch path), plus USE_DESC and AHEAD
@triton.jit(do_not_specialize=["kv_rows", "pt_cols", "total_q", "stride_ptb"])
def _mla_page_kernel(
    Q,
    KV,
    PT,
    SEQ,
    CUQ,
    KDS,
    O,
    LSE,
    OP,
    LP,
    ERR,
    stride_qt,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_ot,
    stride_oh,
    stride_ptb,
    total_q,
    num_q_heads,
    scale,
    kv_rows,
    pt_cols,
    PAGE: tl.constexpr,
    D_C: tl.constexpr,
    D_R: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HAS_DESCALE: tl.constexpr,
    WRITE_LSE: tl.constexpr,
    FP32_DOT: tl.constexpr,
    FP8_CVT: tl.constexpr,
    USE_DESC: tl.constexpr,
    AHEAD: tl.constexpr,
):
    """Absorbed MLA by page blocks (issue #49; tuning.MLA_KERNEL_FORM "page" / "tma" / "ahead"): _mla_attn_kernel's
    contract (rows, causal alignment, split-K partials, LSE, bounds), fused latent only, key blocks inside one
    page (PAGE % BLOCK_N == 0, checked by the provider).

    What differs from _mla_attn_kernel, each aimed at the register spill of the 64-head tile on sm90
    (docs/mla-kernel.md): one page id per key block and affine addresses inside it (no per-key page ids and
    64-bit row pointers), or with USE_DESC the K/V tile by tensor descriptor (TMA: no address registers at
    all); the 512-wide value accumulator as two D_C / 2 halves (two products, as FlashMLA splits it over two
    warpgroups); and the key loop split into blocks every row fully sees (no mask, no select) and the masked
    tail (the block holding ``hi`` and, for extend rows, the causal diagonal).

    AHEAD ("ahead" form): the scores of key block i + 1 are made in iteration i and folded in iteration i + 1
    (_mla_scores). No product then consumes the scores in the iteration that makes them, so Triton gives that
    product warpsPerCTA [4, 2] (each warpgroup half the keys) instead of the chained-dot [8, 1], under which both
    warpgroups of a 64-head tile compute all of QK^T: QK^T is computed once (as FlashMLA does), and its wgmma of
    block i + 1 may overlap block i's softmax. The price: block i's values are loaded again in iteration i
    (masked pointer loads; L2/L1 hits: the block was read one iteration earlier for its scores).

    Q [total_q, H, D_C + D_R] (16-bit or fp32); KV [pages, PAGE, 1, D_C + D_R] (16-bit, fp32 or FP8 with the
    per-tensor descale KDS); O [total_q, H, D_C]; LSE [H, total_q] fp32 (WRITE_LSE); OP / LP the split-K
    partials ([NUM_SPLITS, total_q x H, D_C] / [NUM_SPLITS, total_q x H] fp32) that _merge_splits reads."""
    tl.static_assert(BLOCK_DC == D_C and BLOCK_DV == D_C, "_mla_page_kernel: fused latent only")
    tl.static_assert(PAGE % BLOCK_N == 0, "_mla_page_kernel: key blocks inside one page")
    tl.static_assert((not AHEAD) or (FP8_CVT == 0), "_mla_page_kernel: the ahead form takes FP8 by cast")
    HALF: tl.constexpr = D_C // 2
    b = tl.program_id(0)
    tile = tl.program_id(1)
    split = tl.program_id(2)
    q_start, q_end, k_len, seq_bad = _checked_lengths(
        ERR, CUQ, SEQ, b, total_q, pt_cols * PAGE, (tile == 0) & (split == 0)
    )
    q_len = q_end - q_start
    if tile * BLOCK_H >= q_len * num_q_heads:  # past this sequence's rows (or a padded request)
        return
    t, heads, r_ok, pos = _mla_rows(tile, q_len, k_len, num_q_heads, BLOCK_H)
    offs_h = tl.arange(0, HALF)
    q_rows = (q_start + t).to(tl.int64)
    q_row = Q + q_rows[:, None] * stride_qt + heads[:, None].to(tl.int64) * stride_qh
    q_c0 = tl.load(q_row + offs_h[None, :], mask=r_ok[:, None], other=0.0)
    q_c1 = tl.load(q_row + HALF + offs_h[None, :], mask=r_ok[:, None], other=0.0)
    q_r = tl.load(q_row + D_C + tl.arange(0, D_R)[None, :], mask=r_ok[:, None], other=0.0)
    if FP32_DOT:
        q_c0 = q_c0.to(tl.float32)
        q_c1 = q_c1.to(tl.float32)
        q_r = q_r.to(tl.float32)
    q_c0 = _mma_q(q_c0, FP8_CVT)
    q_c1 = _mma_q(q_c1, FP8_CVT)
    q_r = _mma_q(q_r, FP8_CVT)
    qk_scale = _mma_scale(scale, Q, FP8_CVT) * LOG2E
    kv_scale = 1.0
    if HAS_DESCALE:
        kv_scale = tl.load(KDS).to(tl.float32)
        qk_scale = qk_scale * kv_scale
    kc_desc = KV  # unused without descriptors (a name for the helper's argument)
    kr_desc = KV
    if USE_DESC:
        # the cache as [slots, D_C + D_R] rows; the latent halves and the RoPE part as boxes of <= 256 columns
        kc_desc = _slot_rows(KV, kv_rows, D_C, stride_ks, BLOCK_N, HALF)
        kr_desc = _slot_rows(KV + D_C, kv_rows, D_R, stride_ks, BLOCK_N, D_R)

    first = tile * BLOCK_H // num_q_heads  # the tile's first query token: the lowest causal position
    lo, hi = _mla_key_range(split, tile, q_len, k_len, num_q_heads, BLOCK_H, BLOCK_N, NUM_SPLITS)
    # keys every row sees: below hi and at or before the first row's position; whole blocks of them unmasked
    seen = tl.minimum(hi, k_len - q_len + first + 1)
    mid = tl.maximum(lo, lo + (seen - lo) // BLOCK_N * BLOCK_N)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32) + tl.where(seq_bad, float("nan"), 0.0)
    acc0 = tl.zeros([BLOCK_H, HALF], tl.float32)
    acc1 = tl.zeros([BLOCK_H, HALF], tl.float32)
    pt_row = PT + b.to(tl.int64) * stride_ptb
    n_pages = kv_rows // PAGE
    if AHEAD:
        # iteration `start` makes the scores of block start + BLOCK_N (the last block's again in the last
        # iteration, unused) and folds block `start`; the first iteration folds an empty block before lo, so
        # there is no prologue product (its shared-memory tiles would stay allocated: 254 KB, over the 227 KB)
        last_blk = lo + tl.maximum(hi - lo - 1, 0) // BLOCK_N * BLOCK_N
        end = tl.where(hi > lo, hi, lo - BLOCK_N)  # no key: no iteration (no page id read past the table)
        s_cur = tl.zeros([BLOCK_H, BLOCK_N], tl.float32)
        bad_cur = False
        offs_n = tl.arange(0, BLOCK_N)
        for start in range(lo - BLOCK_N, end, BLOCK_N):
            s0, s1, s2, bad_next = _mla_scores(
                q_c0, q_c1, q_r, kc_desc, kr_desc, KV, pt_row, ERR, b, tl.minimum(start + BLOCK_N, last_blk),
                stride_kp, stride_ks, n_pages, PAGE, D_C, D_R, BLOCK_N, FP32_DOT, USE_DESC,
            )  # fmt: skip
            j = start + offs_n
            j_ok = (j >= lo) & (j < hi)
            ok = r_ok[:, None] & j_ok[None, :] & (j[None, :] <= pos[:, None])
            m_i_new, alpha, p, l_i = _softmax_fold(tl.where(ok, s_cur * qk_scale, float("-inf")), m_i, l_i, bad_cur)
            at = tl.maximum(start, 0)  # the empty first block reads nothing (masked) from a valid page
            pg = tl.load(pt_row + at // PAGE).to(tl.int64)
            pg = tl.where((pg < 0) | (pg >= n_pages), 0, pg)  # flagged when its scores were made
            row = KV + pg * stride_kp + (at % PAGE + offs_n) * stride_ks
            v0 = tl.load(row[:, None] + offs_h[None, :], mask=j_ok[:, None], other=0.0)
            v1 = tl.load(row[:, None] + HALF + offs_h[None, :], mask=j_ok[:, None], other=0.0)
            if FP32_DOT:
                acc0 = acc0 * alpha[:, None] + tl.dot(p, v0.to(tl.float32), input_precision="ieee")
                acc1 = acc1 * alpha[:, None] + tl.dot(p, v1.to(tl.float32), input_precision="ieee")
            else:
                pb = p.to(q_c0.dtype)
                acc0 = acc0 * alpha[:, None] + tl.dot(pb, v0.to(q_c0.dtype))
                acc1 = acc1 * alpha[:, None] + tl.dot(pb, v1.to(q_c0.dtype))
            m_i, s_cur, bad_cur = m_i_new, _sum_scores(s0, s1, s2, FP32_DOT), bad_next
    else:
        for start in range(lo, mid, BLOCK_N):
            m_i, l_i, acc0, acc1 = _mla_page_block(
                q_c0, q_c1, q_r, kc_desc, kr_desc, KV, pt_row, ERR, b, start, hi, pos, r_ok, m_i, l_i, acc0, acc1,
                stride_kp, stride_ks, qk_scale, n_pages, PAGE, D_C, D_R, BLOCK_N, FP32_DOT, FP8_CVT, USE_DESC, False,
            )  # fmt: skip
        for start in range(mid, hi, BLOCK_N):
            m_i, l_i, acc0, acc1 = _mla_page_block(
                q_c0, q_c1, q_r, kc_desc, kr_desc, KV, pt_row, ERR, b, start, hi, pos, r_ok, m_i, l_i, acc0, acc1,
                stride_kp, stride_ks, qk_scale, n_pages, PAGE, D_C, D_R, BLOCK_N, FP32_DOT, FP8_CVT, USE_DESC, True,
            )  # fmt: skip

    empty = l_i == 0  # no key: out 0, LSE -inf; NaN (bad input) stays NaN
    inv = kv_scale / tl.where(empty, 1.0, l_i)
    o0 = acc0 * inv[:, None]
    o1 = acc1 * inv[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.log2(tl.where(empty, 1.0, l_i))) * LN2)
    if NUM_SPLITS == 1:
        o_row = O + q_rows[:, None] * stride_ot + heads[:, None].to(tl.int64) * stride_oh
        tl.store(o_row + offs_h[None, :], o0.to(O.dtype.element_ty), mask=r_ok[:, None])
        tl.store(o_row + HALF + offs_h[None, :], o1.to(O.dtype.element_ty), mask=r_ok[:, None])
        if WRITE_LSE:
            tl.store(LSE + heads.to(tl.int64) * total_q + q_rows, lse, mask=r_ok)
    else:
        idx = split.to(tl.int64) * total_q * num_q_heads + q_rows * num_q_heads + heads
        tl.store(OP + idx[:, None] * D_C + offs_h[None, :], o0, mask=r_ok[:, None])
        tl.store(OP + idx[:, None] * D_C + HALF + offs_h[None, :], o1, mask=r_ok[:, None])
        tl.store(LP + idx, lse, mask=r_ok)
