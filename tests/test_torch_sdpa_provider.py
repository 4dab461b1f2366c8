"""The torch_sdpa CPU provider (torch's flash-attention CPU kernel over gathered pages) against the naive
oracle (tests/support/naive.py, fp64, shares no code with the package) on random layouts, and what it refuses."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import assert_close_to, assert_lse_close, layouts
from naive import naive_paged_attention

from vllm_xpu_attn.kernels.api import KernelRequest, Phase, get_provider, select_provider
from vllm_xpu_attn.kernels.providers import cpu_sdpa
from vllm_xpu_attn.kernels.providers.cpu_sdpa import bucket_decode_rows, chunk_decode_rows

SDPA = get_provider("torch_sdpa")


def _naive(layout, **over):
    return naive_paged_attention(*layout.args()[:6], **{**layout.naive_kwargs(), **over})


@settings(max_examples=300)
@given(layout=layouts(), want_lse=st.booleans(), use_out=st.booleans())
def test_torch_sdpa_matches_naive(layout, want_lse, use_out):
    """Every layout the layouts strategy makes (GQA, pages 1..128, fp32/fp16/bf16, FP8 KV + descales, windows,
    non-causal, softcap, sinks, ALiBi, empty and key-less sequences)."""
    kw = dict(layout.kwargs)
    out_buf = (
        torch.full((layout.q.shape[0], layout.q.shape[1], layout.v_cache.shape[-1]), float("nan"), dtype=layout.q.dtype)
        if use_out
        else None
    )
    res = SDPA.flash_attn_with_kvcache(*layout.args(), **kw, return_softmax_lse=want_lse, out=out_buf)
    out, lse = res if want_lse else (res, None)
    if use_out:
        assert out.data_ptr() == out_buf.data_ptr()
    assert out.dtype == layout.q.dtype and out.shape == layout.q.shape[:2] + (layout.v_cache.shape[-1],)
    ref_out, ref_lse = _naive(layout)
    assert_close_to(out, ref_out, layout.q.dtype, logit_bound=layout.logit_bound())
    if want_lse:
        assert lse.shape == (layout.q.shape[1], layout.q.shape[0]) and lse.dtype == torch.float32
        assert_lse_close(lse, ref_lse)


@settings(max_examples=40)
@given(
    layout=layouts(allow_fp8=False, dtypes=[torch.float32, torch.bfloat16], max_batch=6, max_ctx=200),
    dv=st.sampled_from([8, 24, 48]),
)
def test_torch_sdpa_v_head_dim_differs(layout, dv):
    """Dv != D (MLA-like layers): V zero-padded to a common width inside; vs the naive oracle."""
    g = torch.Generator().manual_seed(dv)
    v_cache = torch.randn(*layout.k_cache.shape[:3], dv, generator=g).to(layout.k_cache.dtype)
    args = list(layout.args())
    args[2] = v_cache
    out, lse = SDPA.flash_attn_with_kvcache(*args, **layout.kwargs, return_softmax_lse=True)
    assert out.shape[-1] == dv
    ref_out, ref_lse = naive_paged_attention(*args[:6], **layout.naive_kwargs())
    assert_close_to(out, ref_out, layout.q.dtype, logit_bound=layout.logit_bound())
    assert_lse_close(lse, ref_lse)


@settings(max_examples=40)
@given(layout=layouts(page_sizes=(1,), allow_fp8=False, dtypes=[torch.float32]))
def test_torch_sdpa_varlen_matches_naive(layout):
    """flash_attn_varlen_func on the same data laid out contiguously (page size 1 = one token a page)."""
    lens = layout.cache_seqlens.tolist()
    if not lens:
        return
    idx = torch.cat([layout.page_table[b, :n].long() for b, n in enumerate(lens)])
    k, v = layout.k_cache[idx, 0], layout.v_cache[idx, 0]
    cu_k = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    kw = {a: b for a, b in layout.kwargs.items() if a not in ("k_descale", "v_descale")}
    out, lse = SDPA.flash_attn_varlen_func(
        layout.q, k, v, layout.cu_seqlens_q, cu_k, layout.max_seqlen_q, max(lens), **kw, return_softmax_lse=True
    )
    ref_out, ref_lse = _naive(layout)
    assert_close_to(out, ref_out, torch.float32, logit_bound=layout.logit_bound())
    assert_lse_close(lse, ref_lse)


@settings(max_examples=30)
@given(
    layout=layouts(allow_fp8=False, dtypes=[torch.float32], allow_features=False, max_batch=8), layers=st.integers(2, 4)
)
def test_torch_sdpa_one_plan_many_layers(layout, layers):
    """One step planned once, run for several layers (different caches) through the per-layer path: each layer
    matches the oracle (the per-step grouping is shared, never a layer's data)."""
    from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep

    q, k_cache, v_cache, table, lens, cu, max_q = layout.args()
    step = PagedStep(cu, lens, table, max_q, table.shape[1] * k_cache.shape[1], k_cache.shape[1])
    call = LayerConsts.make(q.shape[1], k_cache.shape[2], q.shape[2])
    launch = SDPA.arm_paged(step, call)
    for i in range(layers):
        kc, vc = k_cache * (i + 1) * 0.5, v_cache - i
        out = torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1])
        launch.run(q, kc, vc, out)
        ref_out, _ = naive_paged_attention(q, kc, vc, table, lens, cu, causal=True)
        assert_close_to(out, ref_out, torch.float32)


