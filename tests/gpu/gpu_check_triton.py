"""GPU validation of the Triton provider at real sizes (run on the device machine, not in CI):

    python -m pytest -q tests/gpu/gpu_check_triton.py

Named gpu_check_* so CI's collection (test_*.py) never picks it up on a GPU-less machine.
"""

import os
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from layouts import assert_close_to, assert_lse_close, layouts

from vllm_xpu_attn import core
from vllm_xpu_attn.kernels.api import LayerConsts, PagedStep, get_provider

if not torch.cuda.is_available():
    raise RuntimeError("gpu_check_triton needs a CUDA device")
assert os.environ.get("TRITON_INTERPRET", "0") != "1"
DEV = "cuda"
TRITON = get_provider("triton")
REF = get_provider("reference")
N = int(os.environ.get("VXA_GPU_EXAMPLES", "300"))
_PROGRESS = os.environ.get("VXA_GPU_PROGRESS")  # a file: one line per example, so a killed run shows how far it got
_T0 = time.time()


def _progress(name: str, lay) -> None:
    if _PROGRESS:
        with open(_PROGRESS, "a") as f:
            f.write(
                f"{time.time() - _T0:8.1f}s {name} dtype={lay.q.dtype} kv={lay.k_cache.dtype} "
                f"page={lay.k_cache.shape[1]} hq={lay.q.shape[1]} hkv={lay.k_cache.shape[2]} d={lay.q.shape[2]} "
                f"max_q={lay.max_seqlen_q} kw={ {k: tuple(v.shape) if torch.is_tensor(v) else v for k, v in lay.kwargs.items() if v is not None} }\n"  # noqa: E501
            )


@settings(max_examples=N)
@given(
    layout=layouts(max_ctx=3000, max_new=200, max_batch=6, head_dims=(64, 128), gqa=(1, 4, 8), max_kv_heads=4),
    want_lse=st.booleans(),
    splits=st.sampled_from([None, 1, 4, 8]),
)
def test_triton_matches_reference_real_sizes(layout, want_lse, splits):
    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    ns = splits if lay.max_seqlen_q <= 1 else None
    res = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=want_lse, num_splits=ns)
    out = res[0] if want_lse else res
    assert_close_to(out.float().cpu(), ref[0].double().cpu(), lay.q.dtype, logit_bound=lay.logit_bound())
    if want_lse:
        assert_lse_close(res[1].cpu(), ref[1].double().cpu(), tol=2e-3)
    _progress("real_sizes", lay)


