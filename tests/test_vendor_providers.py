"""The XPU library wrappers against strict vendor models (tests/fakes) and the naive oracle.

No Intel GPU here. Each fake enforces its vendor's checks (every rule cites the vendor's source
line) and reproduces what the vendor silently gets wrong (rows read at ``index * width``, sinks read
in q's dtype, softcap ignored and LSE unwritten on older sgl-kernel builds, host-syncing fallbacks).
A wrapper passes only if, for every layout its provider *declares* it can serve, the fake raises
nothing and the output equals the naive oracle's (tests/support/naive.py, independent of both).
"""

import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from layouts import assert_close_to, assert_lse_close, layouts
from naive import naive_paged_attention
from vendor_fakes import FAKES, VENDORS, vendor_fakes  # noqa: E402
from vendor_fakes import reset_instances as _reset_instances  # noqa: E402

from vllm_xpu_attn.kernels.api import KernelRequest, NoProviderError, get_provider, select_provider
from vllm_xpu_attn.kernels.api import registry as reg

SGL_BUILDS = ("9cf16bf9", "pr491")


@pytest.fixture(scope="module", autouse=True)
def fakes():
    with vendor_fakes():
        yield


@pytest.fixture(params=SGL_BUILDS)
def sgl_build(request, monkeypatch):
    """A fresh sgl_kernel provider on one fake build, probing on the fake's device (the CPU)."""
    import sgl_kernel.flash_attn as fake

    monkeypatch.setattr(fake, "BUILD", request.param)
    _reset_instances()
    prov = get_provider("sgl_kernel")
    prov.probe_device = "cpu"
    yield request.param
    _reset_instances()


@pytest.fixture
def ipex_on(monkeypatch):
    from vllm_xpu_attn.kernels.providers.xpu_libs.ipex import IpexProvider

    monkeypatch.setattr(IpexProvider, "_xehpc", lambda self: True)  # the fake models a BMG
    yield


def request_for(layout, lse: bool, phase: str) -> KernelRequest:
    kw = layout.kwargs
    return KernelRequest(
        device_type="xpu",
        dtype=layout.q.dtype,
        kv_dtype=layout.k_cache.dtype,
        head_dim=layout.q.shape[-1],
        num_q_heads=layout.q.shape[1],
        num_kv_heads=layout.k_cache.shape[2],
        page_size=layout.k_cache.shape[1],
        causal=kw["causal"],
        window=tuple(kw["window_size"]),
        softcap=kw["softcap"],
        has_sinks=kw["sinks"] is not None,
        has_alibi=kw["alibi_slopes"] is not None,
        return_lse=lse,
        phase=phase,
    )


# provider -> [served, refused, served with FP8] layouts; sgl_kernel_mla serves MLA layers only (test_vendor_mla.py)
SERVED = {n: [0, 0, 0] for n in VENDORS if n != "sgl_kernel_mla"}


def drive(name: str, layout, lse: bool, use_out: bool) -> None:
    """Declared -> the vendor (fake) must accept it and match the naive oracle; refused -> nothing runs."""
    from _common import CALLS

    prov = get_provider(name)
    phase = "decode" if layout.max_seqlen_q <= 1 else "prefill"
    reasons = prov.not_supported_reasons(request_for(layout, lse, phase))
    kw = layout.kwargs
    per_head = kw["k_descale"] is not None and kw["k_descale"].numel() != 1
    if reasons or per_head:
        SERVED[name][1] += 1
        if per_head and not reasons:
            with pytest.raises(ValueError, match="per-tensor FP8 scale"):
                prov.flash_attn_with_kvcache(*layout.args(), **kw, return_softmax_lse=lse)
        return
    SERVED[name][0] += 1
    SERVED[name][2] += layout.k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    out_buf = (
        torch.full((layout.q.shape[0], layout.q.shape[1], layout.v_cache.shape[-1]), float("nan"), dtype=layout.q.dtype)
        if use_out
        else None
    )
    n_calls = len(CALLS)
    res = prov.flash_attn_with_kvcache(*layout.args(), **kw, return_softmax_lse=lse, out=out_buf)
    out = res[0] if lse else res
    if use_out:
        assert out.data_ptr() == out_buf.data_ptr(), "the engine's output buffer was not written in place"
    want, want_lse = naive_paged_attention(*layout.args()[:6], **layout.naive_kwargs())
    assert_close_to(out.float(), want, layout.q.dtype)
    if lse:
        assert_lse_close(res[1], want_lse)
    assert len(CALLS) > n_calls or layout.q.shape[0] == 0, "the vendor function was not called"
    assert not any(c[1] == "fallback" for c in CALLS[n_calls:]), "routed into the vendor's host-syncing fallback"


