"""FP8 KV cache semantics (docs/fp8.md), pinned down:

  stored  q8 = round_to_nearest_even(saturate(x / s))   (per-tensor scale s; NaN stays NaN)
  read    x' = float(q8) * s, for every key and value a layer attends to, the current chunk's too
  math    fp32

so a sequence's output does not depend on how its prefill was chunked. vLLM 0.32's CPU backend
truncates toward zero instead (cpu_attn_fp8.hpp float_to_fp8e4m3_scalar), so bit parity with it
under FP8 is not expected; the oracle here is the naive attention over K/V rounded by the test.
"""

import pytest
import torch
from naive import naive_paged_attention

from vllm_xpu_attn import core
from vllm_xpu_attn.kernels.api import get_provider

REF = get_provider("reference")
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def _store(x: torch.Tensor, dtype, scale: float) -> torch.Tensor:
    """Write x through the provider into a one-page FP8 cache and read the stored values back."""
    n = x.numel()
    cache = torch.zeros(1, n, 1, 1, dtype=dtype)
    core.write_kv(
        REF,
        x.reshape(n, 1, 1),
        x.reshape(n, 1, 1),
        cache,
        cache.clone(),
        torch.arange(n),
        torch.tensor(scale),
        torch.tensor(scale),
    )
    return cache.reshape(-1).float()


def test_round_to_nearest_even_saturating_nan_preserving():
    # e4m3 around 1.0 has steps of 0.125: ties go to the even mantissa; truncation would give 1.125 twice
    got = _store(torch.tensor([1.0625, 1.1875, 1.3125, 0.001, -0.001, 1000.0, -1e30, float("inf")]), E4M3, 1.0)
    assert got[:5].tolist() == [1.0, 1.25, 1.25, 2**-9, -(2**-9)]  # 0.001 rounds up to the least subnormal
    assert got[5:].tolist() == [448.0, -448.0, 448.0]  # saturated to the finite range, never NaN
    assert torch.isnan(_store(torch.tensor([float("nan")]), E4M3, 1.0)).all()
    # e5m2 (steps of 0.25 at 1.0): ties to even, saturation at 57344 instead of inf
    assert _store(torch.tensor([1.125, 1.375, 1e9]), E5M2, 1.0).tolist() == [1.0, 1.5, 57344.0]
    # the scale divides before rounding: 0.37 * 1.25 is stored as 1.25
    assert _store(torch.tensor([0.37 * 1.25]), E4M3, 0.37).tolist() == [1.25]


def _rounded(x: torch.Tensor, dtype, scale: float) -> torch.Tensor:
    """The test's own dequant(quant(x)): clamp, cast (round-to-nearest-even), times the scale."""
    fmax = torch.finfo(dtype).max
    return (x.float() / scale).clamp(-fmax, fmax).to(dtype).float() * scale


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("chunks", [[40], [16, 24], [1] * 40], ids=["one", "two", "token-by-token"])
def test_prefill_reads_the_rounded_cache_whatever_the_chunking(dtype, chunks):
    """Every chunk writes its K/V first and attends over the cache: the output of each query equals
    naive attention over K/V rounded as stored, for one chunk, two, or a token at a time."""
    g = torch.Generator().manual_seed(3)
    hq, hkv, d, page, n = 4, 2, 16, 8, sum(chunks)
    q = torch.randn(n, hq, d, generator=g)
    k, v = torch.randn(n, hkv, d, generator=g) * 3, torch.randn(n, hkv, d, generator=g) * 3
    s = 0.37
    kc = torch.zeros(8, page, hkv, d, dtype=dtype)
    vc = torch.zeros_like(kc)
    pages = torch.tensor([[5, 2, 7, 0, 3]], dtype=torch.int32)
    spec = core.LayerSpec(hq, hkv, d, d**-0.5, dtype=torch.float32, kv_dtype=dtype)
    runner = core.LayerRunner(spec, "cpu", page)
    ds = torch.tensor([s])
    runner.bind(k_descale=ds, v_descale=ds)
    out, at = torch.empty(n, hq, d), 0
    for c in chunks:
        pos = torch.arange(at, at + c)
        slots = pages[0, pos // page].long() * page + pos % page
        runner.write_kv(k[at : at + c], v[at : at + c], kc, vc, slots, torch.tensor(s), torch.tensor(s))
        plan = core.plan_step(
            core.StepInputs(
                core.Mode.EXTEND,
                torch.tensor([at + c], dtype=torch.int32),
                at + c,
                c,
                page,
                page_table=pages,
                query_lens=torch.tensor([c], dtype=torch.int32),
                max_seqlen_q=c,
            )
        )
        out[at : at + c] = runner.forward(plan, q[at : at + c], kc, vc)
        at += c
    # oracle: a plain (unquantised) cache holding the rounded values, read by the naive attention
    kr, vr = torch.zeros(8, page, hkv, d), torch.zeros(8, page, hkv, d)
    pos = torch.arange(n)
    flat = pages[0, pos // page].long() * page + pos % page
    kr.view(-1, hkv, d)[flat] = _rounded(k, dtype, s)
    vr.view(-1, hkv, d)[flat] = _rounded(v, dtype, s)
    want, _ = naive_paged_attention(
        q,
        kr,
        vr,
        pages,
        torch.tensor([n], dtype=torch.int32),
        torch.tensor([0, n], dtype=torch.int32),
        causal=True,
        scale=d**-0.5,
    )
    torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
