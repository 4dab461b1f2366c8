"""The Triton provider against the reference on small random layouts.

On the CPU this runs every Triton kernel through Triton's interpreter (TRITON_INTERPRET=1,
set here before triton is imported); on a GPU (tests/gpu) the same checks run at real sizes.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from layouts import assert_close_to, assert_lse_close, layouts  # noqa: E402

from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402

pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
TRITON = get_provider("triton")
REF = get_provider("reference")
DEV = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
N = int(os.environ.get("VXA_TRITON_EXAMPLES", "120"))


def _close(out, ref_out, dtype):
    assert_close_to(out.float().cpu(), ref_out.double().cpu(), dtype)


@settings(max_examples=N)
@given(
    layout=layouts(max_ctx=70, max_new=6, max_batch=3, page_sizes=(1, 16, 64)),
    want_lse=st.booleans(),
    splits=st.sampled_from([None, 1, 2, 4]),
)
def test_triton_matches_reference(layout, want_lse, splits):
    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    # num_splits > 1 only applies to decode-only batches (max_seqlen_q <= 1): forced here to test the merge
    ns = splits if lay.max_seqlen_q <= 1 else None
    res = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=want_lse, num_splits=ns)
    out = res[0] if want_lse else res
    _close(out, ref[0], lay.q.dtype)
    if want_lse:
        assert_lse_close(res[1].cpu(), ref[1].double().cpu(), tol=2e-3)


@settings(max_examples=max(N // 6, 10))
@given(
    layout=layouts(
        max_ctx=70,
        max_new=6,
        max_batch=3,
        page_sizes=(1, 16, 64),
        dtypes=[torch.bfloat16],
        always_fp8=True,
        head_dims=(16, 32, 64),
    ),
    splits=st.sampled_from([None, 1, 2]),
)
def test_bf16_queries_on_fp8_caches_match_reference(layout, splits):
    """bf16 queries over e4m3/e5m2 caches (the pairing FP8 KV serving runs), with per-tensor and per-head descales,
    every feature, split-K, against the reference on the same FP8 cache."""
    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    ns = splits if lay.max_seqlen_q <= 1 else None
    out, lse = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True, num_splits=ns)
    _close(out, ref[0], lay.q.dtype)
    assert_lse_close(lse.cpu(), ref[1].double().cpu(), tol=2e-3)


@settings(max_examples=max(N // 6, 10))
@given(
    layout=layouts(
        max_ctx=70,
        max_new=6,
        max_batch=3,
        page_sizes=(1, 16, 64),
        dtypes=[torch.bfloat16, torch.float16],
        always_fp8=True,
        head_dims=(16, 32, 64),
    ),
    splits=st.sampled_from([None, 1, 2]),
)
def test_fp8_caches_on_fp16_products_match_reference(layout, splits):
    """FP8 caches with the products in fp16 (tuning.FP8_OPERANDS "f16" here; cuda_sm90 ships "ptx", the same
    products with the conversion in PTX, which the interpreter cannot run): bf16 queries enter as q x 2^-8 and
    the scores' scale takes the 2^8 back. Every feature, split-K, descales, against the reference on the same
    FP8 cache; the launches took the fp16 form wherever the layer can (not ALiBi in the interpreter)."""
    from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
    from vllm_xpu_attn.kernels.providers.triton.tuning import FP8_OPERANDS

    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    ns = splits if lay.max_seqlen_q <= 1 else None
    fam = device_family(torch.device(DEV))
    saved = FP8_OPERANDS.get(fam)
    if DEV == "cpu":
        FP8_OPERANDS[fam] = {"paged": "f16"}
    TRITON.clear_caches()
    try:
        out, lse = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True, num_splits=ns)
        forms = {v["FP8_CVT"] for v in TRITON.launched_variants("_paged_attn_kernel")}
    finally:
        if saved is None:
            FP8_OPERANDS.pop(fam, None)
        else:
            FP8_OPERANDS[fam] = saved
        TRITON.clear_caches()
    _close(out, ref[0], lay.q.dtype)
    assert_lse_close(lse.cpu(), ref[1].double().cpu(), tol=2e-3)
    if forms and lay.kwargs.get("alibi_slopes") is None:
        want = 1 if DEV == "cpu" else ("cast", "f16", "ptx").index(FP8_OPERANDS.get(fam, {}).get("paged", "cast"))
        assert forms == {want}, forms


@settings(max_examples=max(N // 4, 5))
@given(layout=layouts(max_ctx=40, max_new=6, max_batch=3, page_sizes=(1,), allow_fp8=False, dtypes=[torch.float32]))
def test_triton_varlen_and_merge(layout):
    lay = layout.to(DEV)
    lens = lay.cache_seqlens.tolist()
    if not lens:
        return
    idx = torch.cat([lay.page_table[b, :n].long() for b, n in enumerate(lens)])
    k, v = lay.k_cache[idx, 0], lay.v_cache[idx, 0]
    cu_k = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    kw = {a: b for a, b in lay.kwargs.items() if a not in ("k_descale", "v_descale")}
    o1, l1 = TRITON.flash_attn_varlen_func(
        lay.q, k, v, lay.cu_seqlens_q, cu_k, lay.max_seqlen_q, max(lens), **kw, return_softmax_lse=True
    )
    r1, rl1 = REF.flash_attn_varlen_func(
        lay.q, k, v, lay.cu_seqlens_q, cu_k, lay.max_seqlen_q, max(lens), **kw, return_softmax_lse=True
    )
    _close(o1, r1, torch.float32)
    # merge_state of two halves of random partial states
    o2 = torch.randn_like(o1)
    l2 = torch.randn_like(l1)
    l1c = l1.clone()
    if l1c.numel():
        l1c[:, 0] = float("-inf")  # a row with nothing on one side
    mt = TRITON.merge_state(o1, l1c, o2, l2)
    mr = REF.merge_state(o1, l1c, o2, l2)
    _close(mt[0], mr[0].double(), torch.float32)
    assert_lse_close(mt[1].cpu(), mr[1].double().cpu())
    sinks = torch.randn(o1.shape[1], device=DEV) * 2  # a cascade of sink layers: the sink joins once
    mt = TRITON.merge_state(o1, l1c, o2, l2, sinks=sinks)
    mr = REF.merge_state(o1, l1c, o2, l2, sinks=sinks)
    _close(mt[0], mr[0].double(), torch.float32)
    assert_lse_close(mt[1].cpu(), mr[1].double().cpu())


@pytest.mark.parametrize("fp8", [None, torch.float8_e4m3fn, torch.float8_e5m2])
def test_triton_write_kv(fp8):
    if fp8 is not None and DEV == "cpu":
        pytest.skip(
            "Triton's CPU interpreter rounds float->FP8 casts differently from hardware; "
            "FP8 writes are byte-checked on the GPU run (docs/validation.md)"
        )
    g = torch.Generator().manual_seed(0)
    dt = fp8 or torch.float16
    kc = torch.zeros(3, 4, 2, 8, dtype=dt, device=DEV)
    vc = torch.zeros_like(kc)
    kr, vr = kc.clone(), vc.clone()
    k = (torch.randn(5, 2, 8, generator=g) * 3).to(torch.float16).to(DEV)
    v = (torch.randn(5, 2, 8, generator=g) * 3).to(torch.float16).to(DEV)
    slots = torch.tensor([0, 5, -1, 11, 7], device=DEV)
    scale = torch.tensor([0.5], device=DEV) if fp8 else None
    TRITON.write_kv(k if fp8 else k, v, kc, vc, slots, scale, scale)
    REF.write_kv(k, v, kr, vr, slots, scale, scale)
    assert torch.equal(kc.view(torch.uint8), kr.view(torch.uint8)) and torch.equal(
        vc.view(torch.uint8), vr.view(torch.uint8)
    )


@pytest.mark.parametrize(
    "window,group", [((-1, -1), 1), ((-1, -1), 4), ((5, 0), 2), ((20, 0), 1), ((3, 3), 2), ((20, 20), 2)]
)
def test_every_block_alignment_of_the_mask_edges(window, group):
    """Query and key lengths swept across block boundaries (BLOCK_N = 16 here), causal, one- and
    two-sided windows, GQA: the key range a tile walks and the masks at its edges must be exact
    for every alignment, whatever the random layouts happen to draw."""
    g = torch.Generator().manual_seed(group)
    page, hkv, d = 16, 1, 16
    pairs = [(q, k) for q in (1, 3, 7, 16, 17, 23) for k in range(q, q + 35, 3)]
    causal = window[1] == 0 or window == (-1, -1)
    if not causal:  # two-sided windows: non-causal self-attention, queries = keys
        pairs = [(n, n) for n in range(1, 75, 3)]
    pages_per = -(-max(k for _, k in pairs) // page)
    kc = torch.randn(len(pairs) * pages_per + 1, page, hkv, d, generator=g)
    vc = torch.randn_like(kc)
    pt = (torch.randperm(kc.shape[0] - 1, generator=g) + 1)[: len(pairs) * pages_per].view(len(pairs), -1).int()
    q_lens = torch.tensor([q for q, _ in pairs])
    cu = torch.nn.functional.pad(q_lens.cumsum(0), (1, 0)).int()
    seq = torch.tensor([k for _, k in pairs], dtype=torch.int32)
    q = torch.randn(int(cu[-1]), hkv * group, d, generator=g) * 2
    args = (q.to(DEV), kc.to(DEV), vc.to(DEV), pt.to(DEV), seq.to(DEV), cu.to(DEV), int(q_lens.max()))
    kw = dict(causal=causal, window_size=window)
    _close(TRITON.flash_attn_with_kvcache(*args, **kw), REF.flash_attn_with_kvcache(*args, **kw), torch.float32)


def test_steps_of_one_shape_share_a_configuration_but_not_their_tables():
    """arm_paged keeps one LaunchConfig per step shape across steps (tiles, split count, armed launchers)
    while each step's launch reads its own page table, lengths and cu_seqlens: two live plans of one
    shape, layers interleaved, each matches the reference; another shape gets another configuration."""
    from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep

    g = torch.Generator().manual_seed(3)
    hq, hkv, d, ps, bs, per = 4, 2, 32, 16, 2, 4
    n_pages = bs * per + 3
    kc, vc = (torch.randn(n_pages, ps, hkv, d, generator=g) for _ in range(2))
    call = LayerConsts.make(hq, hkv, d, softmax_scale=0.3)

    def step(width=per):
        table = torch.randperm(n_pages, generator=g)[: bs * width].view(bs, width).int()
        lens = torch.randint(1, width * ps + 1, (bs,), generator=g).int()
        return PagedStep(torch.arange(bs + 1, dtype=torch.int32), lens, table, 1, width * ps, ps)

    a, b = step(), step()
    la, lb = TRITON.arm_paged(a, call), TRITON.arm_paged(b, call)
    assert la.cfg is lb.cfg and la.step is a and lb.step is b
    assert TRITON.arm_paged(step(per + 1), call).cfg is not la.cfg
    for _ in range(2):  # layers alternate between the two live plans
        for st_, launch in ((a, la), (b, lb)):
            q = torch.randn(bs, hq, d, generator=g)
            out = torch.full((bs, hq, d), float("nan"))
            launch.run(q, kc, vc, out)
            want = REF.flash_attn_with_kvcache(
                q, kc, vc, st_.page_table, st_.cache_seqlens, st_.cu_seqlens_q, 1, softmax_scale=0.3
            )
            _close(out, want, torch.float32)
    bad = step()
    bad.page_table = bad.page_table.t().contiguous().t()  # a column-major table: the kernel needs unit column stride
    with pytest.raises(ValueError, match="contiguous last dimension"):
        TRITON.arm_paged(bad, call)


@pytest.mark.parametrize("page, with_rows", [(16, True), (16, False), (1, True), (12, True)])
def test_token_pages_kernel_equals_the_torch_conversion(page, with_rows):
    """The one-launch token->page conversion (kernels/providers/triton/paging.py, used for CUDA/XPU tables) gives
    the integers core.paging's torch ops give: pool rows picked by token_rows, strided first slots, // page."""
    from vllm_xpu_attn.core import paging
    from vllm_xpu_attn.kernels.providers.triton.kernels import _token_pages_kernel

    g = torch.Generator().manual_seed(page)
    pool_rows, ctx = 7, 600
    pool = (
        torch.randperm(pool_rows * ctx // page + 5, generator=g)[: pool_rows * (ctx // page)]
        .view(pool_rows, -1)
        .repeat_interleave(page, dim=1)
        * page
        + torch.arange(page).repeat(ctx // page)
    ).int()
    idx = torch.tensor([5, 0, 3]) if with_rows else None
    max_k = 517
    n_pages = -(-max_k // page)
    want = paging.token_table_to_page_table(pool, page, max_k, row_index=idx)
    out = torch.full((3 if with_rows else pool_rows, n_pages), -1, dtype=torch.int32)
    err = torch.zeros(16, dtype=torch.int32)
    _token_pages_kernel[(out.shape[0],)](
        pool,
        idx if with_rows else pool,
        out,
        err,
        pool.stride(0),
        n_pages,
        pool.shape[0],
        PAGE=page,
        HAS_ROWS=with_rows,
        BLOCK=64,
    )
    assert not err.any()
    assert torch.equal(out, want)


@settings(max_examples=max(N // 3, 8), deadline=None)
@given(layout=layouts(max_ctx=90, max_new=24, max_batch=3, page_sizes=(16, 32, 64), head_dims=(16, 32)))
def test_tensor_descriptor_prefill_matches_reference(layout):
    """The prefill path that reads K/V tiles by tensor descriptor (TMA on Hopper; chosen by device there),
    forced on in the interpreter: same outputs as the reference, and the descriptor kernel is what ran
    wherever the step and the layer's cache allow it (else the pointer kernel of the same tiles)."""
    from vllm_xpu_attn.kernels.providers.triton import provider as tp
    from vllm_xpu_attn.kernels.providers.triton.descriptors import DESC_DTYPES, desc_layer_ok

    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    old = tp.TritonProvider.tensor_descriptors
    tp.TritonProvider.tensor_descriptors = True
    TRITON.clear_caches()
    try:
        out = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs)
        used = [v.get("USE_DESC") for v in TRITON.launched_variants("_paged_attn_kernel")]
    finally:
        tp.TritonProvider.tensor_descriptors = old
        TRITON.clear_caches()
    _close(out, ref[0], lay.q.dtype)
    if lay.max_seqlen_q > 1 and lay.q.shape[0] and lay.page_table.shape[0]:
        expect = lay.q.dtype in DESC_DTYPES and desc_layer_ok(lay.k_cache, lay.v_cache, lay.k_cache.shape[1])
        assert used and all(u == expect for u in used), (used, expect)


@pytest.mark.parametrize("table_dtype", [torch.int32, torch.int64])
def test_tensor_descriptor_prefill_ignores_unwritten_slots(table_dtype):
    """The descriptor path reads whole key blocks, so a page's unwritten tail (slots at or past the length)
    is loaded too: NaN there must not reach the output (0 x NaN). int64 page tables (the contract allows
    them) must index descriptor rows like int32 ones."""
    from vllm_xpu_attn.kernels.providers.triton import provider as tp

    g = torch.Generator().manual_seed(3)
    hkv, group, d, page = 2, 2, 16, 16
    q_lens, k_lens = [5, 20, 9], [37, 20, 16]
    pages = [(k + page - 1) // page for k in k_lens]
    n_pages = sum(pages) + 2
    kc = torch.randn(n_pages, page, hkv, d, generator=g).bfloat16()  # descriptors: bf16/fp16 only
    vc = torch.randn(n_pages, page, hkv, d, generator=g).bfloat16()
    perm = torch.randperm(n_pages, generator=g)
    table = torch.zeros(len(k_lens), max(pages), dtype=table_dtype)
    used = 0
    for b, (n, k) in enumerate(zip(pages, k_lens)):
        table[b, :n] = perm[used : used + n]
        used += n
        last, fill = int(table[b, n - 1]), k - (n - 1) * page
        kc[last, fill:] = float("nan")  # the unwritten tail of the sequence's last page
        vc[last, fill:] = float("nan")
    q = torch.randn(sum(q_lens), hkv * group, d, generator=g).bfloat16()
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    seq = torch.tensor(k_lens, dtype=torch.int32)
    args = (q, kc, vc, table, seq, cu, max(q_lens))
    want = REF.flash_attn_with_kvcache(*args)
    old = tp.TritonProvider.tensor_descriptors
    tp.TritonProvider.tensor_descriptors = True
    TRITON.clear_caches()
    try:
        out = TRITON.flash_attn_with_kvcache(*args)
        used_desc = [v.get("USE_DESC") for v in TRITON.launched_variants()]
    finally:
        tp.TritonProvider.tensor_descriptors = old
        TRITON.clear_caches()
    assert used_desc == [True]
    assert torch.isfinite(out.float()).all()
    _close(out, want, torch.bfloat16)


@settings(max_examples=max(N // 6, 6), deadline=None)
@given(
    layout=layouts(max_ctx=120, max_new=1, max_batch=4, page_sizes=(16, 32), head_dims=(16, 32), allow_fp8=True),
    splits=st.sampled_from([None, 2]),
)
def test_fp8_decode_takes_its_own_key_tile(layout, splits):
    """A device family with a "decode_fp8" tile (cuda_sm90) launches FP8-cache decode layers with that key tile and
    warp count (same grid, same split count); forced here onto the interpreter's family: results equal the
    reference, and the FP8 layers' launches used the FP8 tile while 16-bit ones kept the decode tile."""
    from vllm_xpu_attn.kernels.api import is_fp8
    from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
    from vllm_xpu_attn.kernels.providers.triton.tuning import TUNING

    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs)
    fam = device_family(torch.device(DEV))
    TUNING[fam]["decode_fp8"] = (16, 32, 1, 1)
    TRITON.clear_caches()
    try:
        out = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, num_splits=splits)
        tiles = {v["BLOCK_N"] for v in TRITON.launched_variants("_paged_attn_kernel")}
    finally:
        del TUNING[fam]["decode_fp8"]
        TRITON.clear_caches()
    _close(out, ref, lay.q.dtype)
    if lay.max_seqlen_q <= 1 and lay.q.shape[0] and tiles:
        want = 32 if is_fp8(lay.k_cache.dtype) else TUNING[fam]["decode"][1]
        assert tiles == {want}, (tiles, want)


@settings(max_examples=max(N // 4, 8), deadline=None)
@given(
    layout=layouts(max_ctx=70, max_new=6, max_batch=3, page_sizes=(1, 16), head_dims=(32, 64)),
    chunks=st.sampled_from([(16, 16), (0, 16), (16, 0)]),
    splits=st.sampled_from([None, 2]),
)
def test_head_dim_tiles_match_reference(layout, chunks, splits):
    """The head-dim register tiles Intel ships at D 256 (tuning.PAGED_D_TILES: scores summed over head-dim slices,
    output columns split over programs), forced on the interpreter's family at every phase and head dim: decode,
    prefill, split-K and every layer feature equal the reference, LSE included (one column program writes it)."""
    from vllm_xpu_attn.kernels.providers.triton import tiles, tuning

    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    fam = tiles.device_family(torch.device(DEV))
    forced = {f"{p}_d{d}": chunks for p in tuning.TUNING[fam] for d in (16, 32, 64, 128, 256)}
    saved = tuning.PAGED_D_TILES.get(fam)
    tuning.PAGED_D_TILES[fam] = forced
    TRITON.clear_caches()
    try:
        ns = splits if lay.max_seqlen_q <= 1 else None
        out, lse = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True, num_splits=ns)
        launched = {(v["CHUNK_D"], v["CHUNK_DV"], v["BLOCK_D"]) for v in TRITON.launched_variants("_paged_attn_kernel")}
    finally:
        if saved is None:
            del tuning.PAGED_D_TILES[fam]
        else:
            tuning.PAGED_D_TILES[fam] = saved
        TRITON.clear_caches()
    _close(out, ref[0], lay.q.dtype)
    assert_lse_close(lse.cpu(), ref[1].double().cpu(), tol=2e-3)
    # the forced tiles were the ones launched (0: the whole head dim)
    assert all((cd, cdv) == tuple(w or bd for w in chunks) for cd, cdv, bd in launched), (launched, chunks)


def test_alibi_bias_exact_at_long_range():
    """The causal ALiBi bias is an exact matrix product of split slopes and 8-bit key-distance digits
    (kernels._alibi_rows/_alibi_keys): keys 66,000 back (all three digits in use) with slopes small enough that
    they still weigh, fp32 decode against the reference."""
    gen = torch.Generator().manual_seed(3)
    k_len, page, hq, d, q_len = 66_000, 1024, 2, 16, 1
    n_pages = -(-k_len // page)
    kc = torch.randn(n_pages, page, 1, d, generator=gen)
    vc = torch.randn(n_pages, page, 1, d, generator=gen)
    pt = torch.randperm(n_pages, generator=gen).to(torch.int32)[None]
    q = torch.randn(q_len, hq, d, generator=gen)
    args = (q, kc, vc, pt, torch.tensor([k_len], dtype=torch.int32), torch.tensor([0, q_len], dtype=torch.int32), q_len)
    kw = dict(causal=True, alibi_slopes=torch.tensor([1.3e-4, 3.7e-5]), return_softmax_lse=True)
    out, lse = TRITON.flash_attn_with_kvcache(*args, **kw)
    ref, ref_lse = REF.flash_attn_with_kvcache(*args, **kw)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(lse, ref_lse, atol=2e-5, rtol=2e-5)