def _vary(layout, sinks_bf16: bool, drop=("alibi_slopes",), descales: str = "as_drawn"):
    """No vendor applies ALiBi (and some never softcap): drawing them would only grow the refusals.

    ``descales`` (FP8 layouts with per-tensor scales): "none" = omitted (the contract's 1.0), "view" =
    one-element views into a larger scales tensor, as engines keep them.
    """
    for k in drop:
        layout.kwargs[k] = 0.0 if k == "softcap" else None
    kd, vd = layout.kwargs["k_descale"], layout.kwargs["v_descale"]
    if kd is not None and descales != "as_drawn" and kd.numel():
        kd, vd = kd.reshape(-1)[:1].clone(), vd.reshape(-1)[:1].clone()  # per-tensor (vendors refuse per-head)
        if descales == "none":
            layout.kwargs["k_descale"] = layout.kwargs["v_descale"] = None
        else:
            scales = torch.cat([kd.reshape(1), vd.reshape(1), torch.ones(2)])
            layout.kwargs["k_descale"], layout.kwargs["v_descale"] = scales[0:1], scales[1:2]
    if sinks_bf16 and layout.kwargs["sinks"] is not None:  # SGLang keeps sinks in bf16, vLLM in fp32
        layout.kwargs["sinks"] = layout.kwargs["sinks"].bfloat16()
    return layout


FP16_BF16 = [torch.float16, torch.bfloat16]
DESCALES = ("as_drawn", "none", "view")


FIXTURES_OK = [HealthCheck.function_scoped_fixture]  # the fixtures set a build once; no per-example state


@settings(max_examples=60, suppress_health_check=FIXTURES_OK, derandomize=True)
@given(
    layout=layouts(
        page_sizes=(1, 16, 64, 128, 64),
        head_dims=(64, 96, 128, 192, 256, 512),
        dtypes=FP16_BF16,
        max_ctx=160,
        max_kv_heads=2,
        gqa=(1, 2, 4, 8),
    ),
    lse=st.booleans(),
    use_out=st.booleans(),
    sinks_bf16=st.booleans(),
    descales=st.sampled_from(DESCALES),
)
def test_sgl_kernel_wrapper(sgl_build, layout, lse, use_out, sinks_bf16, descales):
    drive("sgl_kernel", _vary(layout, sinks_bf16, descales=descales), lse, use_out)


@settings(max_examples=100, derandomize=True)
@given(
    layout=layouts(
        page_sizes=(16, 32, 48, 64, 128),
        head_dims=(64, 96, 128, 192, 256, 512),
        dtypes=FP16_BF16,
        max_ctx=160,
        gqa=(1, 2, 4, 8),
    ),
    use_out=st.booleans(),
    sinks_bf16=st.booleans(),
    descales=st.sampled_from(DESCALES),
)
def test_vllm_xpu_kernels_wrapper(layout, use_out, sinks_bf16, descales):
    drive(
        "vllm_xpu_kernels",
        _vary(layout, sinks_bf16, drop=("alibi_slopes", "softcap"), descales=descales),
        False,
        use_out,
    )


@settings(max_examples=40, suppress_health_check=FIXTURES_OK, derandomize=True)
@given(
    layout=layouts(page_sizes=(64, 128), head_dims=(64, 128), dtypes=[torch.bfloat16], max_ctx=160, always_fp8=True),
    use_out=st.booleans(),
    descales=st.sampled_from(DESCALES[1:]),
)
def test_sgl_kernel_wrapper_fp8(sgl_build, layout, use_out, descales):
    drive("sgl_kernel", _vary(layout, False, drop=("alibi_slopes", "sinks"), descales=descales), False, use_out)


