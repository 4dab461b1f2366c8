"""The vllm_cpu provider (vLLM's CPU_ATTN kernels: cpu_attn_reshape_and_cache + cpu_attention_with_kv_cache over
head-major pages) against the naive oracle (tests/support/naive.py, fp64, shares no code with the package or with
vLLM): every token written through the provider's write_kv, then read by its paged call; and what it refuses. Last,
the vLLM impls' KV write (where each impl writes, and KV-sharing layers not at all), read back through this
provider."""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import assert_close_to, layouts
from naive import naive_paged_attention

from vllm_xpu_attn.core import AttentionKind, LayerRunner, LayerSpec
from vllm_xpu_attn.kernels.api import KernelRequest, KVLayout, Phase, get_provider, select_provider

PROV = get_provider("vllm_cpu")
# bf16 rounds P before P @ V inside the op (as vLLM's CPU_ATTN does): a looser bound than the q dtype's output rounding
BF16_ATOL = 3e-2


def _hnd_zeros(pages: int, page: int, hkv: int, d: int, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """One [P, Hkv, 2 * page, D] buffer, K rows then V rows of each (page, head): vLLM's CPU cache, as the
    [P, page, Hkv, D] views the core passes."""
    buf = torch.zeros(pages, hkv, 2 * page, d, dtype=dtype)
    return buf[:, :, :page].transpose(1, 2), buf[:, :, page:].transpose(1, 2)


def _write_all(layout, kc, vc) -> None:
    """Every visible key of the layout through the provider's write (one call, sequences' slots shuffled)."""
    page = layout.k_cache.shape[1]
    slots = []
    for b, n in enumerate(layout.cache_seqlens.tolist()):
        for t in range(n):
            slots.append(int(layout.page_table[b, t // page]) * page + t % page)
    if not slots:
        return
    s = torch.tensor(slots, dtype=torch.int64)[torch.randperm(len(slots), generator=torch.Generator().manual_seed(0))]
    k = layout.k_cache.reshape(-1, *layout.k_cache.shape[2:])[s]
    v = layout.v_cache.reshape(-1, *layout.v_cache.shape[2:])[s]
    PROV.write_kv(k, v, kc, vc, s)


@settings(max_examples=60, deadline=None)
@given(
    layout=layouts(
        page_sizes=(32, 64, 128),
        head_dims=(32, 64),
        dtypes=[torch.float32, torch.bfloat16],
        allow_fp8=False,
        allow_features=False,
        max_batch=5,
        max_ctx=300,
        gqa=(1, 3, 4),
        max_kv_heads=3,
    ),
    data=st.data(),
)
def test_vllm_cpu_matches_naive(layout, data):
    """Decode, extend, prefill and empty rows in one call; GQA; pages 32-128; fp32 / bf16; with a sliding window,
    softcap, sinks and ALiBi drawn independently."""
    kw = dict(layout.kwargs)
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 1000)))
    hq = layout.q.shape[1]
    if data.draw(st.booleans()):
        kw["window_size"] = (data.draw(st.integers(0, 300)), 0)
    if data.draw(st.booleans()):
        kw["softcap"] = data.draw(st.floats(2.0, 30.0))
    if data.draw(st.booleans()):
        kw["sinks"] = torch.randn(hq, generator=g) * 2
    if data.draw(st.booleans()):
        kw["alibi_slopes"] = torch.rand(hq, generator=g) * 0.3
    layout.kwargs = kw
    p, page, hkv, d = layout.k_cache.shape
    kc, vc = _hnd_zeros(p, page, hkv, d, layout.k_cache.dtype)
    _write_all(layout, kc, vc)
    args = list(layout.args())
    args[1], args[2] = kc, vc
    out = PROV.flash_attn_with_kvcache(*args, **kw)
    ref, _ = naive_paged_attention(*layout.args()[:6], **layout.naive_kwargs())
    if layout.q.dtype == torch.bfloat16:
        err = (out.double() - ref).abs()
        assert bool((err <= BF16_ATOL * (1 + ref.abs())).all()), float(err.max())
    else:
        assert_close_to(out, ref, layout.q.dtype, logit_bound=layout.logit_bound())


def test_vllm_cpu_write_skips_negative_and_refuses_out_of_range_slots():
    """Slots < 0 write nothing; a slot past the cache is refused naming slot_mapping, before anything is stored."""
    g = torch.Generator().manual_seed(1)
    kc, vc = _hnd_zeros(3, 32, 2, 64, torch.float32)
    k, v = torch.randn(4, 2, 64, generator=g), torch.randn(4, 2, 64, generator=g)
    PROV.write_kv(k, v, kc, vc, torch.tensor([5, -1, 40, -1]))
    written = (kc.reshape(-1) != 0).sum()
    assert int(written) == 2 * 2 * 64  # two tokens x two heads
    before = kc.clone()
    with pytest.raises(ValueError, match="slot_mapping"):
        PROV.write_kv(k, v, kc, vc, torch.tensor([1, 2, 3 * 32, 4]))
    assert torch.equal(kc, before)


def _req(**over) -> KernelRequest:
    base = dict(
        device_type="cpu",
        dtype=torch.float32,
        kv_dtype=torch.float32,
        head_dim=64,
        num_q_heads=9,
        num_kv_heads=3,
        page_size=128,
        phase=Phase.DECODE,
        kv_layout=KVLayout.HND,
    )
    return KernelRequest(**{**base, **over})


def test_vllm_cpu_is_chosen_for_head_major_pages_and_refuses_with_reasons():
    assert PROV.unavailable_reason() is None, PROV.unavailable_reason()
    assert select_provider(_req()).name == "vllm_cpu"
    assert select_provider(_req(kv_layout=KVLayout.NHD)).name == "torch_sdpa"  # SGLang / transformers pages
    cases = {
        "KV cache layout NHD": _req(kv_layout=KVLayout.NHD),
        "KV dtype float8_e4m3fn": _req(kv_dtype=torch.float8_e4m3fn),
        "no lse support: the op returns no log-sum-exp": _req(return_lse=True),
        "no non-causal support": _req(causal=False),
        "page size 16 is not a multiple of 32": _req(page_size=16),
        "head dim 48 not in": _req(head_dim=48),
        "no batch-invariant support": _req(batch_invariant=True),
    }
    for words, req in cases.items():
        reasons = "; ".join(PROV.not_supported_reasons(req))
        assert words in reasons, (words, reasons)


def test_a_layer_never_mixes_the_owned_cache_format():
    """A layer whose decode would run vllm_cpu (its own page format) but whose other calls would not is refused
    at construction, naming both; with speculative decoding (LSE for the cascade) every call goes elsewhere."""
    spec = LayerSpec(
        num_q_heads=4,
        num_kv_heads=2,
        head_dim=64,
        scale=0.125,
        dtype=torch.float32,
        kv_dtype=torch.float32,
        kv_layout=KVLayout.HND,
    )
    r = LayerRunner(spec, "cpu", 32)
    assert r.providers_used() == {"prefill": "vllm_cpu", "decode": "vllm_cpu"}
    r = LayerRunner(spec, "cpu", 32, with_spec_decode=True)
    assert r.providers_used() == {"prefill": "torch_sdpa", "decode": "torch_sdpa"}
    cross = LayerSpec(
        num_q_heads=4,
        num_kv_heads=2,
        head_dim=64,
        scale=0.125,
        dtype=torch.float32,
        kv_dtype=torch.float32,
        kv_layout=KVLayout.HND,
        kind=AttentionKind.CROSS,
    )
    assert LayerRunner(cross, "cpu", 32).providers_used()["decode"] == "torch_sdpa"


def _impl(cls, shared_with):
    return cls(
        num_heads=4,
        head_size=64,
        scale=0.125,
        num_kv_heads=2,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="auto",
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=shared_with,
    )


@pytest.mark.parametrize("write", ["forward", "do_kv_cache_update"])
def test_impl_writes_the_step_kv_in_one_place_and_never_into_a_shared_layers_cache(write):
    """The vLLM impls under a VllmConfig: the CPU impl writes a step's new K/V inside forward (XpuAttnCpuBackend: no
    separate update op), the accelerators' impl only in do_kv_cache_update (its forward, handed other rows, writes
    nothing); either way a layer reading another layer's KV (KV sharing) writes nothing. A fresh 40-token prompt on
    two pages of 32: the owner's output against the naive oracle over its rows, then a sharing layer handed
    different rows: the cache is unchanged bit for bit and its output is still the oracle's over the owner's rows."""
    from vllm.config import VllmConfig, set_current_vllm_config

    from vllm_xpu_attn.core import Mode, StepInputs, plan_step
    from vllm_xpu_attn.vllm.backend import XpuAttnCpuImpl, XpuAttnImpl, XpuAttnMetadata

    cfg = VllmConfig()
    cfg.cache_config.block_size = 32
    cfg.model_config = SimpleNamespace(dtype=torch.float32)  # the impl reads the model's dtype only
    g = torch.Generator().manual_seed(3)
    n, hq, hkv, d, page = 40, 4, 2, 64, 32
    q, k, v = (
        torch.randn(n, hq, d, generator=g),
        torch.randn(n, hkv, d, generator=g),
        torch.randn(n, hkv, d, generator=g),
    )
    table = torch.tensor([[2, 0]], dtype=torch.int32)
    slots = torch.cat([2 * page + torch.arange(page), torch.arange(n - page)])
    plan = plan_step(
        StepInputs(
            mode=Mode.MIXED,
            seq_lens=torch.tensor([n], dtype=torch.int32),
            max_seqlen_k=n,
            num_tokens=n,
            page_size=page,
            cu_seqlens_q=torch.tensor([0, n], dtype=torch.int32),
            max_seqlen_q=n,
            page_table=table,
        )
    )
    meta = XpuAttnMetadata(plan=plan, slot_mapping=slots)
    # the oracle's own pages: plain [P, page, Hkv, D] rows at the same slots
    kp, vp = torch.zeros(3 * page, hkv, d), torch.zeros(3 * page, hkv, d)
    kp[slots], vp[slots] = k, v
    want, _ = naive_paged_attention(
        q, kp.view(3, page, hkv, d), vp.view(3, page, hkv, d), table, [n], [0, n], scale=0.125
    )
    layer = torch.nn.Module()
    with set_current_vllm_config(cfg):
        cls = XpuAttnCpuImpl if write == "forward" else XpuAttnImpl
        owner, sharer = _impl(cls, None), _impl(cls, "model.layers.0.self_attn.attn")
        kv_cache = torch.zeros(3, hkv, page, 2 * d)  # vLLM's CPU cache of one layer: [P, Hkv, page, 2 * D]
        for impl, kk, vv in ((owner, k, v), (sharer, -k, v + 1)):
            before = kv_cache.clone()
            if write == "do_kv_cache_update":
                impl.do_kv_cache_update(layer, kk, vv, kv_cache, slots)
                kk, vv = kk + 1, -vv  # what forward is handed must not reach the cache: the update wrote it
            out = torch.full((n, hq, d), float("nan"))
            impl.forward(layer, q, kk, vv, kv_cache, meta, out)
            assert_close_to(out, want, torch.float32)
            if impl is sharer:
                assert torch.equal(kv_cache, before)
            else:
                assert int((kv_cache != 0).sum()) == 2 * n * hkv * d  # every new row's K and V, nothing else
