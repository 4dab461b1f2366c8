"""Head-major (HND) cache pages, vLLM's CPU allocation: every page of a KV head one contiguous [page, D] block,
K and V the two halves of one (page, head) region. The CPU providers read such caches in place (through
[P, page, Hkv, D] views with HND strides) and the torch write stores into them; each checked against the naive
oracle (tests/support/naive.py) on the same values laid out NHD."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import assert_close_to, layouts
from naive import naive_paged_attention

from vllm_xpu_attn.kernels.api import KernelRequest, KVLayout, Phase, get_provider, write_kv_torch


def hnd_pair(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same K/V values in one head-major buffer [P, Hkv, 2 * page, D] (K rows first, then V: vLLM's CPU
    cache), returned as [P, page, Hkv, D] views."""
    p, page, h, d = k_cache.shape
    buf = torch.full((p, h, 2 * page, d), float("nan")).to(k_cache.dtype)
    buf[:, :, :page] = k_cache.transpose(1, 2)
    buf[:, :, page:] = v_cache.transpose(1, 2)
    return buf[:, :, :page].transpose(1, 2), buf[:, :, page:].transpose(1, 2)


@pytest.mark.parametrize("name", ["torch_sdpa", "reference"])
@settings(max_examples=60, deadline=None)
@given(layout=layouts(page_sizes=(16, 32, 128), max_batch=5), data=st.data())
def test_providers_read_head_major_pages(name, layout, data):
    """Output over HND views == the naive oracle over the NHD originals (decode, extend, prefill, GQA, FP8,
    windows, softcap, sinks, ALiBi)."""
    prov = get_provider(name)
    kc, vc = hnd_pair(layout.k_cache, layout.v_cache)
    assert kc.stride(1) == layout.k_cache.shape[-1]  # really head-major: a page's rows are adjacent
    args = list(layout.args())
    args[1], args[2] = kc, vc
    out = prov.flash_attn_with_kvcache(*args, **layout.kwargs)
    ref, _ = naive_paged_attention(*layout.args()[:6], **layout.naive_kwargs())
    assert_close_to(out, ref, layout.q.dtype, logit_bound=layout.logit_bound())


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("skip", [False, True])
def test_torch_write_into_head_major_pages(kv_dtype, skip):
    """write_kv_torch into HND views stores exactly what it stores into NHD caches (slots < 0 skipped), and
    touches nothing else."""
    g = torch.Generator().manual_seed(3)
    pages, page, h, d, t = 5, 16, 3, 32, 23
    model = torch.float32 if kv_dtype == torch.float8_e4m3fn else kv_dtype
    k, v = torch.randn(t, h, d, generator=g).to(model), torch.randn(t, h, d, generator=g).to(model)
    slots = torch.randperm(pages * page, generator=g)[:t]
    if skip:
        slots[::4] = -1
    nk = torch.zeros(pages, page, h, d).to(kv_dtype)
    nv = torch.zeros(pages, page, h, d).to(kv_dtype)
    hk, hv = hnd_pair(nk, nv)
    scale = torch.tensor([0.5]) if kv_dtype == torch.float8_e4m3fn else None
    write_kv_torch(k, v, nk, nv, slots, scale, scale)
    write_kv_torch(k, v, hk, hv, slots, scale, scale)
    keep = slots >= 0
    flat = nk.view(-1, h, d).float()
    assert bool((flat[slots[keep]] != 0).any())  # the NHD write did write
    assert torch.equal(hk.float(), nk.float()) and torch.equal(hv.float(), nv.float())


def test_layout_is_declared_and_refused_by_name():
    """A provider that reads NHD pages only refuses an HND cache at set-up, naming the layout."""
    req = KernelRequest(
        device_type="cpu",
        dtype=torch.float32,
        kv_dtype=torch.float32,
        head_dim=64,
        num_q_heads=4,
        num_kv_heads=2,
        page_size=32,
        phase=Phase.DECODE,
        kv_layout=KVLayout.HND,
    )
    assert get_provider("torch_sdpa").not_supported_reasons(req) == []
    assert "KV cache layout HND not in ['NHD']" in get_provider("triton").not_supported_reasons(req)
    assert "layout=HND" in req.describe()