def test_pages_strided_apart(monkeypatch):
    """K and V interleaved per page (kv[:, 0] / kv[:, 1]: each page's rows dense, pages strided apart) are read
    by page and offset; the result equals the dense cache's (decode rows by whole pages in both: a dense cache
    would gather them by rows, another lk)."""
    monkeypatch.setattr(cpu_sdpa, "decode_gathers_rows", lambda counts, page_keys: False)
    g = torch.Generator().manual_seed(3)
    kv = torch.randn(6, 2, 4, 2, 8, generator=g)
    q = torch.randn(3, 4, 8, generator=g)
    table = torch.tensor([[5, 1], [2, 0]], dtype=torch.int32)
    lens = torch.tensor([7, 3], dtype=torch.int32)
    cu = torch.tensor([0, 2, 3], dtype=torch.int32)
    kc, vc = kv[:, 0], kv[:, 1]
    assert not kc.is_contiguous()
    got = SDPA.flash_attn_with_kvcache(q, kc, vc, table, lens, cu, 2)
    want = SDPA.flash_attn_with_kvcache(q, kc.contiguous(), vc.contiguous(), table, lens, cu, 2)
    assert torch.equal(got, want)
    ref_out, _ = naive_paged_attention(q, kc, vc, table, lens, cu)
    assert_close_to(got, ref_out, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float8_e4m3fn])
@pytest.mark.parametrize("by_rows", [False, True])
def test_interleaved_k_v_rows(dtype, by_rows, monkeypatch):
    """vLLM's pages hold K | V per head ([P, page, H, 2D], the caches its two halves): gathered as one buffer, the
    same bits as separate dense caches, decode rows (by rows or whole pages) and a prefill row; vs the oracle."""
    monkeypatch.setattr(cpu_sdpa, "decode_gathers_rows", lambda counts, page_keys: by_rows)
    g = torch.Generator().manual_seed(5)
    page, hq, hkv, d = 16, 6, 2, 8
    kv = torch.randn(12, page, hkv, 2 * d, generator=g).to(dtype)
    kc, vc = kv[..., :d], kv[..., d:]
    assert cpu_sdpa._paired(kc, vc) is not None
    table = torch.randperm(12, generator=g)[:9].view(3, 3).int()
    lens = torch.tensor([40, 7, 33], dtype=torch.int32)
    cu = torch.tensor([0, 1, 2, 5], dtype=torch.int32)  # two decode rows, a 3-query extend
    q = torch.randn(5, hq, d, generator=g)
    got = SDPA.flash_attn_with_kvcache(q, kc, vc, table, lens, cu, 3)
    assert torch.equal(got, SDPA.flash_attn_with_kvcache(q, kc.contiguous(), vc.contiguous(), table, lens, cu, 3))
    assert_close_to(got, naive_paged_attention(q, kc, vc, table, lens, cu)[0], torch.float32)