@settings(max_examples=40, derandomize=True)
@given(
    layout=layouts(page_sizes=(16, 64), head_dims=(64, 128), dtypes=FP16_BF16, max_ctx=160, always_fp8=True),
    use_out=st.booleans(),
    descales=st.sampled_from(DESCALES[1:]),
)
def test_vllm_xpu_kernels_wrapper_fp8(layout, use_out, descales):
    drive(
        "vllm_xpu_kernels",
        _vary(layout, False, drop=("alibi_slopes", "softcap", "sinks"), descales=descales),
        False,
        use_out,
    )


@settings(max_examples=40, suppress_health_check=FIXTURES_OK, derandomize=True)
@given(
    layout=layouts(
        page_sizes=(16, 64, 128),
        head_dims=(64, 128, 192, 256, 512),
        dtypes=FP16_BF16,
        max_ctx=160,
        gqa=(1, 2, 4),
        allow_fp8=False,
    ),
    use_out=st.booleans(),
)
def test_ipex_wrapper(ipex_on, layout, use_out):
    from intel_extension_for_pytorch.llm.modules import HOST_SYNCS

    drive("ipex", _vary(layout, False, drop=("alibi_slopes", "sinks")), False, use_out)
    assert not HOST_SYNCS, HOST_SYNCS


def test_every_wrapper_served_layouts():
    """The randomized tests above must have exercised each wrapper, not refused everything."""
    for name, (served, refused, fp8) in SERVED.items():
        print(f"{name}: {served} layouts served ({fp8} with an FP8 cache), {refused} refused")
        assert served >= 10, f"{name} served only {served} layouts"
        assert fp8 >= (10 if name != "ipex" else 0), f"{name} served only {fp8} FP8 layouts"


# ---- the fakes model what the vendors get wrong (so a wrapper that does not avoid it fails) ----
def _case(page=64, d=64, dtype=torch.bfloat16, q_lens=(1, 1), k_lens=(40, 70), seed=0):
    from vllm_xpu_attn.kernels.providers.xpu_libs.common import tiny_paged_case

    return tiny_paged_case("cpu", page, list(q_lens), list(k_lens), head_dim=d, dtype=dtype, seed=seed)


def _naive(case, **kw):
    return naive_paged_attention(*case[:6], **kw)


def test_fakes_misread_column_sliced_tables_and_fp32_sinks():
    import sgl_kernel.flash_attn as sgl
    import vllm_xpu_kernels.flash_attn_interface as vxk

    q, kc, vc, table, lens, cu, mq = _case()
    wide = torch.zeros(table.shape[0], table.shape[1] + 3, dtype=torch.int32)
    wide[:, 1:-2] = table
    sliced = wide[:, 1:-2]  # the same values, rows 3 entries apart in memory
    want, _ = _naive((q, kc, vc, table, lens, cu), causal=True)
    o = sgl.flash_attn_with_kvcache(
        q, kc, vc, cache_seqlens=lens, page_table=sliced, cu_seqlens_q=cu, max_seqlen_q=1, causal=True
    )
    assert (o.double() - want).abs().max() > 0.1, "sgl-kernel reads rows at index * width (mainloop.hpp:278)"
    o = vxk.flash_attn_varlen_func(q, kc, vc, 1, cu, 128, seqused_k=lens, causal=True, block_table=sliced)
    assert (o.double() - want).abs().max() > 0.1, "vllm-xpu-kernels reads rows at index * width (fmha_xe2.cpp:113)"
    q, kc, vc, table, lens, cu, mq = _case(k_lens=(3, 5))  # few keys: the sink weighs a lot
    sinks = torch.tensor([4.0, -3.0])
    want, _ = _naive((q, kc, vc, table, lens, cu), causal=True, sinks=sinks)
    o = vxk.flash_attn_varlen_func(
        q, kc, vc, 1, cu, 128, seqused_k=lens, causal=True, block_table=table, s_aux=sinks
    )  # fp32 sinks read through a bf16 pointer
    assert (o.double() - want).abs().max() > 0.05, "ElementSink = TensorQ::element_type"


