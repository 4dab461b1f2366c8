"""MLA (DeepSeek-V2/V3): absorbed attention over the latent cache and the un-absorbed prefill, against
the naive MLA written from the paper's equations (tests/support/naive_mla.py), randomized over decode and extend
with a cached prefix, page sizes 1/16/64, fp32/bf16, reference and Triton (interpreter) providers."""

import os
import random

os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton on the CPU runs through its interpreter

import pytest
import torch
from naive_mla import naive_mla

from vllm_xpu_attn.core import LayerRunner, LayerSpec, MLADims, Mode, StepInputs, plan_step

H, D_C, D_R, D_H, D_V = 4, 32, 16, 16, 16
DIMS = MLADims(kv_lora_rank=D_C, qk_rope_head_dim=D_R, qk_nope_head_dim=D_H, v_head_dim=D_V)
SCALE = (D_H + D_R) ** -0.5
PROVIDERS = ["reference", "triton", "torch_sdpa"]


def _case(seed: int, page: int, dtype, decode: bool):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    batch = rng.randint(1, 3)
    q_lens = [1 if decode else rng.randint(1, 6) for _ in range(batch)]
    prefix = [rng.randint(0 if not decode else 1, 40) for _ in range(batch)]
    k_lens = [p + q for p, q in zip(prefix, q_lens)]
    pages_per = [-(-k // page) for k in k_lens]
    n_pages = sum(pages_per) + 2
    perm = torch.randperm(n_pages, generator=g).tolist()
    width = max(pages_per)
    table = torch.zeros(batch, width, dtype=torch.int32)
    at = 0
    for b, n in enumerate(pages_per):
        table[b, :n] = torch.tensor(perm[at : at + n], dtype=torch.int32)
        at += n
    c_kv = [(torch.randn(k, D_C, generator=g) * 0.5).to(dtype) for k in k_lens]
    k_rope = [(torch.randn(k, D_R, generator=g) * 0.5).to(dtype) for k in k_lens]
    q_nope = (torch.randn(sum(q_lens), H, D_H, generator=g) * 0.5).to(dtype)
    q_rope = (torch.randn(sum(q_lens), H, D_R, generator=g) * 0.5).to(dtype)
    w_uk = (torch.randn(H, D_H, D_C, generator=g) * D_C**-0.5).to(dtype)
    w_uv = (torch.randn(H, D_V, D_C, generator=g) * D_C**-0.5).to(dtype)
    return dict(
        q_lens=q_lens,
        k_lens=k_lens,
        table=table,
        n_pages=n_pages,
        c_kv=c_kv,
        k_rope=k_rope,
        q_nope=q_nope,
        q_rope=q_rope,
        w_uk=w_uk,
        w_uv=w_uv,
    )


def _slots(table, b, positions, page):
    pos = torch.as_tensor(positions)
    return table[b, pos // page].long() * page + pos % page


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("decode", [True, False], ids=["decode", "extend"])
def test_absorbed_mla_matches_naive(provider, dtype, page, decode):
    _check_absorbed(provider, dtype, page, decode)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("decode", [True, False], ids=["decode", "extend"])
def test_triton_mla_latent_tiles_through_the_runner(monkeypatch, dtype, decode):
    """The latent register tiles Intel ships (tuning.MLA_LATENT_TILES["xpu"]: chunked scores, column programs),
    forced on the interpreter: decode and extend rows through LayerRunner, against the naive MLA."""
    from vllm_xpu_attn.kernels.api import get_provider
    from vllm_xpu_attn.kernels.providers.triton import tuning

    monkeypatch.setitem(tuning.MLA_LATENT_TILES, "cpu", {"mla_decode": (16, 16), "mla_wide": (16, 16)})
    get_provider("triton").clear_caches()
    try:
        _check_absorbed("triton", dtype, 16, decode)
    finally:
        get_provider("triton").clear_caches()


def _check_absorbed(provider, dtype, page, decode):
    for seed in range(3):
        c = _case(seed * 7 + page, page, dtype, decode)
        spec = LayerSpec.for_mla(H, DIMS, SCALE, dtype=dtype, kv_dtype=dtype)
        runner = LayerRunner(spec, "cpu", page, override=provider)
        cache = torch.zeros(c["n_pages"], page, 1, DIMS.latent_dim, dtype=dtype)
        # every token's latent row, written as the engine does (prefix earlier, new tokens this step)
        for b, k in enumerate(c["k_lens"]):
            runner.write_latent(c["c_kv"][b], c["k_rope"][b], cache, _slots(c["table"], b, range(k), page))
        q_lens, k_lens = c["q_lens"], c["k_lens"]
        mode = Mode.DECODE if decode else Mode.EXTEND
        inp = StepInputs(
            mode, torch.tensor(k_lens, dtype=torch.int32), max(k_lens), sum(q_lens), page, page_table=c["table"]
        )
        if not decode:
            inp.query_lens, inp.max_seqlen_q = torch.tensor(q_lens, dtype=torch.int32), max(q_lens)
        plan = plan_step(inp)
        q_abs = torch.cat(
            [torch.einsum("thn,hnc->thc", c["q_nope"].float(), c["w_uk"].float()).to(dtype), c["q_rope"]], dim=-1
        )  # [T, H, D_C + D_R]: q_nope absorbed into the latent space
        out_lat = runner.forward_mla(plan, q_abs, cache)
        assert out_lat.shape == (sum(q_lens), H, D_C)
        got = torch.einsum("thc,hvc->thv", out_lat.double(), c["w_uv"].double())
        at = 0
        for b, (ql, kl) in enumerate(zip(q_lens, k_lens)):
            # the oracle sees the same rounded absorbed query the kernel gets: it checks attention, not bf16 GEMMs
            want = naive_mla(
                c["q_nope"][at : at + ql],
                c["q_rope"][at : at + ql],
                c["c_kv"][b],
                c["k_rope"][b],
                c["w_uk"],
                c["w_uv"],
                q_start=kl - ql,
                scale=SCALE,
            )
            tol = 1e-4 if dtype == torch.float32 else 4e-2
            torch.testing.assert_close(got[at : at + ql], want, atol=tol, rtol=tol)
            at += ql


@pytest.mark.parametrize("provider", ["reference", "torch_sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unabsorbed_prefill_with_prefix_matches_naive(dtype, provider):
    """The engines' MHA prefill: K/V decompressed from the latent (k = [W_UK c ; k_R], v = W_UV c)."""
    c = _case(11, 16, dtype, decode=False)
    spec = LayerSpec.for_mla(H, DIMS, SCALE, dtype=dtype, kv_dtype=dtype)
    runner = LayerRunner(spec, "cpu", 16, override=provider)
    ks, vs = [], []
    for b in range(len(c["k_lens"])):
        k_c = torch.einsum("hnc,kc->khn", c["w_uk"].float(), c["c_kv"][b].float())
        k_r = c["k_rope"][b].float()[:, None, :].expand(-1, H, -1)
        ks.append(torch.cat([k_c, k_r], dim=-1).to(dtype))
        vs.append(torch.einsum("hvc,kc->khv", c["w_uv"].float(), c["c_kv"][b].float()).to(dtype))
    q = torch.cat([c["q_nope"], c["q_rope"]], dim=-1)
    cu_q = torch.tensor([0] + torch.tensor(c["q_lens"]).cumsum(0).tolist(), dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(c["k_lens"]).cumsum(0).tolist(), dtype=torch.int32)
    out, lse = runner.forward_mla_mha(
        q, torch.cat(ks), torch.cat(vs), cu_q, cu_k, max(c["q_lens"]), max(c["k_lens"]), return_lse=True
    )
    assert out.shape == (sum(c["q_lens"]), H, D_V) and lse.shape == (H, sum(c["q_lens"]))
    at = 0
    for b, (ql, kl) in enumerate(zip(c["q_lens"], c["k_lens"])):
        want = naive_mla(
            c["q_nope"][at : at + ql],
            c["q_rope"][at : at + ql],
            c["c_kv"][b],
            c["k_rope"][b],
            c["w_uk"],
            c["w_uv"],
            q_start=kl - ql,
            scale=SCALE,
        )
        tol = 1e-4 if dtype == torch.float32 else 4e-2
        torch.testing.assert_close(out[at : at + ql].double(), want, atol=tol, rtol=tol)
        at += ql


def test_mla_spec_is_checked_at_configuration():
    with pytest.raises(ValueError, match="one latent row per token"):
        LayerSpec(num_q_heads=4, num_kv_heads=4, head_dim=48, scale=1.0, v_head_dim=32, mla=DIMS)
    with pytest.raises(ValueError, match="must be positive"):
        MLADims(0, 16, 16, 16)
    spec = LayerSpec.for_mla(H, DIMS, SCALE, dtype=torch.float32, kv_dtype=torch.float32)
    r = LayerRunner(spec, "cpu", 16)
    assert r.providers_used() == {"prefill": "torch_sdpa", "decode": "torch_sdpa", "mla_prefill_mha": "torch_sdpa"}
    with pytest.raises(ValueError, match="latent cache must be"):
        plan = plan_step(
            StepInputs(
                Mode.DECODE,
                torch.tensor([3], dtype=torch.int32),
                3,
                1,
                16,
                page_table=torch.zeros(1, 1, dtype=torch.int32),
            )
        )
        r.forward_mla(plan, torch.zeros(1, H, 48), torch.zeros(2, 16, 1, 40))


def _latent_decode_case(seed: int):
    """A 3-sequence absorbed-MLA decode step over a shuffled fp32 latent cache (page 16, 70/5/33 keys), LSE asked:
    (step, call, cache [16, 16, 1, D_C + D_R], q [3, H, D_C + D_R])."""
    from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep

    g = torch.Generator().manual_seed(seed)
    page, lens = 16, [70, 5, 33]
    cache = torch.randn(16, page, 1, DIMS.latent_dim, generator=g)
    table = torch.randperm(16, generator=g)[:15].reshape(3, 5).to(torch.int32)
    q = torch.randn(3, H, DIMS.latent_dim, generator=g)
    step = PagedStep(torch.arange(4, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), table, 1, 80, page)
    call = LayerConsts.make(H, 1, DIMS.latent_dim, D_C, softmax_scale=SCALE, return_lse=True, mla=True)
    return step, call, cache, q


def _reference(step, call, cache, q):
    """The reference provider's (out, lse) for a ``_latent_decode_case``."""
    from vllm_xpu_attn.kernels.api import get_provider

    return get_provider("reference").arm_paged(step, call).run(q, cache, cache[..., :D_C], torch.empty(3, H, D_C))


@pytest.mark.parametrize("splits", [2, 4])
def test_triton_mla_decode_split_k_matches_reference(splits):
    """The MLA decode kernel's split-K partials and their merge (forced split counts), with LSE."""
    from vllm_xpu_attn.kernels.api import get_provider

    step, call, cache, q = _latent_decode_case(seed=5)
    tri = get_provider("triton").arm_paged(step, call, num_splits=splits)
    assert tri.mla_decode and tri.num_splits == splits
    o, lse = tri.run(q, cache, cache[..., :D_C], torch.empty(3, H, D_C))
    want_o, want_lse = _reference(step, call, cache, q)
    torch.testing.assert_close(o, want_o, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="first v_head_dim columns"):
        tri.run(q, cache, cache.clone()[..., :D_C], torch.empty(3, H, D_C))
    with pytest.raises(ValueError, match="power of two"):
        get_provider("triton").arm_paged(step, call, num_splits=3)


@pytest.mark.parametrize("latent_tiles", [(16, 16), (16, 32), (32, 16)], ids=lambda t: f"dc{t[0]}-dv{t[1]}")
@pytest.mark.parametrize("splits", [1, 2])
def test_triton_mla_latent_tiles_match_reference(monkeypatch, latent_tiles, splits):
    """The MLA kernel's register tiles (tuning.MLA_LATENT_TILES): scores summed over latent chunks, output
    columns split across programs (the LSE written once), with and without split-K, against the reference."""
    from vllm_xpu_attn.kernels.api import get_provider
    from vllm_xpu_attn.kernels.providers.triton import tuning

    monkeypatch.setitem(tuning.MLA_LATENT_TILES, "cpu", {"mla_decode": latent_tiles, "mla_wide": latent_tiles})
    step, call, cache, q = _latent_decode_case(seed=11)
    tri = get_provider("triton")
    tri.clear_caches()
    try:
        launch = tri.arm_paged(step, call, num_splits=splits)
        assert launch.mla_decode and launch.grid[2] == splits * D_C // latent_tiles[1]
        o, lse = launch.run(q, cache, cache[..., :D_C], torch.empty(3, H, D_C))
    finally:
        tri.clear_caches()
    want_o, want_lse = _reference(step, call, cache, q)
    torch.testing.assert_close(o, want_o, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("splits", [1, 2])
def test_triton_mla_fp8_latent_with_bf16_queries_matches_reference(kv_dtype, splits):
    """The MLA kernel with bf16 queries over an FP8 latent cache and its descale (split-K too), against the
    reference on the same FP8 cache."""
    from vllm_xpu_attn.kernels.api import LayerTensors, get_provider

    step, call, cache, q = _latent_decode_case(seed=7)
    cache, q = (cache * 4).to(kv_dtype), (q * 3).bfloat16()
    ds = torch.tensor([0.375])
    layer = LayerTensors.make(call, device=q.device, kv_dtype=kv_dtype, k_descale=ds, v_descale=ds)
    tri = get_provider("triton")
    o, lse = tri.arm_paged(step, call, num_splits=splits).run(
        q, cache, cache[..., :D_C], torch.empty(3, H, D_C, dtype=torch.bfloat16), layer=layer
    )
    want_o, want_lse = (
        get_provider("reference")
        .arm_paged(step, call)
        .run(q, cache, cache[..., :D_C], torch.empty(3, H, D_C, dtype=torch.bfloat16), layer=layer)
    )
    torch.testing.assert_close(o.float(), want_o.float(), atol=1.6e-2, rtol=1.6e-2)
    torch.testing.assert_close(lse, want_lse, atol=2e-3, rtol=2e-3)


PAGE_FORMS = ["page", "tma", "ahead", "ahead-ptr"]


@pytest.fixture
def mla_form(request, monkeypatch):
    """The MLA page-block kernel (tuning.MLA_KERNEL_FORM "page" / "tma" / "ahead": _mla_page_kernel, issue #49)
    forced on the interpreter's family for one test ("ahead-ptr": "ahead" with the cache refused for descriptors,
    so its score tiles take pointer loads); the provider's kept launch configurations cleared around it."""
    from vllm_xpu_attn.kernels.api import get_provider
    from vllm_xpu_attn.kernels.providers.triton import step_launch, tuning

    form = request.param.removesuffix("-ptr")
    monkeypatch.setitem(tuning.MLA_KERNEL_FORM, "cpu", {"mla_decode": form, "mla_wide": form})
    if request.param.endswith("-ptr"):
        monkeypatch.setattr(step_launch, "desc_layer_ok", lambda *a: False)
    tri = get_provider("triton")
    tri.clear_caches()
    yield request.param
    tri.clear_caches()


def _page_kernel_ran(form: str) -> None:
    """The page-block kernel is what launched: descriptors exactly in the "tma" / "ahead" forms, the scores one
    block ahead exactly in "ahead"."""
    from vllm_xpu_attn.kernels.api import get_provider

    launched = get_provider("triton").launched_variants("_mla_page_kernel")
    assert launched and {v["USE_DESC"] for v in launched} == {form in ("tma", "ahead")}
    assert {v["AHEAD"] for v in launched} == {form.startswith("ahead")}


@pytest.mark.parametrize("mla_form", PAGE_FORMS, indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("page", [16, 64])
@pytest.mark.parametrize("decode", [True, False], ids=["decode", "extend"])
def test_triton_mla_page_kernel_matches_naive(mla_form, dtype, page, decode):
    """_mla_page_kernel (pointer and descriptor loads) through LayerRunner, decode and extend rows (causal
    diagonal inside head tiles: its masked tail), against the naive MLA."""
    _check_absorbed("triton", dtype, page, decode)
    _page_kernel_ran(mla_form)


@pytest.mark.parametrize("mla_form", PAGE_FORMS, indirect=True)
@pytest.mark.parametrize("splits", [1, 2, 4])
def test_triton_mla_page_kernel_split_k_and_nan_tail(mla_form, splits):
    """_mla_page_kernel's split-K partials, merge and LSE against the reference provider, over a cache whose
    unwritten slots (each page's tail past a sequence's keys) hold NaN: the masked tail must read them as 0."""
    from vllm_xpu_attn.kernels.api import get_provider

    step, call, cache, q = _latent_decode_case(seed=13)
    lens = step.cache_seqlens.tolist()
    dirty = cache.clone()
    for b, n in enumerate(lens):  # NaN in every slot of this sequence's pages past its n keys
        for j in range(n, step.page_table.shape[1] * 16):
            dirty[step.page_table[b, j // 16].long(), j % 16] = float("nan")
    launch = get_provider("triton").arm_paged(step, call, num_splits=splits)
    assert launch.mla_decode and launch.num_splits == splits
    o, lse = launch.run(q, dirty, dirty[..., :D_C], torch.empty(3, H, D_C))
    want_o, want_lse = _reference(step, call, cache, q)
    torch.testing.assert_close(o, want_o, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)
    _page_kernel_ran(mla_form)


@pytest.mark.parametrize("operands", ["cast", "f16"])
@pytest.mark.parametrize("mla_form", PAGE_FORMS, indirect=True)
@pytest.mark.parametrize("kv_dtype", [torch.float8_e4m3fn, torch.float8_e5m2], ids=["e4m3", "e5m2"])
def test_triton_mla_page_kernel_fp8_latent(mla_form, kv_dtype, operands, monkeypatch):
    """_mla_page_kernel with bf16 queries over an FP8 latent cache and its descale, split-K, against the
    reference on the same FP8 cache; with the cache's elements cast to the query side (fp32 products in the
    interpreter) and as fp16 products (tuning.FP8_OPERANDS "f16": q x 2^-8, the scale taking it back; cuda_sm90's
    "ptx" is the same products with the conversion in PTX), which the "ahead" form does not take."""
    from vllm_xpu_attn.kernels.api import LayerTensors, get_provider
    from vllm_xpu_attn.kernels.providers.triton import tuning

    monkeypatch.setitem(tuning.FP8_OPERANDS, "cpu", {"mla": operands})
    get_provider("triton").clear_caches()

    step, call, cache, q = _latent_decode_case(seed=7)
    cache, q = (cache * 4).to(kv_dtype), (q * 3).bfloat16()
    ds = torch.tensor([0.375])
    layer = LayerTensors.make(call, device=q.device, kv_dtype=kv_dtype, k_descale=ds, v_descale=ds)
    o, lse = (
        get_provider("triton")
        .arm_paged(step, call, num_splits=2)
        .run(q, cache, cache[..., :D_C], torch.empty(3, H, D_C, dtype=torch.bfloat16), layer=layer)
    )
    want_o, want_lse = (
        get_provider("reference")
        .arm_paged(step, call)
        .run(q, cache, cache[..., :D_C], torch.empty(3, H, D_C, dtype=torch.bfloat16), layer=layer)
    )
    torch.testing.assert_close(o.float(), want_o.float(), atol=1.6e-2, rtol=1.6e-2)
    torch.testing.assert_close(lse, want_lse, atol=2e-3, rtol=2e-3)
    _page_kernel_ran(mla_form)
    cvt = {v["FP8_CVT"] for v in get_provider("triton").launched_variants("_mla_page_kernel")}
    assert cvt == {1 if operands == "f16" and not mla_form.startswith("ahead") else 0}, cvt