@pytest.mark.parametrize("cache", ["paired", "dense", "pages_strided"])
@pytest.mark.parametrize("by_rows", [False, True])
@pytest.mark.parametrize("fold", [False, True])
def test_decode_views_of_strided_q_out_and_caches(cache, by_rows, fold, monkeypatch):
    """fp32 decode (the path with the fewest ops: each view the kernel gets is one as_strided of q, out or a cache)
    with an engine's strided tensors: q a slice of a fused QKV buffer, out rows of a wider buffer (its other columns
    must stay untouched), caches as vLLM's K | V halves, dense, or dense pages strided apart; one row over
    consecutive pages (a view of the cache, no gather), a run of four rows (gathered by rows or pages), and two
    decode rows after a 3-query extend row (the run starts at query row 3). The same bits as contiguous q / out
    over separate dense caches, and the fp64 oracle's result."""
    monkeypatch.setattr(cpu_sdpa, "decode_gathers_rows", lambda counts, page_keys: by_rows)
    monkeypatch.setattr(cpu_sdpa, "fold_heads", lambda n, hkv: fold)
    g = torch.Generator().manual_seed(7)
    page, hq, hkv, d, pages = 16, 6, 2, 8, 12
    if cache == "paired":
        kv = torch.randn(pages, page, hkv, 2 * d, generator=g)
        kc, vc = kv[..., :d], kv[..., d:]
    elif cache == "dense":
        kc, vc = torch.randn(pages, page, hkv, d, generator=g), torch.randn(pages, page, hkv, d, generator=g)
    else:
        kv = torch.randn(pages, 2, page, hkv, d, generator=g)
        kc, vc = kv[:, 0], kv[:, 1]
    lens = torch.tensor([29, 40, 7, 33], dtype=torch.int32)
    table = torch.tensor([[3, 4, 9], [8, 0, 2], [6, 1, 5], [10, 11, 7]], dtype=torch.int32)  # row 0: pages 3, 4
    qkv = torch.randn(5, (hq + 2 * hkv) * d, generator=g)
    q = qkv[:, : hq * d].view(5, hq, d)  # rows (hq + 2 hkv) * d apart, as vLLM's query
    wide = torch.full((5, hq + 1, d), float("nan"))
    out = wide[:, 1:]  # strided rows; column 0 must keep its NaN
    for cu in ([0, 1], [0, 1, 2, 3, 4], [0, 3, 4, 5]):  # one row (pages 3, 4) / rows 0..3 / extend + 2 rows
        n, t = len(cu) - 1, cu[-1]
        args = (table[:n], lens[:n], torch.tensor(cu, dtype=torch.int32), max(b - a for a, b in zip(cu, cu[1:])))
        SDPA.flash_attn_with_kvcache(q[:t], kc, vc, *args, out=out[:t])
        want = SDPA.flash_attn_with_kvcache(q[:t].contiguous(), kc.contiguous(), vc.contiguous(), *args)
        if not (cache == "pages_strided" and by_rows):  # there rows do not gather as memcpys: pages (other lk)
            assert torch.equal(out[:t], want)
        assert torch.isnan(wide[:, 0]).all()
        assert_close_to(out[:t], naive_paged_attention(q[:t], kc, vc, *args[:3])[0], torch.float32)


def test_bucket_decode_rows_bounds_padding():
    lens = [5, 300, 7, 290, 6, 1, 150]
    buckets = bucket_decode_rows(lens, slack=0)
    assert sorted(i for b in buckets for i in b) == list(range(len(lens)))
    for b in buckets:
        assert len(b) * max(lens[i] for i in b) <= 1.5 * sum(lens[i] for i in b) or len(b) == 1
    assert bucket_decode_rows(lens, slack=10**6) == [[1, 3, 6, 2, 4, 0, 5]]  # padding cheaper than calls
    assert bucket_decode_rows([10] * 8) == [list(range(8))]  # equal lengths: one call


def test_decode_gathers_rows_when_pages_are_mostly_padding():
    assert cpu_sdpa.decode_gathers_rows(torch.tensor([48] * 32), 128)  # short contexts on a page of 128
    assert cpu_sdpa.decode_gathers_rows(torch.tensor([30, 50, 70]), 128)
    assert not cpu_sdpa.decode_gathers_rows(torch.tensor([2048] * 8), 2048)  # whole pages, nothing to zero
    assert not cpu_sdpa.decode_gathers_rows(torch.tensor([500, 512]), 512)


def test_chunk_decode_rows_bounds_gathered_keys():
    reads = [300, 290, 150, 7, 6, 5, 1]
    runs = chunk_decode_rows([[0, 1, 2], [3, 4, 5, 6]], reads, max_keys=600)
    assert runs == [[0, 1], [2], [3, 4, 5, 6]]  # in order, each run within one bucket
    for r in runs:
        assert len(r) * reads[r[0]] <= 600 or len(r) == 1
    assert chunk_decode_rows([[0, 1]], [900, 800], max_keys=10) == [[0], [1]]  # one row at least


