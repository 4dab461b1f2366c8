"""sgl-kernel-xpu's MLA decode (``flash_mla_decode``), the ``sgl_kernel_mla`` provider, against the strict
model in tests/fakes/sgl_kernel (attention.py + common_ops.py, every rule citing sgl-kernel-xpu@9cf16bf9)
and an fp64 oracle: absorbed MLA = MQA over the latent rows, checked once more end to end against the
paper's naive MLA (tests/support/naive_mla.py).

Randomized over batch, lengths, page sizes 16/32/64/128, heads 16/128, bf16/fp16, the vendor's own
split count and none; selection tests (decode picks sgl_kernel_mla, extend/prefill does not, FP8 latent,
256 heads and page 8 refused, a USE_MLA=OFF build refused, the FA3 provider ``sgl_kernel`` never takes an
MLA layer); the fake's rules the wrapper has to meet.
"""

import random

import pytest
import torch
from naive_mla import naive_mla
from vendor_fakes import reset_instances as _reset_instances  # noqa: E402
from vendor_fakes import vendor_fakes  # noqa: E402

from vllm_xpu_attn.core import LayerRunner, LayerSpec, MLADims, Mode, StepInputs, plan_step
from vllm_xpu_attn.kernels.api import (
    KernelRequest,
    LayerConsts,
    PagedStep,
    get_provider,
    reload_provider,
    select_provider,
)
from vllm_xpu_attn.kernels.api import registry as reg

SGL_BUILDS = ("9cf16bf9", "pr491")  # tests/fakes/sgl_kernel/flash_attn.py BUILD: both are USE_MLA (default) builds
DIMS = MLADims(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)  # DeepSeek-V2/V3
SCALE = 192**-0.5 * 1.2  # the engines' 192-based scale times a YaRN-like mscale: never 1/sqrt(576)
D, DV = 576, 512


@pytest.fixture(scope="module", autouse=True)
def fakes():
    with vendor_fakes():
        yield


@pytest.fixture
def no_mla_build(monkeypatch):
    """A sgl-kernel-xpu build with USE_MLA=OFF: the Python wrappers exist, the ops do not."""
    from sgl_kernel import common_ops

    monkeypatch.setattr(common_ops, "USE_MLA", False)
    common_ops.register()
    reload_provider("sgl_kernel_mla")
    yield
    monkeypatch.setattr(common_ops, "USE_MLA", True)
    common_ops.register()
    reload_provider("sgl_kernel_mla")


def mla_req(**kw):
    base = dict(
        device_type="xpu",
        dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        head_dim=D,
        num_q_heads=16,
        num_kv_heads=1,
        page_size=64,
        v_head_dim=DV,
        phase="decode",
        mla=True,
    )
    base.update(kw)
    return KernelRequest(**base)


# ---- selection ------------------------------------------------------------------------------
@pytest.mark.parametrize("build", SGL_BUILDS)
def test_mla_decode_picks_sgl_kernel_mla(build, monkeypatch):
    import sgl_kernel.flash_attn as fa

    monkeypatch.setattr(fa, "BUILD", build)
    _reset_instances()
    for page in (16, 32, 64, 128):
        for heads in (1, 16, 128):
            for dtype in (torch.bfloat16, torch.float16):
                r = mla_req(page_size=page, num_q_heads=heads, dtype=dtype, kv_dtype=dtype)
                assert select_provider(r).name == "sgl_kernel_mla", reg.explain(r)


REFUSED = [  # (request overrides, a phrase of sgl_kernel_mla's reason)
    (dict(phase="prefill"), "decode phase only"),
    (dict(phase="any"), "decode phase only"),
    (dict(kv_dtype=torch.float8_e4m3fn), "no FP8 latent"),
    (dict(kv_dtype=torch.float8_e5m2), "no FP8 latent"),
    (dict(num_q_heads=256), "256 heads > 128"),
    (dict(page_size=8), "page size 8"),
    (dict(page_size=1), "page size 1"),
    (dict(page_size=256), "page size 256"),
    (dict(dtype=torch.float32, kv_dtype=torch.float32), "not float16/bfloat16"),
    (dict(return_lse=True), "no LSE"),
    (dict(batch_invariant=True), "batch-invariant"),
    (dict(head_dim=320, v_head_dim=256), "kv_lora_rank 512 + rope 64"),
    (dict(softcap=30.0), "no softcap"),
    (dict(causal=False), "no non-causal"),
    (dict(window=(127, 0)), "no window"),
    (dict(has_sinks=True), "no sinks"),
    (dict(has_alibi=True), "no ALiBi"),
    (dict(num_kv_heads=2, num_q_heads=32), "Hkv=2"),
]