def test_old_sgl_build_ignores_softcap_and_leaves_lse_unwritten(monkeypatch):
    import sgl_kernel.flash_attn as sgl

    monkeypatch.setattr(sgl, "BUILD", "9cf16bf9")
    q, kc, vc, table, lens, cu, mq = _case()
    want, want_lse = _naive((q, kc, vc, table, lens, cu), causal=True, softcap=2.0)
    o, lse, *_ = sgl.flash_attn_with_kvcache(
        q,
        kc,
        vc,
        cache_seqlens=lens,
        page_table=table,
        cu_seqlens_q=cu,
        max_seqlen_q=1,
        causal=True,
        softcap=2.0,
        return_softmax_lse=True,
    )
    assert (o.double() - want).abs().max() > 0.05  # flash_attention.cpp:559: stored, never applied
    assert (lse.double() - want_lse).abs().max() > 1.0  # flash_attention.cpp:494: torch::empty, never written


def test_vendor_checks_raise_with_citations():
    import sgl_kernel.flash_attn as sgl
    import vllm_xpu_kernels.flash_attn_interface as vxk
    from _common import VendorError

    q, kc, vc, table, lens, cu, mq = _case(dtype=torch.float16)
    k8, v8 = kc.to(torch.float8_e4m3fn), vc.to(torch.float8_e4m3fn)
    one = torch.ones(1)
    with pytest.raises(VendorError, match="bf16 query"):  # fp16 q + FP8 KV
        sgl.flash_attn_with_kvcache(
            q,
            k8,
            v8,
            cache_seqlens=lens,
            page_table=table,
            cu_seqlens_q=cu,
            max_seqlen_q=1,
            k_descale=one,
            v_descale=one,
        )
    with pytest.raises(VendorError, match="k_descale and v_descale"):
        sgl.flash_attn_with_kvcache(
            q.bfloat16(), k8, v8, cache_seqlens=lens, page_table=table, cu_seqlens_q=cu, max_seqlen_q=1
        )
    with pytest.raises(NotImplementedError, match="both KV cache descaled"):
        vxk.flash_attn_varlen_func(q, k8, v8, 1, cu, 128, seqused_k=lens, block_table=table, k_descale=one)
    scales = torch.ones(4)
    with pytest.raises(AssertionError, match="single scalar"):  # a view into a larger scales tensor
        vxk.flash_attn_varlen_func(
            q, k8, v8, 1, cu, 128, seqused_k=lens, block_table=table, k_descale=scales[1:2], v_descale=scales[2:3]
        )
    q, kc, vc, table, lens, cu, mq = _case(page=16)
    with pytest.raises(VendorError, match="page size for decode"):
        sgl.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, page_table=table, cu_seqlens_q=cu, max_seqlen_q=1)


def test_not_compiled_configuration_is_refused_not_fallen_back():
    """vllm-xpu-kernels drops an uncompiled configuration into a host-syncing PyTorch path with only
    a warning; the wrapper refuses it at selection and replaces that fallback by an error."""
    import vllm_xpu_kernels.flash_attn_interface as vxk

    prov = get_provider("vllm_xpu_kernels")
    r = KernelRequest(
        device_type="xpu",
        dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        head_dim=192,
        num_q_heads=8,
        num_kv_heads=8,
        page_size=16,
        phase="decode",
    )
    assert any("not compiled" in x for x in prov.not_supported_reasons(r))
    q, kc, vc, table, lens, cu, mq = _case(page=16, d=192, q_lens=(1,), k_lens=(20,))
    with pytest.raises(RuntimeError, match="refuses"):  # after unavailable_reason() installed the refusal
        vxk.flash_attn_varlen_func(q, kc, vc, 1, cu, 32, seqused_k=lens, block_table=table)