@settings(max_examples=80)
@given(
    layout=layouts(max_batch=8),
    max_bytes=st.sampled_from([1, 3000, 40000]),
    want_lse=st.booleans(),
    fold=st.booleans(),
    rows=st.booleans(),
)
def test_decode_runs_match_naive(layout, max_bytes, want_lse, fold, rows):
    """Decode buckets split into runs of at most ``max_bytes`` of gathered K+V (one row a run at 1 byte), query heads
    folded into query rows or not (whatever fold_heads would pick on this machine), keys gathered by rows or by
    whole pages (whatever decode_gathers_rows would pick), with every feature the layouts make (GQA, windows,
    ALiBi, sinks, FP8, softcap): vs the oracle."""
    old = cpu_sdpa.DECODE_CHUNK_BYTES, cpu_sdpa.fold_heads, cpu_sdpa.decode_gathers_rows
    cpu_sdpa.DECODE_CHUNK_BYTES, cpu_sdpa.fold_heads = max_bytes, lambda n, hkv: fold
    cpu_sdpa.decode_gathers_rows = lambda counts, page_keys: rows
    try:
        res = SDPA.flash_attn_with_kvcache(*layout.args(), **layout.kwargs, return_softmax_lse=want_lse)
    finally:
        cpu_sdpa.DECODE_CHUNK_BYTES, cpu_sdpa.fold_heads, cpu_sdpa.decode_gathers_rows = old
    out, lse = res if want_lse else (res, None)
    ref_out, ref_lse = _naive(layout)
    assert_close_to(out, ref_out, layout.q.dtype, logit_bound=layout.logit_bound())
    if want_lse:
        assert_lse_close(lse, ref_lse)


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_decode_never_folds_query_heads(kv_dtype):
    """FP8 caches keep the unfolded kernel call's bits even where fold_heads says fold: folding moves outputs by
    ~1e-6 (fp32 summation order), which in a model can flip a later K/V element sitting on an FP8 rounding tie
    (vLLM's FP8 test: one layer-1 key element rounded to -1.875 instead of -2.0, logprobs off by 6.5e-3). fp32
    caches do fold and their bits move (else this test would not see folding at all); both vs the oracle."""
    g = torch.Generator().manual_seed(7)
    page, hq, hkv, d, n = 16, 9, 3, 64, 8
    kc = (torch.randn(40, page, hkv, d, generator=g) * 2).to(kv_dtype)
    vc = (torch.randn(40, page, hkv, d, generator=g) * 2).to(kv_dtype)
    table = torch.randperm(40, generator=g)[: n * 4].view(n, 4).int()
    lens = torch.randint(1, 4 * page, (n,), generator=g).int()
    cu = torch.arange(n + 1, dtype=torch.int32)
    qkv = torch.randn(n, (hq + 2 * hkv) * d, generator=g)
    q = qkv[:, : hq * d].view(n, hq, d)  # strided, as an engine's fused QKV projection hands it
    kw = dict(k_descale=torch.tensor(0.37), v_descale=torch.tensor(1.9))

    def run(kc, vc, fold, **kw):
        old = cpu_sdpa.fold_heads
        cpu_sdpa.fold_heads = lambda n, hkv: fold
        try:
            return SDPA.flash_attn_with_kvcache(q, kc, vc, table, lens, cu, 1, **kw)
        finally:
            cpu_sdpa.fold_heads = old

    folded, unfolded = run(kc, vc, True, **kw), run(kc, vc, False, **kw)
    assert torch.equal(folded, unfolded)
    ref = naive_paged_attention(q, kc, vc, table, lens, cu, k_descale=kw["k_descale"], v_descale=kw["v_descale"])[0]
    assert_close_to(folded, ref, torch.float32)
    k32, v32 = kc.float() * 0.37, vc.float() * 1.9  # the same keys in an fp32 cache: folded, other bits
    f32 = run(k32, v32, True)
    assert not torch.equal(f32, run(k32, v32, False))
    assert_close_to(f32, ref, torch.float32)


@pytest.mark.parametrize("by_rows", [False, True])
@pytest.mark.parametrize("want_lse", [False, True])
@pytest.mark.parametrize("window", [(-1, -1), (20, 0)])
def test_unwritten_and_out_of_window_keys_are_never_read(want_lse, window, by_rows, monkeypatch):
    """Decode rows of different lengths share a bucket padded to its longest row (keys gathered by rows or by whole
    pages): the pages' unwritten tails and the keys left of a window hold NaN/Inf (an engine's reused pages may),
    and no output or LSE sees them."""
    monkeypatch.setattr(cpu_sdpa, "decode_gathers_rows", lambda counts, page_keys: by_rows)
    g = torch.Generator().manual_seed(4)
    page, hq, hkv, d = 16, 6, 2, 32
    lens = [37, 30, 45, 33]
    kc = torch.randn(16, page, hkv, d, generator=g)
    vc = torch.randn(16, page, hkv, d, generator=g)
    table = torch.randperm(16, generator=g)[:12].view(4, 3).int()
    for b, n in enumerate(lens):  # everything this row may not read: poisoned
        rows = (table[b].long()[:, None] * page + torch.arange(page)).flatten()
        bad = rows[n:] if window[0] < 0 else torch.cat([rows[: max(0, n - 1 - window[0])], rows[n:]])
        kc.view(-1, hkv, d)[bad] = float("nan")
        vc.view(-1, hkv, d)[bad] = float("inf")
    q = torch.randn(4, hq, d, generator=g)
    cu = torch.arange(5, dtype=torch.int32)
    lens_t = torch.tensor(lens, dtype=torch.int32)
    res = SDPA.flash_attn_with_kvcache(q, kc, vc, table, lens_t, cu, 1, window_size=window, return_softmax_lse=want_lse)
    out, lse = res if want_lse else (res, None)
    ref_out, ref_lse = naive_paged_attention(q, kc, vc, table, lens_t, cu, window=window)
    assert torch.isfinite(out).all()
    assert_close_to(out, ref_out, torch.float32)
    if want_lse:
        assert_lse_close(lse, ref_lse)


