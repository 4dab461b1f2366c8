"""No kernel compile while serving: what a layer kind can launch is launched once when it first runs.

On the CPU through Triton's interpreter (no compile here, but the same launch decisions): a fresh provider warms
one layer kind (vllm_xpu_attn.kernels.providers.triton.warmup), then serves a sequence of steps like an engine's (decode
at batch 1..3 and contexts up to 4,096 keys, where split-K starts; prefill; extend; spec-decode verify) for that
kind; every kernel specialisation those steps launch (constexprs: split count, tiles, descriptors, features) must
already be among the warmed ones. On the H200, benchmarks/bench_compile_stalls.py counts the stalls of a cold
serving-like sequence with and without it.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from vllm_xpu_attn.kernels.api import (  # noqa: E402
    FLAGS,  # noqa: E402
    LayerConsts,
    LayerTensors,
    PagedStep,
    get_provider,  # noqa: E402
)

pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
from vllm_xpu_attn.kernels.providers.triton import launch_config, tuning, warmup  # noqa: E402

PAGE = 16
WIDTH = 256  # page-table columns: 4,096 keys addressable (the CPU policy splits from 2,048)

KINDS = {  # layer kind -> (Hq, Hkv, D, q dtype, cache dtype, call kwargs, provider.tensor_descriptors)
    "gqa-bf16": (4, 2, 32, torch.bfloat16, torch.bfloat16, {}, None),
    "gqa-bf16-descriptors": (4, 2, 32, torch.bfloat16, torch.bfloat16, {}, True),
    "fp8-cache": (4, 2, 32, torch.bfloat16, torch.float8_e4m3fn, {}, None),
    # FP8 decode's own output-column programs (tuning.PAGED_D_TILES "decode_fp8_d<D>"): a sibling configuration
    "fp8-cache-columns": (
        4,
        2,
        32,
        torch.bfloat16,
        torch.float8_e4m3fn,
        {"paged_d": {"decode_fp8_d32": (0, 16)}},
        None,
    ),
    "sinks-window-softcap": (
        4,
        1,
        32,
        torch.float32,
        torch.float32,
        {"window_size": (7, 0), "softcap": 20.0, "sinks": True},
        None,
    ),
    "batch-invariant": (2, 2, 32, torch.bfloat16, torch.bfloat16, {"batch_invariant": True}, None),
    "page-1": (4, 2, 32, torch.float32, torch.float32, {"page": 1}, None),  # varlen calls, page-1 decoder plans
    "mla": (16, 1, 64 + 16, torch.bfloat16, torch.bfloat16, {"mla": 64}, None),  # latent 64 + rope 16
}


def _variants(provider) -> set:
    return {
        (name, tuple(sorted(v.items())))
        for name in ("_paged_attn_kernel", "_merge_splits", "_mla_attn_kernel")
        for v in provider.launched_variants(name)
    }


def _steps(gen: torch.Generator):
    """(q lens, cache lens) per step: decode batches at short and long contexts, prefill, extend, verify."""
    steps = []
    for b in (1, 2, 3):  # the split count follows the table's width (4,096 keys), not the filled length
        for ctx in (5, 70):
            steps.append(([1] * b, [ctx - i for i in range(b)]))
    steps += [([12], [12]), ([7, 30], [7, 30]), ([5], [300]), ([4, 4, 4], [60, 200, 9])]  # prefill / extend / verify
    return steps


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_variant_a_served_step_launches_was_warmed(kind, monkeypatch):
    hq, hkv, d, qdt, kvdt, kw, desc = KINDS[kind]
    kw = dict(kw)
    if "paged_d" in kw:
        monkeypatch.setitem(tuning.PAGED_D_TILES, "cpu", kw.pop("paged_d"))
    page, dv = kw.pop("page", PAGE), kw.pop("mla", d)
    width = WIDTH * PAGE // page
    provider = type(get_provider("triton"))()  # a fresh one: nothing launched yet
    provider.tensor_descriptors = desc
    gen = torch.Generator().manual_seed(0)
    pages = width * 3 + 1
    k_cache = torch.randn(pages, page, hkv, d, generator=gen).to(kvdt)
    v_cache = k_cache[..., :dv] if dv != d else torch.randn(pages, page, hkv, d, generator=gen).to(kvdt)
    sinks = torch.randn(hq, generator=gen) if kw.pop("sinks", False) else None
    call = LayerConsts.make(
        hq,
        hkv,
        d,
        dv,
        window=kw.get("window_size", (-1, -1)),
        softcap=kw.get("softcap", 0.0),
        batch_invariant=kw.get("batch_invariant", False),
        mla=dv != d,
    )
    layer = LayerTensors.make(call, device=torch.device("cpu"), kv_dtype=kvdt, sinks=sinks)
    q = torch.randn(8, hq, d, generator=gen).to(qdt)
    out = torch.empty(8, hq, dv, dtype=qdt)
    n = warmup.warm_up(provider, call, page, q, k_cache, v_cache, out, layer)
    FLAGS.check_now(torch.device("cpu"))  # the dummy steps are valid input: nothing flagged
    warmed = _variants(provider)
    assert n == len(warmup.layer_steps(call, torch.device("cpu"), page)) and warmed

    for qlens, clens in _steps(gen):
        b = len(qlens)
        table = torch.randperm(pages - 1, generator=gen)[: b * width].reshape(b, width).to(torch.int32) + 1
        cu = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), dtype=torch.int32)
        qs = torch.randn(sum(qlens), hq, d, generator=gen).to(qdt)
        seq = torch.tensor(clens, dtype=torch.int32)
        if call.mla:  # the MLA kernel through the plan / run interface (the one-call form is MHA's)
            step = PagedStep(cu, seq, table, max(qlens), width * page, page)
            provider.arm_paged(step, call).run(qs, k_cache, v_cache, torch.empty(len(qs), hq, dv, dtype=qdt))
        else:
            provider.flash_attn_with_kvcache(qs, k_cache, v_cache, table, seq, cu, max(qlens), sinks=sinks, **kw)
        FLAGS.check_now(torch.device("cpu"))
    served = _variants(provider)
    splits = {dict(v).get("NUM_SPLITS") for _, v in served}
    if kind == "fp8-cache-columns":  # decode (SPLIT_MASK off) took the FP8 entry's columns, prefill the whole width
        paged = [dict(v) for n, v in served if n == "_paged_attn_kernel"]
        assert {(v["SPLIT_MASK"], v["CHUNK_DV"]) for v in paged} == {(False, 16), (True, 32)}, paged
    assert (splits == {1}) if call.batch_invariant else (splits >= {1, 2}), splits  # the steps reach split-K
    assert served - warmed == set(), f"compiled while serving (not warmed): {sorted(served - warmed)}"


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_reachable_splits_cover_every_batch_and_context(monkeypatch, kv_dtype):
    """On a GPU the split count depends on the device's compute units and the cache width's fill
    (tuning.split_fill): for an H100/H200-like count (132 SMs) of the cuda_sm90 family, every count the policy picks
    for any batch and context length over a ``kv_dtype`` cache is among those warm-up compiles for that width."""
    from vllm_xpu_attn.kernels.providers.triton import tuning
    from vllm_xpu_attn.kernels.providers.triton.variants import layer_points

    monkeypatch.setattr(launch_config, "compute_units", lambda dev_type, index: 132)
    monkeypatch.setattr(launch_config, "device_family", lambda device: "cuda_sm90")
    monkeypatch.setattr(warmup, "device_family", lambda device: "cuda_sm90")
    width = launch_config.cache_width(kv_dtype)
    fill = tuning.split_fill("cuda_sm90", False, width)
    warmup.reachable_splits.cache_clear()
    try:
        for units in (1, 2, 8, 16, 64):
            reach = set(warmup.reachable_splits("cuda", 0, units, fill))
            g = torch.Generator().manual_seed(units)
            for _ in range(3000):
                batch = int(torch.randint(1, 5000, (1,), generator=g))
                keys = int(torch.randint(1, 1 << 24, (1,), generator=g))
                s = launch_config.split_count(torch.device("cuda", 0), batch, units, 1, keys, kv_bytes=width)
                assert s in reach, (units, batch, keys, s, reach)
            # what warm-up compiles for a layer over this cache (warmup.layer_steps' points)
            points = layer_points(
                "cuda_sm90",
                LayerConsts.make(units, units, 64),
                None,
                reachable=lambda u, f, c: warmup.reachable_splits("cuda", 0, u, f, c),
                kv_bytes=width,
            )
            assert {p.num_splits for p in points if p.phase == "decode"} == reach, (units, reach)
        assert warmup.reachable_splits("cuda", 0, 8, fill) == (1, 2, 4, 8, 16, 32)
    finally:
        warmup.reachable_splits.cache_clear()
