"""The split-K policy's fill per cache width (tuning.SPLIT_FILL): within one decode step, a layer over an FP8 cache
and a layer over a wider cache each launch the split count of their own width's fill, and both stay exact.

Run through the engine path (core.plan_step once, LayerRunner.forward per layer) on the Triton provider in the CPU
interpreter, on a pretend device of 4 compute units whose table gives FP8 caches twice the 16-bit fill, as
cuda_sm90's does. Oracle: tests/support/naive.py over the caches' stored values.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the Triton provider on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
from naive import naive_paged_attention  # noqa: E402

from vllm_xpu_attn import core  # noqa: E402
from vllm_xpu_attn.kernels.api import LayerConsts, LayerTensors, PagedStep, get_provider  # noqa: E402

pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
from vllm_xpu_attn.kernels.providers.triton import launch_config, tuning  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.provider import TritonProvider  # noqa: E402

E4M3 = torch.float8_e4m3fn


@pytest.fixture
def fill_by_width(monkeypatch):
    """4 compute units; fill 1 for 16/32-bit caches, 2 for FP8 ones (the shape of cuda_sm90's entry); yields the
    split count of every paged attention launch, in launch order."""
    monkeypatch.setattr(launch_config, "device_units", lambda device: 4)
    monkeypatch.setitem(tuning.SPLIT_FILL, "cpu", {"kv16": 1, "fp8": 2})
    seen: list[int] = []
    real = TritonProvider.launcher

    class Counting:
        """The real launcher; each launch of the paged attention kernel records its split count."""

        def __init__(self, fl, splits: int):
            self.fl, self.splits = fl, splits

        def call_named(self, args: dict):
            seen.append(self.splits)
            return self.fl.call_named(args)

        def __getattr__(self, name: str):
            return getattr(self.fl, name)

    def recording(self, fn, grid, consts, *a, **kw):
        fl = real(self, fn, grid, consts, *a, **kw)
        return Counting(fl, consts["NUM_SPLITS"]) if fn.__name__ == "_paged_attn_kernel" else fl

    monkeypatch.setattr(TritonProvider, "launcher", recording)
    get_provider("triton").clear_caches()  # no configuration kept from another policy
    yield seen
    get_provider("triton").clear_caches()


def test_fp8_and_wider_layers_of_one_step_split_by_their_own_fill(fill_by_width):
    g = torch.Generator().manual_seed(5)
    hq, hkv, d, page, keys, pages = 4, 2, 16, 16, 2048, 136
    scale = 0.41  # the FP8 layer's per-tensor descale
    table = torch.randperm(pages, generator=g)[: keys // page].to(torch.int32)[None]
    k, v = torch.randn(pages, page, hkv, d, generator=g), torch.randn(pages, page, hkv, d, generator=g)
    caches = {
        torch.float32: (k, v),
        E4M3: ((k / scale).to(E4M3), (v / scale).to(E4M3)),
    }
    plan = core.plan_step(
        core.StepInputs(core.Mode.DECODE, torch.tensor([keys], dtype=torch.int32), keys, 1, page, page_table=table)
    )
    q = torch.randn(1, hq, d, generator=g)
    # the policy at 4 units, 1 sequence x 2 KV heads, 2,048 keys (tuning.split_count_for): fill 1 -> 2 splits,
    # fill 2 -> 4 splits (each split keeps >= MIN_SPLIT_KEYS = 512 keys)
    want_splits = {torch.float32: 2, E4M3: 4}
    for kv_dtype in (torch.float32, E4M3, torch.float32):  # both orders within the one step
        spec = core.LayerSpec(hq, hkv, d, d**-0.5, dtype=torch.float32, kv_dtype=kv_dtype)
        runner = core.LayerRunner(spec, "cpu", page, override="triton")
        if kv_dtype == E4M3:
            ds = torch.tensor([scale])
            runner.bind(k_descale=ds, v_descale=ds)
        kc, vc = caches[kv_dtype]
        fill_by_width.clear()
        out = runner.forward(plan, q, kc, vc)
        assert fill_by_width == [want_splits[kv_dtype]], (kv_dtype, fill_by_width)
        stored = 1.0 if kv_dtype == torch.float32 else scale
        ref, _ = naive_paged_attention(
            q,
            kc.float() * stored,
            vc.float() * stored,
            table,
            torch.tensor([keys], dtype=torch.int32),
            torch.tensor([0, 1], dtype=torch.int32),
            causal=True,
            scale=d**-0.5,
        )
        torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)


def test_mla_splits_keep_fewer_keys_than_dense_layers(monkeypatch):
    """An absorbed-MLA key holds 576 latent + rope values, a dense KV head's K + V at D 128 256: the MLA policy keeps
    fewer keys a split (tuning.MLA_MIN_SPLIT_KEYS) and may take more splits (tuning.max_splits). One sequence of
    8,192 keys, one unit (an MLA head tile / a KV head) on 132 SMs: 128 splits of 64 keys for MLA, 16 of 512 for a
    dense layer; long enough, each reaches its own cap."""
    monkeypatch.setattr(launch_config, "device_units", lambda device: 132)
    monkeypatch.setattr(launch_config, "device_family", lambda device: "cuda_sm90")
    gpu = torch.device("cuda", 0)
    assert launch_config.split_count(gpu, 1, 1, 1, 8192, mla=True) == 128 == tuning.MLA_MAX_SPLITS
    assert launch_config.split_count(gpu, 1, 1, 1, 8192, mla=False) == 16
    assert launch_config.split_count(gpu, 1, 1, 1, 1 << 20, mla=False) == tuning.MAX_SPLITS
    # batch x head tiles already fill the device: unchanged (128 heads / 64-head tiles x 64 sequences x 4,096)
    assert launch_config.split_count(gpu, 64, 2, 1, 4096, mla=True) == 4
    # what warm-up compiles for an MLA layer (variants.layer_points) reaches the MLA cap, a dense one its own
    from vllm_xpu_attn.kernels.providers.triton.variants import layer_points

    for call, top in (
        (LayerConsts.make(16, 1, 576, 512, mla=True), tuning.MLA_MAX_SPLITS),
        (LayerConsts.make(8, 8, 128), tuning.MAX_SPLITS),
    ):
        assert max(p.num_splits or 1 for p in layer_points("cuda_sm90", call, 132)) == top


def test_fp8_layers_of_a_step_take_their_own_output_columns(monkeypatch):
    """tuning.PAGED_D_TILES "decode_fp8_d<D>": within one decode step the FP8 layer launches its own output-column
    programs (CHUNK_DV 16 of 32: twice the programs), the fp32 layer the whole width, and both stay exact; the
    same with the split count given by the caller (as the warm-up gives it)."""
    monkeypatch.setitem(tuning.PAGED_D_TILES, "cpu", {"decode_fp8_d32": (0, 16)})
    seen: list[tuple[int, int]] = []
    real = TritonProvider.launcher

    def recording(self, fn, grid, consts, *a, **kw):
        if fn.__name__ == "_paged_attn_kernel":
            seen.append((consts["CHUNK_DV"], grid[2]))
        return real(self, fn, grid, consts, *a, **kw)

    monkeypatch.setattr(TritonProvider, "launcher", recording)
    prov = get_provider("triton")
    prov.clear_caches()
    g = torch.Generator().manual_seed(7)
    hq, hkv, d, page, keys, pages = 4, 2, 32, 16, 96, 12
    scale = 0.37
    table = torch.randperm(pages, generator=g)[: keys // page].to(torch.int32)[None]
    k, v = torch.randn(pages, page, hkv, d, generator=g), torch.randn(pages, page, hkv, d, generator=g)
    caches = {torch.float32: (k, v), E4M3: ((k / scale).to(E4M3), (v / scale).to(E4M3))}
    seq, cu = torch.tensor([keys], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32)
    q = torch.randn(1, hq, d, generator=g)
    plan = core.plan_step(core.StepInputs(core.Mode.DECODE, seq, keys, 1, page, page_table=table))
    step = PagedStep(cu, seq, table, 1, table.shape[1] * page, page)
    try:
        # the policy's count (1 here), then a given one; both orders of the widths within a step (each layer armed
        # once: a layer signature seen before takes the hot path, which arms nothing)
        for splits, order in ((None, (torch.float32, E4M3)), (2, (E4M3, torch.float32))):
            for kv_dtype in order:
                kc, vc = caches[kv_dtype]
                ds = torch.tensor([scale]) if kv_dtype == E4M3 else None
                seen.clear()
                if splits is None:  # the engine path
                    spec = core.LayerSpec(hq, hkv, d, d**-0.5, dtype=torch.float32, kv_dtype=kv_dtype)
                    runner = core.LayerRunner(spec, "cpu", page, override="triton")
                    if ds is not None:
                        runner.bind(k_descale=ds, v_descale=ds)
                    out = runner.forward(plan, q, kc, vc)
                else:
                    call = LayerConsts.make(hq, hkv, d, d, softmax_scale=d**-0.5)
                    layer = LayerTensors.make(call, device=q.device, kv_dtype=kv_dtype, k_descale=ds, v_descale=ds)
                    out = torch.empty_like(q)
                    prov.arm_paged(step, call, num_splits=splits).run(q, kc, vc, out, layer=layer)
                n = splits or 1
                want = (16, hkv * n * 2) if kv_dtype == E4M3 else (32, hkv * n)
                assert seen == [want], (kv_dtype, splits, seen)
                stored = 1.0 if kv_dtype == torch.float32 else scale
                ref, _ = naive_paged_attention(
                    q, kc.float() * stored, vc.float() * stored, table, seq, cu, causal=True, scale=d**-0.5
                )
                torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)
    finally:
        prov.clear_caches()


@pytest.mark.parametrize("sinks", [False, True])
def test_split_merge_by_column_programs_keeps_the_bits(monkeypatch, sinks):
    """tuning.merge_columns: the split-K merge over BLOCK_DV / BLOCK_C column programs (a 512-wide MLA row at 64
    splits on sm90) gives the bits of one program over the whole row, output and LSE, and the oracle's values."""
    g = torch.Generator().manual_seed(11)
    hq, hkv, d, page, keys, pages = 4, 2, 64, 16, 256, 20
    table = torch.randperm(pages, generator=g)[: keys // page].to(torch.int32)[None]
    k, v = torch.randn(pages, page, hkv, d, generator=g), torch.randn(pages, page, hkv, d, generator=g)
    seq, cu = torch.tensor([keys], dtype=torch.int32), torch.tensor([0, 1], dtype=torch.int32)
    q = torch.randn(1, hq, d, generator=g)
    sink = torch.randn(hq, generator=g) if sinks else None
    seen: list[tuple] = []
    real = TritonProvider.launcher

    def recording(self, fn, grid, consts, *a, **kw):
        if fn.__name__ == "_merge_splits":
            seen.append((consts["BLOCK_C"], grid[2]))
        return real(self, fn, grid, consts, *a, **kw)

    monkeypatch.setattr(TritonProvider, "launcher", recording)
    prov = get_provider("triton")
    outs = {}
    for elems in (None, 4 * 16):  # 4 splits x 64 columns in one program; then 16 columns a program, 4 programs
        if elems is not None:
            monkeypatch.setattr(tuning, "MERGE_TILE_ELEMS", elems)
        prov.clear_caches()
        outs[elems] = prov.flash_attn_with_kvcache(
            q, k, v, table, seq, cu, 1, sinks=sink, return_softmax_lse=True, num_splits=4
        )
    prov.clear_caches()
    assert seen == [(64, 1), (16, 4)], seen
    (o1, l1), (o4, l4) = outs[None], outs[4 * 16]
    assert torch.equal(o1, o4) and torch.equal(l1, l4)
    ref, ref_lse = naive_paged_attention(q, k, v, table, seq, cu, causal=True, scale=d**-0.5, sinks=sink)
    torch.testing.assert_close(o4.double(), ref, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(l4.double(), ref_lse, atol=2e-5, rtol=2e-5)