def test_pooled_buffers_shared_by_launches_of_different_sizes():
    """Gather buffers outlive a step (a per-thread pool, grown when a larger group comes): a launch planned before a
    larger one grew the pool, run again after it, still reads its own keys; each run vs the oracle."""
    from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep

    g = torch.Generator().manual_seed(11)
    page, hq, hkv, d = 16, 6, 2, 32
    kc = torch.randn(40, page, hkv, d, generator=g)
    vc = torch.randn(40, page, hkv, d, generator=g)
    call = LayerConsts.make(hq, hkv, d)

    def launch(lens):
        table = torch.randperm(40, generator=g)[: len(lens) * 8].view(len(lens), 8).int()
        lens = torch.tensor(lens, dtype=torch.int32)
        cu = torch.arange(len(lens) + 1, dtype=torch.int32)
        q = torch.randn(len(lens), hq, d, generator=g)
        return SDPA.arm_paged(PagedStep(cu, lens, table, 1, 8 * page, page), call), (q, table, lens, cu)

    small, big = launch([20, 9]), launch([120, 128, 100, 127])
    for lnch, (q, table, lens, cu) in (small, big, small):
        out = torch.empty(q.shape[0], hq, d)
        lnch.run(q, kc, vc, out)
        assert_close_to(out, naive_paged_attention(q, kc, vc, table, lens, cu)[0], torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("skip", [False, True])
def test_write_kv_matches_row_by_row_stores(dtype, skip):
    """write_kv on CPU (all slots valid: index_copy_ without a mask; some < 0: the masked path) vs storing each row
    by hand; FP8 caches hold k / scale rounded to FP8."""
    g = torch.Generator().manual_seed(2)
    kc, vc = torch.zeros(5, 4, 2, 8, dtype=dtype), torch.zeros(5, 4, 2, 8, dtype=dtype)
    k, v = torch.randn(6, 2, 8, generator=g), torch.randn(6, 2, 8, generator=g)
    slots = torch.tensor([3, 17, 0, 19, 8, 9])
    if skip:
        slots[[1, 4]] = -1
    scale = torch.tensor(0.5) if dtype == torch.float8_e4m3fn else None
    SDPA.write_kv(
        k.to(kc.dtype) if scale is None else k, v.to(kc.dtype) if scale is None else v, kc, vc, slots, scale, scale
    )
    want_k, want_v = torch.zeros(20, 2, 8, dtype=torch.float64), torch.zeros(20, 2, 8, dtype=torch.float64)
    for i, s in enumerate(slots.tolist()):
        if s >= 0:
            want_k[s] = (k[i] / (scale or 1.0)).to(dtype).double()
            want_v[s] = (v[i] / (scale or 1.0)).to(dtype).double()
    assert torch.equal(kc.view(20, 2, 8).double(), want_k) and torch.equal(vc.view(20, 2, 8).double(), want_v)


def _req(**kw):
    base = dict(
        device_type="cpu",
        dtype=torch.float32,
        kv_dtype=torch.float32,
        head_dim=32,
        num_q_heads=4,
        num_kv_heads=2,
        page_size=16,
    )
    base.update(kw)
    return KernelRequest(**base)


def test_declared_refusals_name_the_reason():
    assert (
        SDPA.not_supported_reasons(
            _req(
                has_sinks=True,
                has_alibi=True,
                window=(16, 0),
                return_lse=True,
                kv_dtype=torch.float8_e5m2,
                causal=False,
                v_head_dim=16,
                mla=True,
                softcap=30.0,
            )
        )
        == []
    )
    (why,) = SDPA.not_supported_reasons(_req(batch_invariant=True))
    assert why.startswith("no batch-invariant support: the kernel's key blocking")
    assert SDPA.not_supported_reasons(_req(device_type="cuda")) == ["device 'cuda' not in ['cpu']"]


def test_cpu_priority_torch_sdpa_then_reference(monkeypatch):
    """The CPU picks torch_sdpa; what it refuses goes to the reference (logged with its reasons), never silently;
    forcing the reference still works (XPU_ATTN_KERNEL)."""
    monkeypatch.delenv("XPU_ATTN_KERNEL", raising=False)
    assert select_provider(_req(phase=Phase.DECODE)).name == "torch_sdpa"
    assert select_provider(_req(phase=Phase.PREFILL, has_sinks=True, window=(8, 0))).name == "torch_sdpa"
    assert select_provider(_req(softcap=30.0)).name == "torch_sdpa"
    assert select_provider(_req(batch_invariant=True)).name == "reference"
    monkeypatch.setenv("XPU_ATTN_KERNEL", "reference")
    assert select_provider(_req()).name == "reference"
    monkeypatch.setenv("XPU_ATTN_KERNEL", "torch_sdpa")
    with pytest.raises(ValueError, match="forced .* no batch-invariant support"):
        select_provider(_req(batch_invariant=True))


def test_varlen_checks_input():
    q = torch.randn(3, 2, 8)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(TypeError, match="q/k/v dtypes must match"):
        SDPA.flash_attn_varlen_func(q, q.double(), q, cu, cu, 3, 3)
    with pytest.raises(ValueError, match="cu_seqlens_k must start at 0"):
        SDPA.flash_attn_varlen_func(q, q, q, cu, torch.tensor([0, 2], dtype=torch.int32), 3, 3)


def test_bad_page_ids_are_a_clear_error():
    q = torch.randn(1, 2, 8)
    kc = torch.randn(2, 4, 1, 8)
    with pytest.raises(ValueError, match="page_table row 0 references page 5"):
        SDPA.flash_attn_with_kvcache(
            q,
            kc,
            kc,
            torch.tensor([[5]], dtype=torch.int32),
            torch.tensor([3], dtype=torch.int32),
            torch.tensor([0, 1], dtype=torch.int32),
            1,
        )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_layers_are_computed_in_fp32(dtype):
    """16-bit q/K/V: the output is the exact result rounded once (fp32 compute, like the reference and vLLM's
    CPU_ATTN), not the fused kernel's 16-bit path, which rounds the probabilities before P @ V. Measured as the mean
    error against the fp64 oracle: at the rounding floor (the oracle rounded to ``dtype``), decode and prefill rows."""
    g = torch.Generator().manual_seed(5)
    page, hq, hkv, d = 16, 9, 3, 64
    lens = torch.tensor([300, 217, 160, 288, 40], dtype=torch.int32)  # 4 decode rows + a 40-query prefill
    q_lens = [1, 1, 1, 1, 40]
    npg = 19
    kc = (torch.randn(len(lens) * npg, page, hkv, d, generator=g) * 2).to(dtype)
    vc = torch.randn(len(lens) * npg, page, hkv, d, generator=g).to(dtype)
    table = torch.randperm(len(lens) * npg, generator=g).view(len(lens), npg).int()
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    q = (torch.randn(sum(q_lens), hq, d, generator=g) * 2).to(dtype)
    out = SDPA.flash_attn_with_kvcache(q, kc, vc, table, lens, cu, max(q_lens))
    ref, _ = naive_paged_attention(q.double(), kc.double(), vc.double(), table, lens, cu)
    err = (out.double() - ref).abs().mean().item()
    floor = (ref.to(dtype).double() - ref).abs().mean().item()
    assert err <= 1.01 * floor, (err, floor)


@pytest.mark.parametrize("by_rows", [True, False])
@pytest.mark.parametrize("fold", [True, False])
def test_plain_decode_launch_keeps_run_groups_bits(by_rows, fold, monkeypatch):
    """``TorchSdpaLaunch.run``'s fp32 decode path (per step: every group plain; per layer: only the layer's own
    tensors checked) gives the bits of ``_run_groups`` on the same launch, for one row over consecutive pages, a
    run of rows gathered by rows or whole pages (rows past a row's keys zeroed), folded or not; a layer with sinks,
    a 16-bit q or an FP8 cache takes ``_run_groups``' general path."""
    from vllm_xpu_attn.kernels.api import LayerConsts, LayerTensors, PagedStep

    monkeypatch.setattr(cpu_sdpa, "decode_gathers_rows", lambda counts, page_keys: by_rows)
    monkeypatch.setattr(cpu_sdpa, "fold_heads", lambda n, hkv: fold)
    g = torch.Generator().manual_seed(5)
    page, hq, hkv, d, pages = 16, 6, 2, 8, 12
    kv = torch.randn(pages, page, hkv, 2 * d, generator=g)
    kc, vc = kv[..., :d], kv[..., d:]
    table = torch.tensor([[3, 4, 9], [8, 0, 2], [6, 1, 5], [10, 11, 7]], dtype=torch.int32)
    lens = torch.tensor([29, 40, 7, 33], dtype=torch.int32)
    call = LayerConsts.make(hq, hkv, d)
    for n in (1, 4):
        q = torch.randn(n, hq, d, generator=g)
        step = PagedStep(torch.arange(n + 1, dtype=torch.int32), lens[:n], table[:n], 1, 48, page)
        launch = SDPA.arm_paged(step, call)
        out = torch.full((n, hq, d), float("nan"))
        launch.run(q, kc, vc, out)
        assert launch._plain
        want = torch.full((n, hq, d), float("nan"))
        SDPA._run_groups(launch, q, kc, vc, want, cpu_sdpa.NO_LAYER_TENSORS)
        assert torch.equal(out, want)
        assert_close_to(out, naive_paged_attention(q, kc, vc, table[:n], lens[:n], step.cu_seqlens_q)[0], torch.float32)
    sinks = torch.randn(hq, generator=g)
    with_sinks = LayerTensors.make(call, device=torch.device("cpu"), kv_dtype=torch.float32, sinks=sinks)
    out = torch.empty(n, hq, d)
    launch.run(q, kc, vc, out, layer=with_sinks)
    assert_close_to(
        out, naive_paged_attention(q, kc, vc, table[:n], lens[:n], step.cu_seqlens_q, sinks=sinks)[0], torch.float32
    )
    assert not torch.equal(out, want)  # the sinks path ran: the sink takes some of each row's weight


def test_write_kv_checks_slots_once_per_step_and_again_after_a_change(monkeypatch):
    """The CPU write's slot range check (one ``aminmax``) runs once per slot_mapping tensor (every layer of a step
    writes the same one), and again for a new tensor or after any in-place change of its values (through itself or
    another view of its storage): an out-of-range slot still raises, naming slot_mapping, before any store; a slot
    made < 0 is skipped again; int32 slots are written as int64."""
    from vllm_xpu_attn.kernels.api import torch_ops

    calls = []
    aminmax = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda t: calls.append(1) or aminmax(t))
    g = torch.Generator().manual_seed(3)
    kv = torch.zeros(5, 4, 2, 16)  # vLLM's K | V pages
    kc, vc = kv[..., :8], kv[..., 8:]
    k, v = torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
    base = torch.tensor([3, 17, 0, 9], dtype=torch.int32)
    slots = base[:3]  # a view, as vLLM's slice of its persistent buffer
    for _ in range(4):  # four layers of one step
        SDPA.write_kv(k, v, kc, vc, slots)
    assert len(calls) == 1
    assert torch.equal(kc.reshape(20, 2, 8)[[3, 17, 0]], k) and torch.equal(vc.reshape(20, 2, 8)[[3, 17, 0]], v)
    SDPA.write_kv(k, v, kc, vc, base[:3])  # the next step: a new tensor object
    assert len(calls) == 2
    for change in (lambda: slots.__setitem__(1, 20), lambda: base.__setitem__(2, 25)):
        SDPA.write_kv(k, v, kc, vc, slots)  # this tensor's verdict kept...
        before = kv.clone()
        change()  # ...then its values changed in place
        with pytest.raises(ValueError, match=r"slot_mapping\[\d\]=2[05] is outside"):
            SDPA.write_kv(k + 1, v + 1, kc, vc, slots)
        assert torch.equal(kv, before)  # nothing written
        slots.copy_(torch.tensor([3, 17, 0], dtype=torch.int32))
    slots[0] = -1
    SDPA.write_kv(k + 2, v + 2, kc, vc, slots)
    assert torch.equal(kc.reshape(20, 2, 8)[3], before.reshape(20, 2, 16)[3, :, :8])  # skipped
    assert torch.equal(kc.reshape(20, 2, 8)[17], k[1] + 2)
    ok = torch.tensor([1, 2, 3], dtype=torch.int32)
    assert torch_ops.slots_in_range(ok, 20).dtype == torch.int64
    assert torch_ops.slots_in_range(ok, 3) is None  # the same tensor against a smaller cache: checked again
    with torch.inference_mode():  # inference tensors have no version counter: checked every call
        inf = torch.tensor([1, 2, 3])
        n = len(calls)
        assert torch_ops.slots_in_range(inf, 20) is not None and torch_ops.slots_in_range(inf, 20) is not None
        assert len(calls) == n + 2


