"""The Intel lowering job compiles what the provider launches: each of its cases (ci/intel_lowering.py) is a
variant the provider's warm-up launches for the same layer kind, and variants.enumerate_variants (the torch-free
enumeration) is exactly the set warm-up launches.

Warm-up runs here on the CPU as the xpu family (device_family patched; 8 compute units so that split-K reaches 4)
through a provider whose launcher records each variant instead of compiling it: the real launch path
(LaunchConfig, TritonLaunch._execute / _launchers), no kernel run. The job's side is the module the Intel CI runs,
imported as that CI does (it loads tuning.py / variants.py by file path, no torch).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Triton's interpreter for the whole process, as every Triton test module sets it: a module that imports the kernels
# first without it leaves compiled-mode kernels that later interpreter tests in the same process cannot call
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from vllm_xpu_attn import env
from vllm_xpu_attn.kernels.api import LayerConsts, LayerTensors

pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
from vllm_xpu_attn.kernels.providers.triton import launch_config, warmup  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.provider import TritonProvider  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ci"))
import intel_lowering as il  # noqa: E402

DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}
UNITS = 8  # compute units of the pretend device: the policy then reaches 4 splits for one or two KV heads


class _Recorded:
    """Stands in for a FastLaunch: launching records nothing more and runs nothing."""

    takes_addresses = False

    def call_named(self, args: dict) -> None:
        pass


class RecordingProvider(TritonProvider):
    """A TritonProvider whose launchers record (kernel, constexprs, warps, stages, GRF mode) and compile nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def launcher(self, fn, grid, consts, warps, stages, spec_key, options=None):
        self.seen.append(_variant(fn.__name__, consts, warps, stages, (options or {}).get("grf_mode", "default")))
        return _Recorded()


def _variant(kernel: str, consts: dict, warps: int, stages: int, grf: str) -> tuple:
    return kernel, tuple(sorted(consts.items())), warps, stages, grf


@pytest.fixture
def as_xpu(monkeypatch):
    """CPU tensors launched as the xpu family on a device of UNITS compute units, outside the interpreter."""
    monkeypatch.setattr(launch_config, "device_family", lambda device: "xpu")
    monkeypatch.setattr(warmup, "device_family", lambda device: "xpu")
    monkeypatch.setattr(launch_config, "device_units", lambda device: UNITS)
    monkeypatch.setattr(env, "triton_interpreting", lambda: False)
    warmup.reachable_splits.cache_clear()
    yield
    warmup.reachable_splits.cache_clear()


def warm_up_variants(kind, page: int) -> set:
    """What warm-up launches for a layer of ``kind`` (variants.LayerKind) at ``page``: the recorded variants."""
    q_dt, kv_dt = DTYPES[kind.q_dtype], DTYPES[kind.kv_dtype]
    call = LayerConsts.make(
        kind.num_q_heads,
        kind.num_kv_heads,
        kind.head_dim,
        kind.v_head_dim,
        window=kind.window,
        softcap=kind.softcap,
        return_lse=kind.return_lse,
        batch_invariant=kind.batch_invariant,
        mla=kind.mla,
    )
    hq, hkv, d, dv = kind.num_q_heads, kind.num_kv_heads, kind.head_dim, kind.v_head_dim
    k_cache = torch.zeros(2, page, hkv, d).to(kv_dt)
    v_cache = k_cache[..., :dv] if kind.mla else torch.zeros(2, page, hkv, dv).to(kv_dt)
    descale = (torch.ones(1, hkv) if kind.descale_per_head else torch.ones(1)) if kind.descale else None
    layer = LayerTensors.make(
        call,
        device=torch.device("cpu"),
        kv_dtype=kv_dt,
        sinks=torch.zeros(hq) if kind.sinks else None,
        alibi_slopes=torch.full((hq,), 0.5) if kind.alibi else None,
        k_descale=descale,
        v_descale=None if descale is None else descale.clone(),
        batch=1,
    )
    provider = RecordingProvider()
    q, out = torch.zeros(2, hq, d, dtype=q_dt), torch.zeros(2, hq, dv, dtype=q_dt)
    n = warmup.warm_up(provider, call, page, q, k_cache, v_cache, out, layer)
    assert n == len(warmup.layer_steps(call, torch.device("cpu"), page)), "a warm-up variant failed to launch"
    return set(provider.seen)


def _job_specs():
    tuning = il.read_tuning()
    return [(b, kw) for b, kw in il.case_specs(tuning) if b in il.KIND_POINTS]


def _case_id(spec) -> str:
    b, kw = spec
    return b + ":" + ",".join(f"{k}={v}" for k, v in kw.items())


@pytest.mark.parametrize("spec", _job_specs(), ids=_case_id)
def test_intel_case_is_a_variant_warm_up_launches(spec, as_xpu):
    """Each of the job's paged / MLA / merge cases is one of the variants the provider's warm-up launches for
    the case's layer kind, constexpr for constexpr, with the same warps, stages and GRF mode; and the torch-free
    enumeration (variants.enumerate_variants) is exactly what warm-up launched."""
    builder, kw = spec
    kind, point, page = il.KIND_POINTS[builder](**{k: v for k, v in kw.items() if k != "tag"})
    case = il.BUILDERS[builder](il.read_tuning(), "bmg", **kw)
    launched = warm_up_variants(kind, page)
    want = _variant(case["kernel"], case["constexprs"], case["num_warps"], case["num_stages"], case["grf_mode"])
    assert want in launched, (
        f"the Intel job compiles {case['name']} as {want}, which warm-up never launches for "
        f"its layer kind; warm-up launches {sorted(launched)}"
    )
    enumerated = set()
    for _, attn, merge in il.V.enumerate_variants("xpu", kind, page_size=page, compute_units=UNITS):
        for v in (attn, merge) if merge is not None else (attn,):
            enumerated.add(
                _variant(v.kernel, v.constexprs, v.num_warps, v.num_stages, v.options.get("grf_mode", "default"))
            )
    assert enumerated == launched