def test_unknown_vllm_xpu_kernels_version_is_refused(monkeypatch):
    from vllm_xpu_attn.kernels.providers.xpu_libs import vllm_xpu_kernels as w

    monkeypatch.setattr(w, "dist_version", lambda dist: "0.2.0")
    why = get_provider("vllm_xpu_kernels").unavailable_reason()
    assert why and "0.2.0" in why and w.ENV_TRUST in why
    monkeypatch.setenv(w.ENV_TRUST, "1")
    assert get_provider("vllm_xpu_kernels").unavailable_reason() is None


def test_sgl_probes_follow_the_build(sgl_build):
    caps = get_provider("sgl_kernel").capabilities()
    if sgl_build == "9cf16bf9":
        assert caps["softcap"] and "PR #491" in caps["softcap"]
        assert caps["lse"] and caps["page_size_1"]
    else:
        assert caps == {"softcap": None, "lse": None, "page_size_1": None}


def test_vendor_kv_writes_match_naive_scatter(ipex_on):
    g = torch.Generator().manual_seed(0)
    for name in VENDORS:
        kc = torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16)
        vc = torch.zeros_like(kc)
        k = torch.randn(7, 2, 64, generator=g).to(torch.bfloat16)
        v = torch.randn(7, 2, 64, generator=g).to(torch.bfloat16)
        slots = torch.tensor([0, 3, 17, -1, 40, 63, 5])
        get_provider(name).write_kv(k, v, kc, vc, slots)
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                assert torch.equal(kc[s // 16, s % 16], k[i]) and torch.equal(vc[s // 16, s % 16], v[i]), name
        assert int((kc != 0).any(-1).any(-1).sum()) == 6, name


def test_sgl_merge_state_transposes_lse():
    g = torch.Generator().manual_seed(1)
    o_a, o_b = torch.randn(5, 3, 8, generator=g), torch.randn(5, 3, 8, generator=g)
    l_a, l_b = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    got_o, got_l = get_provider("sgl_kernel").merge_state(o_a, l_a, o_b, l_b)
    want_l = torch.logaddexp(l_a, l_b)
    want_o = o_a * torch.exp(l_a - want_l).T[..., None] + o_b * torch.exp(l_b - want_l).T[..., None]
    assert torch.allclose(got_o, want_o, atol=1e-6) and torch.allclose(got_l, want_l, atol=1e-6)
    sinks = torch.randn(3, generator=g)  # the sink joins the denominator once, with no value
    got_o, got_l = get_provider("sgl_kernel").merge_state(o_a, l_a, o_b, l_b, sinks=sinks)
    want_l = torch.logaddexp(torch.logaddexp(l_a, l_b), sinks[:, None])
    want_o = o_a * torch.exp(l_a - want_l).T[..., None] + o_b * torch.exp(l_b - want_l).T[..., None]
    assert torch.allclose(got_o, want_o, atol=1e-6) and torch.allclose(got_l, want_l, atol=1e-6)


# ---- selection: hand-written expectations from the vendors' sources, not from the registry ----
def req(**kw):
    base = dict(
        device_type="xpu",
        dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        head_dim=128,
        num_q_heads=32,
        num_kv_heads=8,
        page_size=64,
        phase="decode",
    )
    base.update(kw)
    return KernelRequest(**base)


GRID = [  # (request, on sgl-kernel main 9cf16bf9, on a build with PRs #330/#454/#487/#491)
    (dict(), "sgl_kernel", "sgl_kernel"),
    (dict(page_size=128, phase="prefill"), "sgl_kernel", "sgl_kernel"),
    (dict(page_size=16), "vllm_xpu_kernels", "vllm_xpu_kernels"),  # sgl decode: 64/128; vxk h128 tile 16 fff
    (dict(page_size=48), "vllm_xpu_kernels", "vllm_xpu_kernels"),  # block 48 -> tile 16
    (dict(page_size=1), "triton", "sgl_kernel"),  # page size 1: PR #454 (probed)
    (dict(has_sinks=True), "vllm_xpu_kernels", "vllm_xpu_kernels"),  # sgl: sinks at D=64 only; vxk q8 h128 p64 fft
    (dict(has_sinks=True, head_dim=64), "sgl_kernel", "sgl_kernel"),
    (dict(has_sinks=True, head_dim=64, kv_dtype=torch.float8_e4m3fn), "vllm_xpu_kernels", "vllm_xpu_kernels"),
    (dict(softcap=30.0), "ipex", "sgl_kernel"),  # softcap applied from PR #491 (probed); vxk never applies it
    (dict(softcap=30.0, page_size=16), "triton", "triton"),
    (dict(return_lse=True), "triton", "sgl_kernel"),  # LSE written from PRs #330/#487 (probed)
    (dict(return_lse=True, has_sinks=True, head_dim=64), "triton", "triton"),  # refused with sinks (PR #487)
    (dict(has_alibi=True), "triton", "triton"),  # no vendor applies ALiBi on these paths
    (dict(dtype=torch.float32, kv_dtype=torch.float32), "triton", "triton"),  # no vendor fp32
    (dict(kv_dtype=torch.float8_e4m3fn), "sgl_kernel", "sgl_kernel"),
    (dict(kv_dtype=torch.float8_e4m3fn, dtype=torch.float16), "vllm_xpu_kernels", "vllm_xpu_kernels"),  # sgl: bf16 q
    (dict(kv_dtype=torch.float8_e5m2, page_size=32), "vllm_xpu_kernels", "vllm_xpu_kernels"),
    (dict(head_dim=80), "triton", "triton"),  # no exact vendor bucket
    (dict(head_dim=192, page_size=16), "triton", "triton"),  # vxk: q8 h192 p16 compiled causal-only
    (dict(num_q_heads=64, num_kv_heads=2), "vllm_xpu_kernels", "vllm_xpu_kernels"),  # GQA 32 > 16; vxk qgroup 16
    (dict(window=(127, 0), head_dim=192), "sgl_kernel", "sgl_kernel"),
    (dict(window=(127, 0), head_dim=192, page_size=32), "triton", "triton"),  # vxk: q8 h192 p32 causal-only
    (dict(head_dim=512, dtype=torch.float32, kv_dtype=torch.float32), "reference", "reference"),  # triton <= 256
    (dict(head_dim=512), "sgl_kernel", "sgl_kernel"),
]


@pytest.mark.parametrize("case", range(len(GRID)), ids=[str(g[0]) for g in GRID])
def test_selection_grid(sgl_build, ipex_on, case):
    over, on_main, on_later = GRID[case]
    expected = on_main if sgl_build == "9cf16bf9" else on_later
    r = req(**over)
    chosen = select_provider(r)
    rows = reg.explain(r)
    assert chosen.name == expected, rows
    names = [n for n, _ in rows]
    for name, reasons in rows[: names.index(expected)]:
        assert reasons, f"{name} was skipped without a reason"
    assert dict(rows)["sgl_kernel_mla"] == [
        "not an MLA layer (flash_mla_decode runs absorbed MLA over a latent cache only)"
    ]  # the library's MLA op never takes a plain layer


def test_impossible_xpu_configuration_lists_each_provider(ipex_on):
    with pytest.raises(NoProviderError) as e:
        select_provider(req(dtype=torch.float64, kv_dtype=torch.float64))
    msg = str(e.value)
    for name in ("sgl_kernel", "sgl_kernel_mla", "vllm_xpu_kernels", "ipex", "triton", "reference"):
        assert f"{name}: " in msg
    assert "dtype float64" in msg


def test_missing_library_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != FAKES])
    for m in [m for m in sys.modules if m.split(".")[0] in ("sgl_kernel",)]:
        monkeypatch.delitem(sys.modules, m)
    _reset_instances()
    reasons = get_provider("sgl_kernel").not_supported_reasons(req())
    assert any("sgl_kernel.flash_attn not importable" in r for r in reasons)
    _reset_instances()