@settings(max_examples=max(N // 6, 10), deadline=None)
@given(
    layout=layouts(max_ctx=3000, max_new=200, max_batch=6, head_dims=(128, 256), gqa=(1, 4, 8), max_kv_heads=4),
    want_lse=st.booleans(),
    chunks=st.sampled_from([(0, 128), (0, 64), (64, 128), (32, 64)]),
    splits=st.sampled_from([None, 4]),
)
def test_head_dim_tiles_on_device(layout, want_lse, chunks, splits):
    """Intel's head-dim register tiles (tuning.PAGED_D_TILES; xpu ships (0, 128) at D 256: output columns split over
    two programs) forced on this device for decode and pointer-load prefill at real sizes: equal to the reference
    (descriptor prefill keeps whole rows and is left as shipped)."""
    from vllm_xpu_attn.kernels.providers.triton import tiles, tuning

    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    fam = tiles.device_family(torch.device(DEV))
    saved = tuning.PAGED_D_TILES.get(fam)
    tuning.PAGED_D_TILES[fam] = {f"{p}_d{d}": chunks for p in ("decode", "prefill_ptr") for d in (128, 256)}
    TRITON.clear_caches()
    try:
        ns = splits if lay.max_seqlen_q <= 1 else None
        res = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=want_lse, num_splits=ns)
    finally:
        if saved is None:
            del tuning.PAGED_D_TILES[fam]
        else:
            tuning.PAGED_D_TILES[fam] = saved
        TRITON.clear_caches()
    out = res[0] if want_lse else res
    assert_close_to(out.float().cpu(), ref[0].double().cpu(), lay.q.dtype, logit_bound=lay.logit_bound())
    if want_lse:
        assert_lse_close(res[1].cpu(), ref[1].double().cpu(), tol=2e-3)
    _progress("head_dim_tiles", lay)


@settings(max_examples=max(N // 3, 10))
@given(
    layout=layouts(max_ctx=3000, max_new=200, max_batch=6, head_dims=(64, 128), gqa=(1, 4, 8), max_kv_heads=4),
    want_lse=st.booleans(),
)
def test_triton_batch_invariant_mode_matches_reference_real_sizes(layout, want_lse):
    """The batch-invariant launch (aligned tiles, no split-K) computes the same attention."""
    lay = layout.to(DEV)
    ref = REF.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=True)
    res = TRITON.flash_attn_with_kvcache(*lay.args(), **lay.kwargs, return_softmax_lse=want_lse, batch_invariant=True)
    out = res[0] if want_lse else res
    assert_close_to(out.float().cpu(), ref[0].double().cpu(), lay.q.dtype, logit_bound=lay.logit_bound())
    if want_lse:
        assert_lse_close(res[1].cpu(), ref[1].double().cpu(), tol=2e-3)
    _progress("batch_invariant", lay)


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_write_kv_byte_exact(fp8):
    g = torch.Generator().manual_seed(0)
    kc = torch.zeros(64, 16, 8, 128, dtype=fp8, device=DEV)
    kr = kc.clone()
    x = (torch.randn(500, 8, 128, generator=g) * 50).to(torch.bfloat16)
    x[0, 0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 1e30])  # saturate, keep NaN
    x = x.to(DEV)
    slots = torch.randperm(64 * 16, generator=g)[:500].to(DEV)
    slots[::7] = -1
    slots[0] = 3  # the row with the special values is written
    s = torch.tensor([0.37], device=DEV)
    TRITON.write_kv(x, x, kc, kc.clone(), slots, s, s)
    REF.write_kv(x, x, kr, kr.clone(), slots, s, s)
    nan_a, nan_b = torch.isnan(kc.float()), torch.isnan(kr.float())
    assert torch.equal(nan_a, nan_b) and nan_a.any()  # NaN stays NaN (its byte may differ: any NaN encoding)
    assert torch.equal(kc.view(torch.uint8)[~nan_a], kr.view(torch.uint8)[~nan_a])


def test_decode_path_has_no_host_sync():
    """Plan (core) + KV write + split-K decode + merge with CUDA's sync debugger set to error."""
    b, ctx, hq, hkv, d, page = 64, 4096, 32, 8, 128, 64
    pages = b * ctx // page
    kc = torch.randn(pages, page, hkv, d, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    token_table = (torch.randperm(pages, device=DEV)[:, None] * page + torch.arange(page, device=DEV)).reshape(b, ctx)
    seq_lens = torch.full((b,), ctx - 5, device=DEV, dtype=torch.int32)
    q = torch.randn(b, hq, d, device=DEV, dtype=torch.bfloat16)
    k_new = torch.randn(b, hkv, d, device=DEV, dtype=torch.bfloat16)
    scale1 = torch.ones(1, device=DEV)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        plan = core.plan_step(core.StepInputs(core.Mode.DECODE, seq_lens, ctx, b, page, token_table=token_table)).main
        pos = (seq_lens - 1).long()  # each request's new token: its slot from the planned page table
        slots = plan.page_table[torch.arange(b, device=DEV), pos // page].long() * page + pos % page
        TRITON.write_kv(k_new, k_new, kc, vc, slots, scale1, scale1)
        out, lse = TRITON.flash_attn_with_kvcache(
            q,
            kc,
            vc,
            plan.page_table,
            plan.cache_seqlens,
            plan.cu_seqlens_q,
            plan.max_seqlen_q,
            return_softmax_lse=True,
            num_splits=8,
        )
        merged, _ = TRITON.merge_state(out, lse, out, lse)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    ref = REF.flash_attn_with_kvcache(q, kc, vc, plan.page_table, plan.cache_seqlens, plan.cu_seqlens_q, 1)
    assert_close_to(out.float().cpu(), ref.double().cpu(), torch.bfloat16)
    assert_close_to(merged.float().cpu(), ref.double().cpu(), torch.bfloat16)


@pytest.mark.parametrize("as_dot", [True, False], ids=["bias-dot", "bias-elementwise"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("q_len", [1, 5])
def test_alibi_bias_exact_at_long_range_on_device(dtype, q_len, as_dot, monkeypatch):
    """The causal ALiBi bias at 100,000 keys, slopes small enough that far keys weigh, decode and extend against the
    reference: as the bf16 matrix product Intel ships (tuning.ALIBI_AS_DOT; kernels._alibi_rows/_alibi_keys, all
    three distance digits in use), forced on this device, and as this device's elementwise bias."""
    from vllm_xpu_attn.kernels.providers.triton import tiles, tuning

    monkeypatch.setitem(tuning.ALIBI_AS_DOT, tiles.device_family(torch.device(DEV)), as_dot)
    TRITON.clear_caches()
    gen = torch.Generator(device=DEV).manual_seed(5)
    k_len, page, hq, hkv, d = 100_000, 64, 8, 2, 128
    n_pages = -(-k_len // page)
    kc = torch.randn(n_pages, page, hkv, d, device=DEV, dtype=dtype, generator=gen)
    vc = torch.randn_like(kc)
    pt = torch.randperm(n_pages, device=DEV, generator=gen).to(torch.int32)[None]
    q = torch.randn(q_len, hq, d, device=DEV, dtype=dtype, generator=gen)
    slopes = torch.tensor([2.0 ** -(12 + i) for i in range(hq)], device=DEV)
    args = (
        q,
        kc,
        vc,
        pt,
        torch.tensor([k_len], dtype=torch.int32, device=DEV),
        torch.tensor([0, q_len], dtype=torch.int32, device=DEV),
        q_len,
    )
    kw = dict(causal=True, alibi_slopes=slopes, return_softmax_lse=True)
    try:
        out, lse = TRITON.flash_attn_with_kvcache(*args, **kw)
        launched = {v["ALIBI_DOT"] for v in TRITON.launched_variants("_paged_attn_kernel")}
    finally:
        TRITON.clear_caches()
    assert launched == {as_dot}, launched
    ref, ref_lse = REF.flash_attn_with_kvcache(*args, **kw)
    assert_close_to(out.float().cpu(), ref.double().cpu(), dtype)
    assert_lse_close(lse.cpu(), ref_lse.double().cpu(), tol=2e-3)


def test_int64_addressing_past_2_31_elements():
    """A cache of > 2^31 elements: the last page must be addressed correctly."""
    page, hkv, d = 64, 8, 128
    pages = (2**31) // (page * hkv * d) + 64  # ~4.3 GB in bf16 per cache
    kc = torch.zeros(pages, page, hkv, d, device=DEV, dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    kc[-1].normal_()
    vc[-1].normal_()
    q = torch.randn(1, 32, d, device=DEV, dtype=torch.bfloat16)
    pt = torch.tensor([[pages - 1]], device=DEV, dtype=torch.int32)
    args = (
        q,
        kc,
        vc,
        pt,
        torch.tensor([page], device=DEV, dtype=torch.int32),
        torch.tensor([0, 1], device=DEV, dtype=torch.int32),
        1,
    )
    out = TRITON.flash_attn_with_kvcache(*args)
    ref = REF.flash_attn_with_kvcache(*args)
    assert kc.numel() > 2**31
    assert_close_to(out.float().cpu(), ref.double().cpu(), torch.bfloat16)


@pytest.mark.parametrize("feature", ["plain", "window_softcap", "sinks", "fp8", "local"])
def test_cuda_graph_capture_and_replay_of_planning_and_decode(feature):
    """What the SGLang adapter records under graphs: plan_step over the token-table pool and the requests'
    rows (static key bound = table width) -> Triton decode, captured once and replayed on new
    lengths, page assignments and queries; each replay checked against the naive oracle."""
    from naive import naive_paged_attention

    from vllm_xpu_attn.core import LayerSpec, Mode, StepInputs

    bs, real, width, ps, hq, hkv, d = 8, 6, 1024, 16, 8, 2, 128
    n_pages = (bs + 1) * width // ps
    kv_dtype = torch.float8_e4m3fn if feature == "fp8" else torch.bfloat16
    spec = LayerSpec(
        num_q_heads=hq,
        num_kv_heads=hkv,
        head_dim=d,
        scale=d**-0.5,
        dtype=torch.bfloat16,
        kv_dtype=kv_dtype,
        window_left=100 if feature == "window_softcap" else -1,
        softcap=30.0 if feature == "window_softcap" else 0.0,
        has_sinks=feature == "sinks",
        local_attention=feature == "local",
    )
    runner = core.LayerRunner(spec, DEV, ps)
    assert runner.decode_provider.name == "triton"
    g = torch.Generator().manual_seed(9)
    kc = (torch.randn(n_pages, ps, hkv, d, generator=g) * 2).to(DEV).to(kv_dtype)
    vc = torch.randn(n_pages, ps, hkv, d, generator=g).to(DEV).to(kv_dtype)
    descale = torch.tensor([0.5], device=DEV) if feature == "fp8" else None
    sinks = torch.randn(hq, generator=g).to(DEV) if feature == "sinks" else None
    runner.bind(sinks=sinks, k_descale=descale, v_descale=descale)
    # static inputs, as an engine's graph runner keeps them
    req_to_token = torch.zeros(bs + 1, width, dtype=torch.int64, device=DEV)
    req_idx = torch.zeros(bs, dtype=torch.int64, device=DEV)
    seq_lens = torch.ones(bs, dtype=torch.int32, device=DEV)
    q = torch.zeros(bs, hq, d, dtype=torch.bfloat16, device=DEV)
    out = torch.zeros(bs, hq, d, dtype=torch.bfloat16, device=DEV)

    def step():
        plan = core.plan_step(
            StepInputs(
                Mode.DECODE,
                seq_lens,
                width,
                bs,
                ps,
                token_table=req_to_token,
                token_rows=req_idx,
                attention_chunk_size=64 if spec.local_attention else None,
            )
        )
        runner.forward(plan, q, kc, vc, out)

    def new_batch(seed):
        gg = torch.Generator().manual_seed(seed)
        lens = torch.randint(1, width + 1, (real,), generator=gg)
        pages = torch.randperm(n_pages, generator=gg)[: real * (width // ps)].view(real, -1)
        tok = (pages[:, :, None] * ps + torch.arange(ps)).reshape(real, width)
        req_to_token.zero_()
        req_to_token[1 : real + 1] = tok.to(DEV)
        req_idx.copy_(torch.tensor(list(range(1, real + 1)) + [0] * (bs - real)))  # padded rows -> request 0
        seq_lens.copy_(torch.tensor(lens.tolist() + [1] * (bs - real), dtype=torch.int32))
        q.copy_(torch.randn(bs, hq, d, generator=gg).to(torch.bfloat16))
        return lens, pages

    new_batch(0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up compiles the kernels outside capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.cuda.graph(graph):
            step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    kc_cpu, vc_cpu = kc.cpu().float(), vc.cpu().float()
    if descale is not None:
        kc_cpu, vc_cpu = kc_cpu * 0.5, vc_cpu * 0.5
    for seed in (1, 2, 3):
        lens, pages = new_batch(seed)
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        want, _ = naive_paged_attention(
            q[:real].cpu().float(),
            kc_cpu,
            vc_cpu,
            pages.int(),
            lens,
            torch.arange(real + 1),
            scale=d**-0.5,
            window=spec.window,
            softcap=spec.softcap,
            sinks=None if sinks is None else sinks.cpu(),
            chunk_size=64 if spec.local_attention else None,
        )
        assert_close_to(out[:real].float().cpu(), want, torch.bfloat16)
        assert torch.isfinite(out[real:].float()).all()


@pytest.mark.parametrize(
    "case",
    [
        "decode",
        "decode_split",
        "prefill",
        "prefill_p64",
        "strided_q",
        "interleaved",
        "sinks_split",
        "alibi",
        "fp8",
        "fp8_prefill",
    ],
)
def test_layer_hot_path_many_layers_and_steps(case):
    """TritonLaunch.run's hot path (every layer after a configuration's first: one dict lookup, device
    addresses, no per-layer checks; kept across steps, the step's addresses read per step) vs the
    reference provider, layer by layer, over fresh plans (new tables, lengths, cu_seqlens) per step: 6
    layers each with its own caches and outputs, decode (with and without split-K), prefill, a q that is
    a strided view of a fused qkv projection as vLLM passes it, two live plans of one shape whose
    layers interleave (as two KV-cache groups' plans do: one configuration, two sets of addresses), and
    layers with their own bound sinks (split-K: the merge adds them), ALiBi slopes or FP8 descales."""
    hq, hkv, d, ps, layers = 16, 4, 128, 16, 6
    if case == "prefill_p64":  # page 64: the tensor-descriptor prefill kernel on sm90
        ps = 64
    bs = 3
    ctx = 2048 if case in ("decode_split", "sinks_split") else 300
    nq = 40 if case.startswith("prefill") or case == "fp8_prefill" else 1
    g = torch.Generator().manual_seed(5)
    n_pages = bs * (ctx // ps + 4) + 1
    kv_dtype = torch.float8_e4m3fn if case.startswith("fp8") else torch.bfloat16
    caches = [
        (
            torch.randn(n_pages, ps, hkv, d, generator=g).to(DEV).to(kv_dtype),
            torch.randn(n_pages, ps, hkv, d, generator=g).to(DEV).to(kv_dtype),
        )
        for _ in range(layers)
    ]
    slopes = tuple(2.0 ** (-(h + 1) / 2) for h in range(hq)) if case == "alibi" else None
    spec = core.LayerSpec(
        num_q_heads=hq,
        num_kv_heads=hkv,
        head_dim=d,
        scale=d**-0.5,
        dtype=torch.bfloat16,
        kv_dtype=kv_dtype,
        has_sinks=case == "sinks_split",
        alibi_slopes=slopes,
    )
    runners = [core.LayerRunner(spec, DEV, ps, override="triton") for _ in range(layers)]
    bound = []  # each layer's own tensors, bound once, as the adapters do
    for rn in runners:
        extra = {}
        if case == "sinks_split":
            extra["sinks"] = torch.randn(hq, generator=g).to(DEV)
        if case.startswith("fp8"):
            extra["k_descale"] = (torch.rand(1, generator=g) + 0.5).to(DEV)
            extra["v_descale"] = (torch.rand(1, generator=g) + 0.5).to(DEV)
        rn.bind(**extra)
        if slopes is not None:
            extra["alibi_slopes"] = torch.tensor(slopes, device=DEV)
        bound.append(extra)
    cfgs = set()
    per = (ctx + ps - 1) // ps

    def make_plan():
        lens = torch.randint(nq, ctx + 1, (bs,), generator=g)
        lens[0] = ctx  # one width and split count every step: one configuration
        table = torch.randperm(n_pages, generator=g)[: bs * per].view(bs, per).int().to(DEV)
        qlens = torch.full((bs,), nq)
        cu = torch.cat([torch.zeros(1, dtype=torch.long), qlens.cumsum(0)]).int().to(DEV)
        mode = core.Mode.DECODE if nq == 1 else core.Mode.EXTEND
        return core.plan_step(
            core.StepInputs(
                mode=mode,
                seq_lens=lens.int().to(DEV),
                max_seqlen_k=ctx,
                num_tokens=bs * nq,
                page_size=ps,
                page_table=table,
                cu_seqlens_q=cu,
                max_seqlen_q=nq,
            )
        )

    for step_i in range(3):
        plans = [make_plan()] + ([make_plan()] if case == "interleaved" else [])
        for li, (rn, (kc, vc)) in enumerate(zip(runners, caches)):
            for plan in plans:
                if case == "strided_q":
                    qkv = torch.randn(bs * nq, hq + 2 * hkv, d, generator=g).to(DEV).bfloat16()
                    q = qkv[:, :hq]
                else:
                    q = torch.randn(bs * nq, hq, d, generator=g).to(DEV).bfloat16()
                out = torch.full((bs * nq, hq, d), float("nan"), dtype=torch.bfloat16, device=DEV)
                rn.forward(plan, q, kc, vc, out)
                m = plan.main
                want = REF.flash_attn_with_kvcache(
                    q,
                    kc,
                    vc,
                    m.page_table,
                    m.cache_seqlens,
                    m.cu_seqlens_q,
                    nq,
                    softmax_scale=spec.scale,
                    causal=True,
                    **bound[li],
                )
                assert_close_to(out.float().cpu(), want.double().cpu(), torch.bfloat16)
        for plan in plans:
            launch = next(iter(plan.launches.values()))
            cfgs.add(id(launch.cfg))
            if case in ("decode_split", "sinks_split"):
                assert launch.num_splits > 1
        if step_i == 0:
            armed = sum(a.hot_attn is not None for a in launch.cfg.layers.values())
    assert len(cfgs) == 1, "steps of one shape did not share their launch configuration"
    keys = [k for k, a in launch.cfg.layers.items() if a.hot_attn is not None]
    diff = [i for i in range(len(keys[0])) if len({k[i] for k in keys}) > 1] if keys else []
    assert armed >= 1, "the hot path was never armed (fast launch off?)"
    assert len(keys) == armed, f"later steps re-armed the hot path: {armed} -> {len(keys)} (differing key parts {diff})"


def test_cuda_graph_capture_of_descriptor_prefill():
    """An extend step on the tensor-descriptor prefill kernel (sm90; the per-launch scratch its
    descriptors need is allocated inside the capture) captured in a CUDA graph and replayed on new
    queries, page assignments and lengths; each replay checked against the reference provider."""
    hq, hkv, d, ps, bs, nq, ctx = 16, 4, 128, 64, 3, 96, 700
    per = (ctx + ps - 1) // ps
    n_pages = bs * per + 5
    g = torch.Generator().manual_seed(11)
    kc = torch.randn(n_pages, ps, hkv, d, generator=g).to(DEV).bfloat16()
    vc = torch.randn(n_pages, ps, hkv, d, generator=g).to(DEV).bfloat16()
    q = torch.zeros(bs * nq, hq, d, dtype=torch.bfloat16, device=DEV)
    table = torch.zeros(bs, per, dtype=torch.int32, device=DEV)
    lens = torch.full((bs,), ctx, dtype=torch.int32, device=DEV)
    cu = torch.arange(0, bs * nq + 1, nq, dtype=torch.int32, device=DEV)

    def new_batch(seed):
        gg = torch.Generator().manual_seed(seed)
        q.copy_(torch.randn(bs * nq, hq, d, generator=gg).bfloat16())
        table.copy_(torch.randperm(n_pages, generator=gg)[: bs * per].view(bs, per).int())
        lens.copy_(torch.randint(nq, ctx + 1, (bs,), generator=gg).int())

    def step():
        return TRITON.flash_attn_with_kvcache(q, kc, vc, table, lens, cu, nq)

    new_batch(0)
    TRITON.clear_caches()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up compiles outside capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    cfg = TRITON.arm_paged(PagedStep(cu, lens, table, nq, per * ps, ps), LayerConsts.make(hq, hkv, d)).cfg
    if torch.cuda.get_device_capability()[0] >= 9:
        assert cfg.desc, "sm90 prefill at page 64 should take the tensor-descriptor kernel"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for seed in (1, 2, 3):
        new_batch(seed)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = REF.flash_attn_with_kvcache(q, kc, vc, table, lens, cu, nq)
        assert_close_to(out.float().cpu(), want.double().cpu(), torch.bfloat16)


@pytest.mark.parametrize("hq", [16, 128])
def test_cuda_graph_capture_of_mla_decode(hq):
    """Absorbed MLA decode (latent 512 + rope 64, page 64; 16 heads: the "mla_decode" phase, 128: "mla_wide") on
    the kernel form the device ships (tuning.MLA_KERNEL_FORM: the descriptor forms allocate their scratch inside
    the capture), through plan_step + LayerRunner.forward_mla as the engines' graph runners call it, captured
    once and replayed on new queries, page assignments and lengths (split-K included); each replay checked
    against the reference provider over the same latent rows."""
    from vllm_xpu_attn.core import LayerSpec, MLADims, Mode, StepInputs

    dims = MLADims(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)  # DeepSeek-V3
    bs, ps, ctx = 4, 64, 3000
    per = (ctx + ps - 1) // ps
    n_pages = bs * per + 5
    runner = core.LayerRunner(LayerSpec.for_mla(hq, dims, scale=576**-0.5), DEV, ps)
    g = torch.Generator().manual_seed(12)
    cache = torch.randn(n_pages, ps, 1, 576, generator=g).to(DEV).bfloat16()
    q = torch.zeros(bs, hq, 576, dtype=torch.bfloat16, device=DEV)
    out = torch.zeros(bs, hq, 512, dtype=torch.bfloat16, device=DEV)
    table = torch.zeros(bs, per, dtype=torch.int32, device=DEV)
    lens = torch.full((bs,), ctx, dtype=torch.int32, device=DEV)
    cu = torch.arange(0, bs + 1, dtype=torch.int32, device=DEV)

    def new_batch(seed):
        gg = torch.Generator().manual_seed(seed)
        q.copy_(torch.randn(bs, hq, 576, generator=gg).bfloat16())
        table.copy_(torch.randperm(n_pages, generator=gg)[: bs * per].view(bs, per).int())
        lens.copy_(torch.randint(1, ctx + 1, (bs,), generator=gg).int())

    def step():
        plan = core.plan_step(StepInputs(Mode.DECODE, lens, per * ps, bs, ps, page_table=table, max_seqlen_q=1))
        runner.forward_mla(plan, q, cache, out)

    new_batch(0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up compiles outside capture
        step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for seed in (1, 2, 3):
        new_batch(seed)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = REF.flash_attn_with_kvcache(q, cache, cache[..., :512], table, lens, cu, 1, softmax_scale=576**-0.5)
        assert_close_to(out.float().cpu(), want.double().cpu(), torch.bfloat16)


@pytest.mark.parametrize("page", [1, 16, 64])
def test_token_rows_plan_on_device_equals_the_cpu_plan(page):
    """SGLang's step plan on the device (the one-launch token->page conversion, kernels/providers/triton/paging.py)
    vs the same plan built on the CPU (core.paging's torch ops): identical page tables, across batch
    sizes and widths (one launcher per batch size and int class)."""
    from vllm_xpu_attn.kernels.providers.triton import paging as tp

    g = torch.Generator().manual_seed(page)
    pool_rows, ctx = 40, 1024
    pages = torch.randperm(pool_rows * ctx // page + 9, generator=g)[: pool_rows * (ctx // page)].view(pool_rows, -1)
    pool = (pages.repeat_interleave(page, dim=1) * page + torch.arange(page).repeat(ctx // page)).int()
    before = len(tp._LAUNCHERS)
    for bs, max_k in ((1, 1), (3, 77), (3, 700), (32, 1024), (32, 1000)):
        idx = torch.randperm(pool_rows, generator=g)[:bs]
        seq = torch.randint(1, max_k + 1, (bs,), generator=g).int()
        cpu = core.plan_step(
            core.StepInputs(
                mode=core.Mode.DECODE,
                seq_lens=seq,
                max_seqlen_k=max_k,
                num_tokens=bs,
                page_size=page,
                token_table=pool,
                token_rows=idx,
            )
        )
        dev = core.plan_step(
            core.StepInputs(
                mode=core.Mode.DECODE,
                seq_lens=seq.to(DEV),
                max_seqlen_k=max_k,
                num_tokens=bs,
                page_size=page,
                token_table=pool.to(DEV),
                token_rows=idx.to(DEV),
            )
        )
        assert torch.equal(dev.main.page_table.cpu(), cpu.main.page_table), (bs, max_k)
    assert len(tp._LAUNCHERS) > before, "the device plan did not take the one-launch conversion"


def test_misaligned_decoder_rows_on_device():
    """Token-table rows whose decoder tokens start mid-page (encoder_lens % page != 0, as Whisper's 1,500): planned
    on the device with no host read (the decoder's keys token by token), and the Triton kernel's output for every
    request, aligned or not, matches the naive oracle over the decoder's own slots."""
    from naive import naive_paged_attention

    page, hq, hkv, d = 16, 4, 2, 64
    table = (torch.arange(4 * 64) + 64).reshape(4, 64).to(DEV)  # 4 requests, whole pages of consecutive slots
    enc = torch.tensor([16, 20, 32, 0], dtype=torch.int32, device=DEV)  # request 1 misaligned
    seq = torch.tensor([5, 5, 5, 5], dtype=torch.int32, device=DEV)
    inputs = core.StepInputs(core.Mode.DECODE, seq, 5, 4, page, token_table=table, encoder_lens=enc, max_encoder_len=32)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        plan = core.plan_step(inputs)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert plan.main.page_size == 1 and plan.encoder.page_size == page
    slots = plan.main.page_table[:, :5].cpu()
    want_slots = torch.stack([torch.arange(5) + 64 * b + 64 + int(e) for b, e in enumerate(enc.cpu())])
    assert torch.equal(slots.long(), want_slots), slots
    spec = core.LayerSpec(
        num_q_heads=hq, num_kv_heads=hkv, head_dim=d, scale=d**-0.5, dtype=torch.bfloat16, kv_dtype=torch.bfloat16
    )
    runner = core.LayerRunner(spec, DEV, 1, override="triton")
    kc = torch.randn(32, page, hkv, d, device=DEV, dtype=torch.bfloat16)
    vc = torch.randn_like(kc)
    q = torch.randn(4, hq, d, device=DEV, dtype=torch.bfloat16)
    out = runner.forward(plan, q, kc, vc)
    want, _ = naive_paged_attention(
        q.cpu().float(),
        kc.cpu().float().reshape(-1, 1, hkv, d),
        vc.cpu().float().reshape(-1, 1, hkv, d),
        want_slots.int(),
        seq.cpu(),
        torch.arange(5, dtype=torch.int32),
        scale=d**-0.5,
    )
    assert_close_to(out.cpu(), want, torch.bfloat16)


def test_fp8_and_bf16_layers_of_one_step_split_by_their_own_fill():
    """One decode plan, layers alternating bf16 and e4m3 caches (as a model whose FP8 KV skips some layers): on
    sm90 each cache width splits at its own fill (tuning.SPLIT_FILL: 3 sequences x 4 KV heads x 16,384 keys gives
    16 splits over bf16, 32 over e4m3), and every layer, on its first (checked) and later (hot-path) steps, matches
    the reference provider."""
    hq, hkv, d, ps, bs, ctx = 16, 4, 128, 16, 3, 16384
    g = torch.Generator().manual_seed(11)
    per = ctx // ps
    n_pages = bs * per + 5
    dtypes = [torch.bfloat16, torch.float8_e4m3fn] * 2
    caches, runners, bound = [], [], []
    for kv_dtype in dtypes:
        caches.append(tuple(torch.randn(n_pages, ps, hkv, d, generator=g).to(DEV).to(kv_dtype) for _ in range(2)))
        spec = core.LayerSpec(hq, hkv, d, d**-0.5, dtype=torch.bfloat16, kv_dtype=kv_dtype)
        rn = core.LayerRunner(spec, DEV, ps, override="triton")
        extra = {}
        if kv_dtype != torch.bfloat16:
            extra = dict(
                k_descale=(torch.rand(1, generator=g) + 0.5).to(DEV),
                v_descale=(torch.rand(1, generator=g) + 0.5).to(DEV),
            )
        rn.bind(**extra)
        runners.append(rn)
        bound.append(extra)
    for _ in range(3):
        lens = torch.randint(1, ctx + 1, (bs,), generator=g)
        lens[0] = ctx
        table = torch.randperm(n_pages, generator=g)[: bs * per].view(bs, per).int().to(DEV)
        plan = core.plan_step(core.StepInputs(core.Mode.DECODE, lens.int().to(DEV), ctx, bs, ps, page_table=table))
        for rn, (kc, vc), extra in zip(runners, caches, bound):
            q = torch.randn(bs, hq, d, generator=g).to(DEV).bfloat16()
            out = torch.full((bs, hq, d), float("nan"), dtype=torch.bfloat16, device=DEV)
            rn.forward(plan, q, kc, vc, out)
            m = plan.main
            want = REF.flash_attn_with_kvcache(
                q, kc, vc, m.page_table, m.cache_seqlens, m.cu_seqlens_q, 1, softmax_scale=d**-0.5, causal=True, **extra
            )
            assert_close_to(out.float().cpu(), want.double().cpu(), torch.bfloat16)
        launch = next(iter(plan.launches.values()))
        if torch.cuda.get_device_capability()[0] >= 9:
            assert launch.num_splits == 16 and launch.cfg.other.num_splits == 32, (
                launch.num_splits,
                launch.cfg.other and launch.cfg.other.num_splits,
            )


@pytest.mark.parametrize("kind", ["gqa-bf16", "fp8-e4m3", "sinks-window-softcap", "mla", "batch-invariant"])
def test_warm_up_then_serve_matches_reference(kind, monkeypatch):
    """The first call of a layer kind launches every variant it can reach on dummy steps over the layer's own
    caches (warmup.py; the rest of this suite runs with it off): nothing but the output may change (memcheck runs
    this too), and the served steps after it match the reference, split-K decode included."""
    from vllm_xpu_attn.kernels.providers.triton import warmup

    monkeypatch.setenv("XPU_ATTN_WARMUP", "1")
    prov = type(TRITON)()
    g = torch.Generator(device=DEV).manual_seed(7)
    hq, hkv, d, dv, kvdt, kw = {
        "gqa-bf16": (32, 8, 128, 128, torch.bfloat16, {}),
        "fp8-e4m3": (32, 8, 128, 128, torch.float8_e4m3fn, {}),
        "sinks-window-softcap": (16, 2, 64, 64, torch.bfloat16, dict(window_size=(255, 0), softcap=30.0)),
        "mla": (16, 1, 576, 512, torch.bfloat16, {}),
        "batch-invariant": (8, 8, 128, 128, torch.bfloat16, dict(batch_invariant=True)),
    }[kind]
    page, pages, b, ctx = 64, 400, 3, 5000
    k = torch.randn(pages, page, hkv, d, device=DEV, generator=g).to(kvdt)
    v = k[..., :dv] if kind == "mla" else torch.randn(pages, page, hkv, dv, device=DEV, generator=g).to(kvdt)
    kept = (k.clone(), v.clone())
    if kind == "sinks-window-softcap":
        kw["sinks"] = torch.randn(hq, device=DEV, generator=g)
    table = torch.randperm(pages, device=DEV, generator=g)[: b * 100].reshape(b, 100).to(torch.int32)
    seq = torch.tensor([ctx, 1, 3000], device=DEV, dtype=torch.int32)
    before = len(prov.launched_variants())
    for qlens in ([1, 1, 1], [7, 1, 4]):  # decode (split-K at this batch), then extend / verify rows
        cu = torch.tensor([0] + torch.tensor(qlens).cumsum(0).tolist(), device=DEV, dtype=torch.int32)
        q = torch.randn(sum(qlens), hq, d, device=DEV, generator=g).to(torch.bfloat16)
        if kind == "mla":
            call = LayerConsts.make(hq, 1, d, dv, mla=True)
            step = PagedStep(cu, seq, table, max(qlens), 100 * page, page)
            out = torch.empty(sum(qlens), hq, dv, device=DEV, dtype=torch.bfloat16)
            prov.arm_paged(step, call).run(q, k, v, out)
            ref = REF.arm_paged(step, call).run(q, k, v, torch.empty_like(out))
        else:
            out = prov.flash_attn_with_kvcache(q, k, v, table, seq, cu, max(qlens), **kw)
            ref = REF.flash_attn_with_kvcache(q, k, v, table, seq, cu, max(qlens), **kw)
        torch.cuda.synchronize()
        assert_close_to(out.float().cpu(), ref.double().cpu(), torch.bfloat16)
    assert len(prov.launched_variants()) - before >= len(
        warmup.layer_steps(
            LayerConsts.make(hq, hkv, d, dv, mla=kind == "mla", batch_invariant=kind == "batch-invariant"),
            torch.device(DEV),
            page,
        )
    )  # the warm-up's variants were launched
    assert torch.equal(k.float(), kept[0].float()) and torch.equal(v.float(), kept[1].float())  # caches only read