def test_intel_cases_cover_every_kernel_warm_up_launches(as_xpu):
    """Across the job's layer kinds, every kernel warm-up launches has cases, at one split and at several."""
    kernels, split_counts = set(), set()
    for builder, kw in _job_specs():
        kind, point, page = il.KIND_POINTS[builder](**{k: v for k, v in kw.items() if k != "tag"})
        kernels |= {v[0] for v in warm_up_variants(kind, page)}
        case = il.BUILDERS[builder](il.read_tuning(), "bmg", **kw)
        split_counts.add((case["kernel"], case["constexprs"].get("NUM_SPLITS", 0) > 1))
    assert kernels == {"_paged_attn_kernel", "_merge_splits", "_mla_attn_kernel"}
    assert {
        ("_paged_attn_kernel", False),
        ("_paged_attn_kernel", True),
        ("_mla_attn_kernel", True),
        ("_merge_splits", True),
    } <= split_counts
    assert {c["kernel"] for c in il.cases(il.read_tuning(), ["bmg"])} >= kernels


def test_intel_job_imports_no_torch_and_copies_no_rule():
    """The job runs without torch: it reads the tables and rules of tuning.py / variants.py, loaded by path
    (the very objects: an edited table is what the job compiles), and no source text of the package."""
    import subprocess

    code = (
        "import sys; sys.modules['torch'] = None; sys.path.insert(0, 'ci'); import intel_lowering as il; "
        "t = il.read_tuning(); t['xpu']['decode'] = (16, 64, 4, 2, 'large'); "
        "print(il.paged_case(t, 'bmg', phase='decode')['constexprs']['BLOCK_N'], il.T.__file__)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    n, path = r.stdout.split()
    assert n == "64" and Path(path).name == "tuning.py"
    src = (ROOT / "ci" / "intel_lowering.py").read_text()
    assert "read_literal" not in src and "tiles.py" not in src


@pytest.mark.parametrize("kv_dtype", ["bf16", "e4m3"])
def test_split_k_decode_launches_its_own_tile_on_hopper(kv_dtype):
    """On cuda_sm90 (the variants the launch path and warm-up take, enumerated torch-free): decode without split-K
    launches the "decode" tile, split-K decode over a 16-bit cache the "decode_split" tile, an FP8 cache the
    "decode_fp8" tile at every split count."""
    from vllm_xpu_attn.kernels.providers.triton import tuning
    from vllm_xpu_attn.kernels.providers.triton.variants import LayerKind, enumerate_variants

    kind = LayerKind(32, 8, 128, 128, kv_dtype=kv_dtype, descale=kv_dtype != "bf16")
    decode = {
        (v.constexprs["NUM_SPLITS"], v.constexprs["BLOCK_N"], v.num_warps, v.num_stages)
        for point, v, _ in enumerate_variants("cuda_sm90", kind, page_size=64, compute_units=132)
        if point.phase == "decode"
    }
    table = tuning.TUNING["cuda_sm90"]
    assert {n for n, *_ in decode} >= {1, 2, 32}, decode
    for n, block_n, warps, stages in decode:
        phase = "decode_fp8" if kv_dtype != "bf16" else "decode_split" if n > 1 else "decode"
        assert (block_n, warps, stages) == table[phase][1:4], (n, phase, decode)


@pytest.mark.parametrize(
    "feature, phase",
    [({"window": (1023, 0)}, "decode_window"), ({"window": (1023, 0), "softcap": 30.0}, "decode_window"),
     ({"softcap": 30.0}, "decode_feature"), ({"sinks": True}, "decode_feature")],
)  # fmt: skip
def test_feature_decode_launches_its_own_tile_on_hopper(feature, phase):
    """On cuda_sm90: decode of a sliding-window layer (softcap or not) without split-K launches the "decode_window"
    tile, of a softcap / sinks layer the "decode_feature" tile; split-K decode keeps the "decode_split" tile."""
    from vllm_xpu_attn.kernels.providers.triton import tuning
    from vllm_xpu_attn.kernels.providers.triton.variants import LayerKind, enumerate_variants

    kind = LayerKind(32, 8, 128, 128, **feature)
    decode = {
        (v.constexprs["NUM_SPLITS"], v.constexprs["BLOCK_N"], v.num_warps, v.num_stages)
        for point, v, _ in enumerate_variants("cuda_sm90", kind, page_size=64, compute_units=132)
        if point.phase == "decode"
    }
    table = tuning.TUNING["cuda_sm90"]
    assert {n for n, *_ in decode} >= {1, 2}, decode
    for n, block_n, warps, stages in decode:
        want = phase if n == 1 else "decode_split"
        assert (block_n, warps, stages) == table[want][1:4], (n, want, decode)