def test_write_kv_structural_checks_after_a_passing_call():
    """write_kv's structural checks are one tuple compare for a call with the last passing call's signature; any
    other signature is checked in full, and its error names the argument."""
    kc, vc = torch.zeros(5, 4, 2, 8), torch.zeros(5, 4, 2, 8)
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    slots = torch.tensor([3, 17, 0])
    SDPA.write_kv(k, v, kc, vc, slots)
    with pytest.raises(TypeError, match="v dtype torch.bfloat16 does not match"):
        SDPA.write_kv(k, v.bfloat16(), kc, vc, slots)
    with pytest.raises(ValueError, match=r"k must be \[tokens, 2, 8\]"):
        SDPA.write_kv(k[..., :4], v, kc, vc, slots)
    with pytest.raises(TypeError, match="slot_mapping must be an int32/int64 tensor"):
        SDPA.write_kv(k, v, kc, vc, slots.float())
    with pytest.raises(ValueError, match="head_dim dimension of k and k_cache must be contiguous"):
        SDPA.write_kv(torch.randn(3, 8, 2).transpose(1, 2), v, kc, vc, slots)
    with pytest.raises(ValueError, match=r"k must be \[tokens, 2, 8\]"):
        SDPA.write_kv(torch.tensor(1.0), v, kc, vc, slots)
    SDPA.write_kv(k, v, kc, vc, slots)
    assert torch.equal(kc.view(20, 2, 8)[slots], k)