# ---- the one-call API honours each provider's declared capabilities (probe results included) ----------
def _gate_case(name, **over):
    """(provider, args, kwargs) of a call each vendor build serves, with ``over`` applied."""
    d = 64
    q, kc, vc, table, lens, cu, mq = _case(d=d)
    kw = dict(causal=True)
    kw.update({k: torch.ones(q.shape[1]) if v == "per_head" else v for k, v in over.items()})
    return get_provider(name), (q, kc, vc, table, lens, cu, mq), kw


SGL_REFUSALS = {  # build -> capability -> (call change, the provider's reason)
    "9cf16bf9": {
        "softcap": (dict(softcap=30.0), "does not apply softcap"),
        "lse": (dict(return_softmax_lse=True), "does not return a correct LSE"),
        "alibi": (dict(alibi_slopes="per_head"), "no alibi support"),
    },
    "pr491": {
        "alibi": (dict(alibi_slopes="per_head"), "no alibi support"),
        "lse_with_sinks": (dict(return_softmax_lse=True, sinks="per_head"), "no LSE with sinks"),
    },
}


def _sgl_on(monkeypatch, build):
    import sgl_kernel.flash_attn as fake

    monkeypatch.setattr(fake, "BUILD", build)
    _reset_instances()
    get_provider("sgl_kernel").probe_device = "cpu"