@pytest.mark.parametrize("over,why", REFUSED, ids=[str(o) for o, _ in REFUSED])
def test_mla_requests_outside_the_vendor_limits_are_refused(over, why):
    r = mla_req(**over)
    reasons = get_provider("sgl_kernel_mla").not_supported_reasons(r)
    assert any(why in x for x in reasons), reasons
    rows = reg.explain(r)
    chosen = next((n for n, rs in rows if not rs), None)
    assert chosen not in (None, "sgl_kernel", "sgl_kernel_mla"), rows


def test_mla_extend_goes_to_triton_and_decode_to_sgl_kernel_mla():
    for page in (16, 64):
        spec = LayerSpec.for_mla(128, DIMS, SCALE, dtype=torch.bfloat16, kv_dtype=torch.bfloat16)
        runner = LayerRunner(spec, "xpu", page)
        assert runner.decode_provider.name == "sgl_kernel_mla"
        assert runner.prefill_provider.name == "triton"  # extend / verify / mixed: the absorbed Triton kernel
        # the un-absorbed prefill (192/128, LSE)
        assert runner.mha_provider.name not in ("sgl_kernel", "sgl_kernel_mla")
    spec = LayerSpec.for_mla(16, DIMS, SCALE, dtype=torch.bfloat16, kv_dtype=torch.float8_e4m3fn)
    assert LayerRunner(spec, "xpu", 64).decode_provider.name == "triton"  # FP8 latent: refused by the vendor
    # speculative top-k > 1 decode needs the LSE (cascade): not the vendor's
    spec = LayerSpec.for_mla(16, DIMS, SCALE, dtype=torch.bfloat16, kv_dtype=torch.bfloat16)
    assert LayerRunner(spec, "xpu", 64, with_spec_decode=True).decode_provider.name != "sgl_kernel_mla"


def test_the_two_operators_keep_to_their_own_layers():
    """sgl_kernel (the FA3 API) never takes an MLA layer, sgl_kernel_mla never a plain one, whatever its shape."""
    fa, mla = get_provider("sgl_kernel"), get_provider("sgl_kernel_mla")
    same_shape = mla_req(mla=False)  # 576/512 without the MLA flag is plain attention with Dv != D: FA path
    reasons = fa.not_supported_reasons(same_shape)
    assert any("no dv support" in x for x in reasons) and not any("MLA" in x for x in reasons), reasons
    assert any("not an MLA layer" in x for x in mla.not_supported_reasons(same_shape))
    plain = KernelRequest(
        device_type="xpu",
        dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        head_dim=128,
        num_q_heads=32,
        num_kv_heads=8,
        page_size=64,
        phase="decode",
    )
    assert fa.not_supported_reasons(plain) == []
    assert mla.not_supported_reasons(plain) == [
        "not an MLA layer (flash_mla_decode runs absorbed MLA over a latent cache only)"
    ]
    assert mla.not_supported_reasons(mla_req()) == []
    assert any("sgl_kernel_mla serves" in x for x in fa.not_supported_reasons(mla_req()))
    with pytest.raises(ValueError, match="not an MLA layer"):
        mla.arm_paged(_step([5], 64, 2), LayerConsts.make(16, 1, 128, softmax_scale=SCALE))


def test_declarations_are_the_limit_table():
    """The class declarations (what doctor and the tests read) and the refusals both come from one table."""
    from vllm_xpu_attn.kernels.providers.xpu_libs.sgl_kernel_mla import LIMITS
    from vllm_xpu_attn.kernels.providers.xpu_libs.sgl_kernel_mla import SglKernelMlaProvider as P

    assert (LIMITS.kv_lora_rank, LIMITS.rope_dim, LIMITS.max_q_heads) == (512, 64, 128)  # attention.py:77-84
    assert LIMITS.page_sizes == (16, 32, 64, 128)  # mla_decode.cpp:162-166
    assert P.head_dims == {D} and P.dtypes == P.kv_dtypes == {torch.float16, torch.bfloat16}
    assert P.features == LIMITS.features == {"mla", "dv"}


