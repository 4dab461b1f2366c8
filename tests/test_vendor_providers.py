"""Vendor providers against contract fakes (tests/fakes/), and provider selection on XPU.

No Intel GPU here: the fakes have each vendor's exact signature, assert its requirements and
compute with the reference. Outputs must equal the reference on the same inputs.
"""

import os
import sys

import pytest
import torch
from hypothesis import given, settings

from layouts import assert_close_to, assert_lse_close, layouts
from vllm_xpu_attn.kernels import KernelRequest, NoProviderError, get_provider, select_provider
from vllm_xpu_attn.kernels import registry as reg

FAKES = os.path.join(os.path.dirname(__file__), "fakes")
VENDOR_MODULES = ("sgl_kernel", "vllm_xpu_kernels", "intel_extension_for_pytorch", "_common")


@pytest.fixture(scope="module", autouse=True)
def fakes():
    sys.path.insert(0, FAKES)
    os.environ["VLLM_XPU_ATTN_ENABLE_IPEX"] = "1"
    for n in ("sgl_kernel", "vllm_xpu_kernels", "ipex"):
        reg._instances.pop(n, None)
    yield
    sys.path.remove(FAKES)
    os.environ.pop("VLLM_XPU_ATTN_ENABLE_IPEX", None)
    for m in [m for m in sys.modules if m.split(".")[0] in VENDOR_MODULES]:
        del sys.modules[m]
    for n in ("sgl_kernel", "vllm_xpu_kernels", "ipex"):
        reg._instances.pop(n, None)


def _check(provider_name, layout, want_lse=True):
    prov, ref = get_provider(provider_name), get_provider("reference")
    from _common import CALLS

    n_calls = len(CALLS)
    res = prov.flash_attn_with_kvcache(*layout.args(), **layout.kwargs, return_softmax_lse=want_lse)
    want = ref.flash_attn_with_kvcache(*layout.args(), **layout.kwargs, return_softmax_lse=True)
    out = res[0] if want_lse else res
    assert_close_to(out.float(), want[0].double(), layout.q.dtype)
    if want_lse:
        assert_lse_close(res[1], want[1].double())
    assert len(CALLS) > n_calls, "the vendor function was not called"


@settings(max_examples=40)
@given(layout=layouts(page_sizes=(64, 128), head_dims=(64,), dtypes=[torch.float16, torch.bfloat16], max_ctx=200))
def test_sgl_kernel_wrapper(layout):
    kw = layout.kwargs
    kw["alibi_slopes"] = None  # not in sgl-kernel's API: the registry never routes ALiBi here
    if kw["k_descale"] is not None and kw["k_descale"].numel() != 1:
        with pytest.raises(ValueError, match="per-tensor FP8 scale"):
            get_provider("sgl_kernel").flash_attn_with_kvcache(*layout.args(), **kw)
        return
    _check("sgl_kernel", layout)


@settings(max_examples=40)
@given(layout=layouts(page_sizes=(16, 32, 64), head_dims=(64,), dtypes=[torch.float16, torch.bfloat16], max_ctx=200))
def test_vllm_xpu_kernels_wrapper(layout):
    kw = layout.kwargs
    kw["alibi_slopes"], kw["softcap"] = None, 0.0  # declared unsupported
    if kw["k_descale"] is not None and kw["k_descale"].numel() != 1:
        return  # per-head descales are refused (tested in the sgl test above through the shared helper)
    _check("vllm_xpu_kernels", layout)


@settings(max_examples=30)
@given(layout=layouts(page_sizes=(16, 64), head_dims=(64,), dtypes=[torch.float16, torch.bfloat16], max_ctx=150,
                      allow_fp8=False))
def test_ipex_wrapper(layout):
    kw = layout.kwargs
    kw.update(window_size=(-1, -1), softcap=0.0, sinks=None)  # not in IPEX's API
    _check("ipex", layout, want_lse=False)