@pytest.mark.parametrize("build,cap", [(b, c) for b, caps in SGL_REFUSALS.items() for c in caps])
def test_one_call_refuses_what_the_sgl_build_cannot_do(monkeypatch, build, cap):
    """A direct call reaches the vendor only if the provider's declarations and its probes of the installed
    build allow it: softcap on a build that ignores it, LSE on one that never writes it, etc. are refused with
    the provider's own reason, and the vendor is never called (no silently wrong values)."""
    from _common import CALLS

    _sgl_on(monkeypatch, build)
    change, why = SGL_REFUSALS[build][cap]
    prov, args, kw = _gate_case("sgl_kernel", **change)
    prov.capabilities()  # the build's probes call the vendor once; run them before counting the call's own
    n = len(CALLS)
    with pytest.raises(ValueError, match=f"provider 'sgl_kernel' cannot run this call: .*{why}"):
        prov.flash_attn_with_kvcache(*args, **kw)
    assert len(CALLS) == n, "a refused call reached the vendor"


def test_one_call_serves_what_the_newer_sgl_build_can(monkeypatch):
    """The same calls on the build that applies softcap and writes the LSE run and match the oracle."""
    _sgl_on(monkeypatch, "pr491")
    prov, args, kw = _gate_case("sgl_kernel", softcap=30.0, return_softmax_lse=True)
    out, lse = prov.flash_attn_with_kvcache(*args, **kw)
    want, want_lse = _naive(args, causal=True, softcap=30.0)
    assert_close_to(out.float(), want, torch.bfloat16)
    assert_lse_close(lse, want_lse)


@pytest.mark.parametrize(
    "name,change,why",
    [
        ("vllm_xpu_kernels", dict(softcap=30.0), "no softcap support"),
        ("vllm_xpu_kernels", dict(alibi_slopes="per_head"), "no alibi support"),
        ("vllm_xpu_kernels", dict(return_softmax_lse=True), "no lse support"),
        ("ipex", dict(sinks="per_head"), "no sinks support"),
        ("ipex", dict(return_softmax_lse=True), "no lse support"),
        ("ipex", dict(k_cache="fp8"), "KV dtype float8_e4m3fn not in"),
    ],
)
def test_one_call_refuses_undeclared_capabilities(ipex_on, name, change, why):
    from _common import CALLS

    if change.get("k_cache") == "fp8":
        prov, args, kw = _gate_case(name)
        args = (args[0], args[1].to(torch.float8_e4m3fn), args[2].to(torch.float8_e4m3fn), *args[3:])
    else:
        prov, args, kw = _gate_case(name, **change)
    n = len(CALLS)
    with pytest.raises(ValueError, match=f"provider '{name}' cannot run this call: .*{why}"):
        prov.flash_attn_with_kvcache(*args, **kw)
    assert len(CALLS) == n, "a refused call reached the vendor"