def test_build_without_use_mla_is_refused_and_fa_still_served(no_mla_build):
    import sgl_kernel

    prov = get_provider("sgl_kernel_mla")
    reasons = prov.not_supported_reasons(mla_req())
    assert any("USE_MLA" in x for x in reasons), reasons
    assert select_provider(mla_req()).name == "triton"
    plain = KernelRequest(
        device_type="xpu",
        dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        head_dim=128,
        num_q_heads=32,
        num_kv_heads=8,
        page_size=64,
        phase="decode",
    )
    assert select_provider(plain).name == "sgl_kernel"
    # the Python wrapper is there in every build; its op is not (attention.py:121 vs torch_extension_sycl.cc:361)
    assert callable(sgl_kernel.flash_mla_decode)
    with pytest.raises(AttributeError):
        sgl_kernel.flash_mla_get_workspace_size(128, 1, 16, 64, -1)


# ---- results against the oracle ------------------------------------------------------------
def _case(seed: int):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    batch = rng.randint(1, 4)
    page = rng.choice((16, 32, 64, 128))
    heads = rng.choice((16, 128))
    dtype = rng.choice((torch.bfloat16, torch.float16))
    long = rng.random() < 0.3
    lens = [rng.randint(1, 1100 if long else 300) for _ in range(batch)]
    pages = [-(-k // page) for k in lens]
    width = max(pages) + rng.choice((0, 0, 1, 3))  # engines' tables may be wider than needed, rarely padded
    n_pages = sum(pages) + 3
    perm = torch.randperm(n_pages, generator=g)
    table = torch.full((batch, width), 0, dtype=torch.int32)
    at = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[at : at + n].to(torch.int32)
        at += n
    c_kv = [torch.randn(k, DV, generator=g).to(dtype) for k in lens]
    k_rope = [torch.randn(k, D - DV, generator=g).to(dtype) for k in lens]
    q = torch.randn(batch, heads, D, generator=g).to(dtype)
    return dict(
        batch=batch,
        page=page,
        heads=heads,
        dtype=dtype,
        lens=lens,
        table=table,
        n_pages=n_pages,
        c_kv=c_kv,
        k_rope=k_rope,
        q=q,
        use_out=rng.random() < 0.5,
    )


def _slots(table, b, n, page):
    pos = torch.arange(n)
    return table[b, pos // page].long() * page + pos % page


def _oracle(q_b, c_kv, k_rope, scale):
    """fp64 MQA over one sequence's latent rows: scores against [c_kv ; k_rope], values c_kv."""
    keys = torch.cat([c_kv, k_rope], dim=-1).double()
    p = torch.softmax(q_b.double() @ keys.T * scale, dim=-1)
    return p @ c_kv.double()


def _run_decode(c, runner):
    cache = torch.zeros(c["n_pages"], c["page"], 1, D, dtype=c["dtype"])
    for b, k in enumerate(c["lens"]):
        runner.write_latent(c["c_kv"][b], c["k_rope"][b], cache, _slots(c["table"], b, k, c["page"]))
    plan = plan_step(
        StepInputs(
            Mode.DECODE,
            torch.tensor(c["lens"], dtype=torch.int32),
            max(c["lens"]),
            c["batch"],
            c["page"],
            page_table=c["table"],
        )
    )
    out = torch.full((c["batch"], c["heads"], DV), float("nan"), dtype=c["dtype"]) if c["use_out"] else None
    res = runner.forward_mla(plan, c["q"], cache, out)
    if out is not None:
        assert res.data_ptr() == out.data_ptr(), "the engine's out buffer was not written"
    return res


SEEDS = range(14)


@pytest.mark.parametrize("splits", [-1, 1], ids=["vendor_splits", "no_split"])
def test_flash_mla_decode_matches_oracle(splits, monkeypatch):
    from _common import CALLS

    prov = get_provider("sgl_kernel_mla")
    monkeypatch.setattr(prov, "num_kv_splits", splits)
    n_calls, used_splits, pages_seen = len(CALLS), set(), set()
    for seed in SEEDS:
        c = _case(seed)
        spec = LayerSpec.for_mla(c["heads"], DIMS, SCALE, dtype=c["dtype"], kv_dtype=c["dtype"])
        runner = LayerRunner(spec, "xpu", c["page"])
        assert runner.decode_provider is prov
        got = _run_decode(c, runner)
        assert got.shape == (c["batch"], c["heads"], DV) and got.dtype == c["dtype"]
        tol = 2e-2 if c["dtype"] == torch.bfloat16 else 3e-3
        for b in range(c["batch"]):
            want = _oracle(c["q"][b], c["c_kv"][b], c["k_rope"][b], SCALE)
            torch.testing.assert_close(got[b].double(), want, atol=tol, rtol=tol, msg=lambda m: f"seed {seed}: {m}")
        mine = [info for lib, fn, info in CALLS[n_calls:] if fn == "flash_mla_decode"]
        assert mine, "the vendor's flash_mla_decode was not called"
        used_splits |= {i["splits"] for i in mine}
        pages_seen.add(c["page"])
        n_calls = len(CALLS)
    assert pages_seen == {16, 32, 64, 128}
    if splits == 1:
        assert used_splits == {1}
    else:
        assert max(used_splits) > 1, "the vendor's split-KV path was never exercised"


def test_end_to_end_against_the_papers_naive_mla():
    """q_nope absorbed through W_UK, the output through W_UV, against naive MLA (no absorption)."""
    g = torch.Generator().manual_seed(3)
    heads, dtype, page = 16, torch.bfloat16, 16
    lens = [9, 23, 1]
    table = torch.tensor([[4, 0], [1, 2], [3, 0]], dtype=torch.int32)
    spec = LayerSpec.for_mla(heads, DIMS, SCALE, dtype=dtype, kv_dtype=dtype)
    runner = LayerRunner(spec, "xpu", page)
    c_kv = [(torch.randn(k, DV, generator=g) * 0.5).to(dtype) for k in lens]
    k_rope = [(torch.randn(k, 64, generator=g) * 0.5).to(dtype) for k in lens]
    q_nope = (torch.randn(len(lens), heads, 128, generator=g) * 0.5).to(dtype)
    q_rope = (torch.randn(len(lens), heads, 64, generator=g) * 0.5).to(dtype)
    w_uk = (torch.randn(heads, 128, DV, generator=g) * DV**-0.5).to(dtype)
    w_uv = (torch.randn(heads, 128, DV, generator=g) * DV**-0.5).to(dtype)
    cache = torch.zeros(5, page, 1, D, dtype=dtype)
    for b, k in enumerate(lens):
        runner.write_latent(c_kv[b], k_rope[b], cache, _slots(table, b, k, page))
    plan = plan_step(
        StepInputs(Mode.DECODE, torch.tensor(lens, dtype=torch.int32), max(lens), len(lens), page, page_table=table)
    )
    q_abs = torch.cat([torch.einsum("thn,hnc->thc", q_nope.float(), w_uk.float()).to(dtype), q_rope], dim=-1)
    out_lat = runner.forward_mla(plan, q_abs, cache)
    got = torch.einsum("thc,hvc->thv", out_lat.double(), w_uv.double())
    for b, k in enumerate(lens):
        want = naive_mla(
            q_nope[b : b + 1], q_rope[b : b + 1], c_kv[b], k_rope[b], w_uk, w_uv, q_start=k - 1, scale=SCALE
        )
        torch.testing.assert_close(got[b : b + 1], want, atol=3e-2, rtol=3e-2)


# ---- the per-step part: padded table, int32 lengths, the provider's workspace -------------------
def _step(lens, page, width, n_pages=64, int64=False):
    table = torch.arange(len(lens) * width, dtype=torch.int64 if int64 else torch.int32).reshape(len(lens), width)
    table %= n_pages
    lens_t = torch.tensor(lens, dtype=torch.int64 if int64 else torch.int32)
    return PagedStep(torch.arange(len(lens) + 1, dtype=torch.int32), lens_t, table, 1, width * page, page)


def _call(heads=16, **kw):
    return LayerConsts.make(heads, 1, D, DV, softmax_scale=SCALE, mla=True, **kw)


def test_launch_pads_the_table_on_device_without_host_sync(monkeypatch):
    prov = get_provider("sgl_kernel_mla")
    step = _step([20, 5], 16, 3, int64=True)

    def no_sync(*a, **k):
        raise AssertionError("host sync in the per-step part")

    for name in ("tolist", "item", "cpu", "numpy", "__bool__", "__int__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, no_sync)
    launch = prov.arm_paged(step, _call())
    monkeypatch.undo()
    t = launch.step.page_table
    assert t.dtype == torch.int32 and t.is_contiguous() and t.shape == (2, 8)  # 3 -> 8 = 128 / 16
    assert torch.equal(t[:, :3], step.page_table.int()) and not t[:, 3:].any()
    assert launch.step.cache_seqlens.dtype == torch.int32 and launch.step.cache_seqlens.is_contiguous()
    for page, width, want in ((128, 3, 3), (64, 3, 4), (32, 4, 4), (32, 5, 8), (16, 0, 8)):
        assert prov.arm_paged(_step([1] * 2, page, width), _call()).step.page_table.shape[1] == want


def test_workspace_is_sized_by_the_vendor_owned_and_reused(monkeypatch):
    from sgl_kernel import common_ops

    reload_provider("sgl_kernel_mla")  # a fresh provider: no workspace grown by earlier tests
    prov = get_provider("sgl_kernel_mla")
    monkeypatch.setattr(prov, "num_kv_splits", 1)
    assert prov.arm_paged(_step([40], 64, 2), _call()).workspace.numel() == 0  # 0 bytes with one split (cpp:202)
    monkeypatch.setattr(prov, "num_kv_splits", -1)
    a = prov.arm_paged(_step([700, 30], 128, 6), _call(heads=16))
    splits = common_ops.set_split_kv(2, 16, 6 * 128, 128)
    assert splits == 6 and a.workspace.numel() >= common_ops.split_kv_workspace_bytes(2, 16, splits) > 0
    b = prov.arm_paged(_step([700, 30], 128, 6), _call(heads=16))
    assert b.workspace.data_ptr() == a.workspace.data_ptr(), "the workspace is not reused across steps"
    small = prov.arm_paged(_step([30], 64, 2), _call(heads=16))  # needs less: the same buffer
    assert small.workspace.data_ptr() == a.workspace.data_ptr()
    reload_provider("sgl_kernel_mla")


def test_calls_the_declarations_exclude_raise_value_errors():
    prov = get_provider("sgl_kernel_mla")
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="one query per request"):
        prov.arm_paged(
            PagedStep(
                torch.tensor([0, 2], dtype=torch.int32),
                torch.tensor([5], dtype=torch.int32),
                torch.zeros(1, 1, dtype=torch.int32),
                2,
                64,
                64,
            ),
            _call(),
        )
    with pytest.raises(ValueError, match="heads > 128"):
        prov.arm_paged(_step([5], 64, 2), _call(heads=256))
    with pytest.raises(ValueError, match="page size 8"):
        prov.arm_paged(_step([5], 8, 16), _call())
    with pytest.raises(ValueError, match="LSE"):
        prov.arm_paged(_step([5], 64, 2), _call(return_lse=True))
    launch = prov.arm_paged(_step([5, 7], 64, 2, n_pages=4), _call())
    q = torch.randn(2, 16, D, generator=g).bfloat16()
    cache = torch.randn(4, 64, 1, D, generator=g).bfloat16()
    out = torch.empty(2, 16, DV, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="first 512 columns"):
        launch.run(q, cache, cache.clone()[..., :DV], out)
    strided = torch.randn(8, 64, 1, D, generator=g).bfloat16()[::2]  # a view into a larger buffer
    with pytest.raises(ValueError, match="contiguous latent cache"):
        launch.run(q, strided, strided[..., :DV], out)
    with pytest.raises(ValueError, match="one query per request"):
        launch.run(q[:1], cache, cache[..., :DV], out[:1])
    with pytest.raises(ValueError, match="not float16/bfloat16"):
        launch.run(q.float(), cache.float(), cache.float()[..., :DV], out.float())
    assert launch.run(q, cache, cache[..., :DV], out) is out  # the well-formed call runs, into out


# ---- the fake enforces the vendor's rules (so the wrapper's work is needed) ----------------------
def _vendor_inputs(batch=2, heads=16, page=16, width=8, dtype=torch.bfloat16, n_pages=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q_nope = torch.randn(batch, heads, DV, generator=g).to(dtype)
    q_pe = torch.randn(batch, heads, 64, generator=g).to(dtype)
    kv = torch.randn(n_pages, page, D, generator=g).to(dtype)
    lens = torch.full((batch,), min(width * page, 20), dtype=torch.int32)
    table = (torch.arange(batch * width, dtype=torch.int32).reshape(batch, width) % n_pages).contiguous()
    return q_nope, q_pe, kv, lens, table, torch.empty(0, dtype=torch.uint8)


def test_fake_enforces_the_vendor_rules():
    import sgl_kernel
    from _common import VendorError

    f = sgl_kernel.flash_mla_decode
    q_nope, q_pe, kv, lens, table, ws = _vendor_inputs()
    assert f(q_nope, q_pe, kv, lens, table, ws, SCALE).shape == (2, 16, DV)  # width 8 = 128 / 16: accepted
    with pytest.raises(AssertionError):  # attention.py:101: an unpadded table (3 pages of 16) is refused
        f(q_nope, q_pe, kv, lens, table[:, :3].contiguous(), ws, SCALE)
    with pytest.raises(AssertionError, match="H must be <= 128"):  # attention.py:83-84
        f(*_vendor_inputs(heads=256)[:5], ws, SCALE)
    with pytest.raises(AssertionError):  # attention.py:107: an FP8 latent cache with a bf16 query
        f(q_nope, q_pe, kv.to(torch.float8_e4m3fn), lens, table, ws, SCALE)
    with pytest.raises(AssertionError):  # attention.py:99: one query per page-table row
        f(q_nope, q_pe, kv, lens, table[:1], ws, SCALE)
    with pytest.raises(AssertionError, match="int32"):  # attention.py:108-110
        f(q_nope, q_pe, kv, lens.long(), table, ws, SCALE)
    with pytest.raises(AssertionError):  # attention.py:79-81: 512 + 64 hard-coded
        f(q_nope[..., :256].contiguous(), q_pe, kv, lens, table, ws, SCALE)
    q8, p8, kv8, l8, t8, _ = _vendor_inputs(page=8, width=16)
    with pytest.raises(VendorError, match="Unsupported page size for MLA decode: 8"):  # mla_decode.cpp:162-166
        f(q8, p8, kv8, l8, t8, ws, SCALE)
    with pytest.raises(VendorError, match="must be contiguous"):  # mla_decode.cpp:148 CHECK_INPUT
        f(q_nope, q_pe, torch.randn(32, 16, D).bfloat16()[::2], lens, table, ws, SCALE)
    with pytest.raises(VendorError, match="workspace too small"):  # mla_decode_types.hpp:362-378
        f(q_nope, q_pe, kv, lens, table, ws, SCALE, 4)
    with pytest.raises(VendorError, match="expected int"):  # torch_extension_sycl.cc:364-367 schema
        f(q_nope, q_pe, kv, lens, table, ws, SCALE, 1.5)
    assert sgl_kernel.flash_mla_get_workspace_size(1024, 2, 16, 64, 1) == 0  # mla_decode.cpp:202-203
    with pytest.raises(AssertionError):  # attention.py:143
        sgl_kernel.flash_mla_get_workspace_size(1024, 0, 16, 64, -1)
    with pytest.raises(VendorError, match="Unsupported page size"):  # mla_decode.cpp:196-199
        sgl_kernel.flash_mla_get_workspace_size(1024, 2, 16, 8, -1)


def test_fake_split_kv_matches_no_split():
    """The modelled split-KV path (partials rounded to the element type, merged in fp32) stays close to one pass."""
    import sgl_kernel

    q_nope, q_pe, kv, _, table, _ = _vendor_inputs(batch=3, page=16, width=16, n_pages=48, seed=2)
    lens = torch.tensor([250, 17, 129], dtype=torch.int32)
    one = sgl_kernel.flash_mla_decode(q_nope, q_pe, kv, lens, table, torch.empty(0, dtype=torch.uint8), SCALE, 1)
    ws = torch.empty(sgl_kernel.flash_mla_get_workspace_size(256, 3, 16, 16, 5), dtype=torch.uint8)
    five = sgl_kernel.flash_mla_decode(q_nope, q_pe, kv, lens, table, ws, SCALE, 5)
    torch.testing.assert_close(five.float(), one.float(), atol=2e-2, rtol=2e-2)