_GROUP_FIELDS = ("n", "lq", "lk", "q_rows", "q0", "q1", "slots", "pages", "seqs", "mask", "q_pos", "is_causal")
_GROUP_FIELDS += ("drop", "dead", "unseen", "span", "plain", "fold")


@pytest.mark.parametrize("rows_ok", [True, False])
def test_one_decode_row_plan_is_the_general_plan(rows_ok, monkeypatch):
    """A step of one decode row (batch-1 decode) is planned from host ints (``_one_decode_row``) into the group the
    general ``_build`` makes: every field equal (gather choice, lk, slots or pages, span, mask, fold), and the same
    output bits, for keys on one page, across consecutive pages, ending on a page boundary (whole pages, no unseen
    key), or not (the general path then); scattered pages, a window or a second row take the general path."""
    from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep

    taken = []
    fast = cpu_sdpa.TorchSdpaLaunch._one_decode_row

    def spy(self, cu, lens, rows_ok):
        g = fast(self, cu, lens, rows_ok)
        taken.append(g is not None)
        return g

    monkeypatch.setattr(cpu_sdpa.TorchSdpaLaunch, "_one_decode_row", spy)
    g = torch.Generator().manual_seed(11)
    page, hq, hkv, d, num_pages = 16, 6, 2, 8, 12
    kv = torch.randn(num_pages, page, hkv, 2 * d, generator=g)
    kc, vc = kv[..., :d], kv[..., d:]
    cases = []
    for ln in (1, 7, 16, 17, 29, 32, 33, 48):
        cases.append((ln, [[3, 4, 5]], (-1, -1), True))
    cases += [(29, [[3, 9, 5]], (-1, -1), False), (17, [[3, 9, 5]], (-1, -1), False), (29, [[3, 4, 5]], (8, 0), False)]
    cases += [(33, [[2, 3, 4], [6, 7, 8]], (-1, -1), False)]
    for ln, table, window, fast_expected in cases:
        n = len(table)
        lens = torch.tensor([ln] * n, dtype=torch.int32)
        step = PagedStep(
            torch.arange(n + 1, dtype=torch.int32), lens, torch.tensor(table, dtype=torch.int32), 1, 48, page
        )
        call = LayerConsts.make(hq, hkv, d, window=window)
        got, want = SDPA.arm_paged(step, call), SDPA.arm_paged(step, call)
        taken.clear()
        got._build(num_pages, n, rows_ok)
        keys = -(-ln // page) * page  # the row's pages' keys
        expected = fast_expected and ((rows_ok and cpu_sdpa.decode_gathers_rows([ln], keys)) or ln == keys)
        assert taken == [expected], (ln, table, window, rows_ok)
        monkeypatch.setattr(cpu_sdpa.TorchSdpaLaunch, "_one_decode_row", lambda *a: None)
        want._build(num_pages, n, rows_ok)
        monkeypatch.setattr(cpu_sdpa.TorchSdpaLaunch, "_one_decode_row", spy)
        assert len(got._groups) == len(want._groups) and got._plain == want._plain
        assert got._zero_rows is None and want._zero_rows is None
        for a, b in zip(got._groups, want._groups):
            for f in _GROUP_FIELDS:
                x, y = getattr(a, f), getattr(b, f)
                same = torch.equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y
                assert same, (f, x, y, ln, table, rows_ok)
        q = torch.randn(n, hq, d, generator=g)
        out, ref = torch.full((n, hq, d), float("nan")), torch.full((n, hq, d), float("nan"))
        got.run(q, kc, vc, out)
        want.run(q, kc, vc, ref)
        assert torch.equal(out, ref)