def test_vendor_kv_writes_match_reference():
    g = torch.Generator().manual_seed(0)
    for name in ("sgl_kernel", "vllm_xpu_kernels", "ipex"):
        kc = torch.zeros(4, 16, 2, 64, dtype=torch.bfloat16)
        kr = kc.clone()
        k = torch.randn(7, 2, 64, generator=g).to(torch.bfloat16)
        slots = torch.tensor([0, 3, 17, -1, 40, 63, 5])
        get_provider(name).write_kv(k, k, kc, kc.clone(), slots)
        get_provider("reference").write_kv(k, k, kr, kr.clone(), slots)
        assert torch.equal(kc, kr), name


def test_sgl_merge_state_transposes_lse():
    g = torch.Generator().manual_seed(1)
    o_a, o_b = torch.randn(5, 3, 8, generator=g), torch.randn(5, 3, 8, generator=g)
    l_a, l_b = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    got = get_provider("sgl_kernel").merge_state(o_a, l_a, o_b, l_b)
    want = get_provider("reference").merge_state(o_a, l_a, o_b, l_b)
    assert torch.allclose(got[0], want[0]) and torch.allclose(got[1], want[1])


def req(**kw):
    base = dict(device_type="xpu", dtype=torch.bfloat16, kv_dtype=torch.bfloat16, head_dim=128, num_q_heads=32,
                num_kv_heads=8, page_size=64, phase="decode")
    base.update(kw)
    return KernelRequest(**base)


# Hand-written expectations (from each library's documented limits), not derived from the registry.
GRID = [
    (dict(), "sgl_kernel"),
    (dict(page_size=128, phase="prefill"), "sgl_kernel"),
    (dict(page_size=16), "vllm_xpu_kernels"),  # sgl-kernel XPU decode needs 64/128
    (dict(page_size=48), "vllm_xpu_kernels"),  # any multiple of 16
    (dict(sinks=True), "vllm_xpu_kernels"),  # sgl-kernel: sinks only at head dim 64
    (dict(sinks=True, head_dim=64), "sgl_kernel"),
    (dict(softcap=True, page_size=16), "triton"),  # vllm-xpu-kernels declared without softcap
    (dict(softcap=True), "sgl_kernel"),
    (dict(alibi=True), "ipex"),  # only IPEX (opt-in) has ALiBi among the vendors
    (dict(alibi=True, window=(16, 0)), "triton"),
    (dict(dtype=torch.float32, kv_dtype=torch.float32), "triton"),  # no vendor fp32
    (dict(kv_dtype=torch.float8_e4m3fn), "sgl_kernel"),
    (dict(kv_dtype=torch.float8_e5m2, page_size=32), "vllm_xpu_kernels"),
    (dict(page_size=8), "ipex"),  # IPEX (opted in here) declares no block-size limit
    (dict(page_size=8, softcap=True), "triton"),
    (dict(head_dim=100), "triton"),
    (dict(num_q_heads=64, num_kv_heads=2), "vllm_xpu_kernels"),  # GQA group 32 > 16
    (dict(head_dim=512, dtype=torch.float32, kv_dtype=torch.float32), "reference"),  # triton max 256
    (dict(head_dim=512), "sgl_kernel"),
]


@pytest.mark.parametrize("over,expected", GRID, ids=[str(g[0]) for g in GRID])
def test_selection_grid(over, expected):
    r = req(**over)
    chosen = select_provider(r)
    assert chosen.name == expected
    rows = reg.explain(r)
    names = [n for n, _ in rows]
    for name, reasons in rows[: names.index(expected)]:
        assert reasons, f"{name} was skipped without a reason"
        assert all(isinstance(x, str) and x for x in reasons)


def test_impossible_xpu_configuration_lists_each_provider():
    with pytest.raises(NoProviderError) as e:
        select_provider(req(dtype=torch.float64, kv_dtype=torch.float64))
    msg = str(e.value)
    for name in ("sgl_kernel", "vllm_xpu_kernels", "ipex", "triton", "reference"):
        assert f"{name}: " in msg
    assert "dtype float64" in msg


def test_missing_library_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != FAKES])
    for m in [m for m in sys.modules if m.split(".")[0] in ("sgl_kernel",)]:
        monkeypatch.delitem(sys.modules, m)
    reasons = get_provider("sgl_kernel").not_supported_reasons(req())
    assert any("sgl_kernel.flash_attn not importable" in r for r in reasons)
