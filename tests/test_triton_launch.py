"""FastLaunch (vllm_xpu_attn/kernels/providers/triton/launch.py) on the CPU.

Under TRITON_INTERPRET=1 (set here before triton is imported) FastLaunch must always take the normal
``fn[grid](...)`` path and launch correctly. The fast closure itself (guard, argument layout, hooks) is
checked against a fake launcher, since the interpreter has no compiled kernel; the GPU half lives in
tests/gpu/gpu_check_launch.py.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
import triton.language as tl  # noqa: E402

from vllm_xpu_attn.kernels.providers.triton import launch as L  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.launch import FastLaunch, fast_launch_supported  # noqa: E402

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cpu" if INTERPRET or not torch.cuda.is_available() else "cuda"


@triton.jit
def _add_kernel(X, Y, OUT, n, alpha, BLOCK: tl.constexpr, SCALE_Y: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    if SCALE_Y:
        y = y * alpha
    tl.store(OUT + offs, x + y, mask=mask)


@triton.jit
def _mixed_order_kernel(X, BLOCK: tl.constexpr, OUT, n):
    # a constexpr before runtime parameters: FastLaunch must not bind positionally past it
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(OUT + offs, tl.load(X + offs, mask=mask) * 2.0, mask=mask)


def test_fast_launch_supported_returns_tuple():
    res = fast_launch_supported()
    assert isinstance(res, tuple) and len(res) == 2
    ok, reason = res
    assert isinstance(ok, bool) and isinstance(reason, str) and reason
    if INTERPRET:
        assert not ok and "INTERPRET" in reason


def test_two_calls_different_tensors():
    n, block = 37, 16
    grid = (triton.cdiv(n, block), 1, 1)
    fl = FastLaunch(_add_kernel, grid, dict(BLOCK=block, SCALE_Y=True), num_warps=1, num_stages=1)
    for seed, alpha in ((0, 0.5), (1, -2.0)):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, generator=g).to(DEV)
        y = torch.randn(n, generator=g).to(DEV)
        out = torch.full((n,), float("nan"), device=DEV)
        fl(x, y, out, n, alpha)
        torch.testing.assert_close(out.cpu(), (x + y * alpha).cpu())
    if INTERPRET:
        assert not fl.armed and fl.slow_calls == 2 and "INTERPRET" in fl.reason


def test_constexpr_before_runtime_args():
    n, block = 20, 8
    fl = FastLaunch(_mixed_order_kernel, (triton.cdiv(n, block),), dict(BLOCK=block), num_warps=1, num_stages=1)
    for _ in range(2):
        x = torch.randn(n).to(DEV)
        out = torch.zeros(n, device=DEV)
        fl(x, out, n)
        torch.testing.assert_close(out.cpu(), (2 * x).cpu())


def test_bad_construction():
    with pytest.raises(TypeError):
        FastLaunch(_add_kernel, (1, 1, 1), dict(BLOCK=16, SCALE_Y=True, NOPE=1), 1, 1)
    with pytest.raises(TypeError):  # SCALE_Y has no default
        FastLaunch(_add_kernel, (1, 1, 1), dict(BLOCK=16), 1, 1)
    fl = FastLaunch(_add_kernel, (1, 1, 1), dict(BLOCK=16, SCALE_Y=False), 1, 1)
    with pytest.raises(TypeError):
        fl(torch.zeros(4), torch.zeros(4))  # too few runtime arguments


# ---- the generated fast closure, against a fake launcher -------------------------------------------


class _Rec:
    def __init__(self):
        self.runs, self.slow, self.meta_calls = [], [], 0

    def run(self, *a):
        self.runs.append(a)

    def slow_path(self, args):
        self.slow.append(args)

    def lmeta(self, grid, stream, *full):
        self.meta_calls += 1
        return ("meta", grid, len(full))


class _Hooks:  # stands in for knobs.runtime (style "knobs") / CompiledKernel (style "class")
    launch_enter_hook = None
    launch_exit_hook = None


def _closure(kinds, layout, expected, consts, check=True, style="class", hooks=_Hooks, chain=L._NoHookChain, device=0):
    rec = _Rec()
    factory = L._make_factory(tuple(kinds), tuple(layout), check, style)
    fn = factory(
        rec.run,
        "FUNC",
        "PACKED",
        (4, 2, 1),
        lambda: device,
        0,
        lambda d: 1234,
        hooks,
        chain,
        rec.slow_path,
        rec.lmeta,
        tuple(expected),
        tuple(consts),
    )
    return fn, rec


def test_fast_closure_layout_and_guard():
    t = torch.zeros(8, dtype=torch.float16)  # the allocator aligns to >= 16 bytes
    kinds = ["t", "s", "f", "s"]
    # kernel params: (T, BLOCK=constexpr, n, scale, flag, CAUSAL=constexpr)
    layout = [("a", 0), ("c", 0), ("a", 1), ("a", 2), ("a", 3), ("c", 1)]
    expected = [torch.Tensor, torch.float16, True, int, 32, type(None), None]
    fn, rec = _closure(kinds, layout, expected, consts=(64, True))
    t2 = torch.ones(8, dtype=torch.float16)
    fn(t2, 32, 0.25, None)
    assert rec.runs == [(4, 2, 1, 1234, "FUNC", "PACKED", None, None, None, t2, 64, 32, 0.25, None, True)]
    assert not rec.slow
    fn(t2, 32, 3.0, None)  # floats may change
    assert len(rec.runs) == 2 and not rec.slow
    # every specialisation change goes to the slow path instead
    bad = [
        (t2, 48, 0.25, None),  # int value changed
        (t2, 32.0, 0.25, None),  # int became float (32.0 == 32 but not the same type)
        (t2, True, 0.25, None),  # bool vs int
        (t2, 32, 1, None),  # float became int
        (t2, 32, 0.25, 0),  # None became int
        (t2.float(), 32, 0.25, None),  # dtype changed
        (t2.view(torch.uint8)[2:].view(torch.float16), 32, 0.25, None),  # pointer lost 16-byte alignment
        (torch.nn.Parameter(t2, requires_grad=False), 32, 0.25, None),  # tensor subclass
    ]
    for args in bad:
        fn(*args)
    assert len(rec.runs) == 2 and len(rec.slow) == len(bad)
    assert t.data_ptr() % 16 == 0


def test_fast_closure_unchecked_device_and_hooks():
    fn, rec = _closure(["s"], [("a", 0)], [int, 7], (), check=False)
    fn(8)  # check=False: the caller's guarantee, no guard
    assert len(rec.runs) == 1 and not rec.slow
    fn, rec = _closure(["s"], [("a", 0)], [int, 7], (), device=1)  # current device != armed device
    fn(7)
    assert not rec.runs and rec.slow == [(7,)]

    class Chain:  # a HookChain look-alike
        def __init__(self, calls):
            self.calls = calls

    class Knobs:
        class runtime:
            launch_enter_hook = Chain([])
            launch_exit_hook = Chain([])

    fn, rec = _closure(["s"], [("a", 0)], [int, 7], (), style="knobs", hooks=Knobs, chain=Chain)
    fn(7)  # empty chains: no metadata, None hooks
    assert rec.runs[-1][6:9] == (None, None, None) and rec.meta_calls == 0
    Knobs.runtime.launch_enter_hook = Chain([print])
    fn(7)  # a hook installed: the binder's exact call
    assert rec.meta_calls == 1
    assert rec.runs[-1][6:9] == (
        ("meta", (4, 2, 1), 1),
        Knobs.runtime.launch_enter_hook,
        Knobs.runtime.launch_exit_hook,
    )
    assert rec.runs[-1][9:] == (7,)


# ---- the arming path (first call -> CompiledKernel -> launcher), with a fake driver and kernel ----------


def _fake_compiled(launcher):
    """A CompiledKernel instance without a compile: just the fields FastLaunch reads."""
    from collections import namedtuple

    from triton.backends.compiler import GPUTarget
    from triton.compiler import CompiledKernel

    ck = object.__new__(CompiledKernel)
    d = ck.__dict__
    d.update(
        metadata=namedtuple("M", "target")(GPUTarget("cuda", 90, 32)),
        function="FUNC",
        packed_metadata=(4, 1, 0),
        module="MOD",
        _module_pid=-1,
        src=None,
        name="fake",
    )
    try:
        ck.run = launcher  # 3.3: a plain attribute
    except AttributeError:
        d["_run"] = launcher  # 3.4+: the `run` property returns _run
    return ck


def test_arming_with_fake_compiled_kernel(monkeypatch):
    ok, why, _ = L._static_support()
    if not ok:
        pytest.skip(f"installed triton not verified: {why}")
    from triton.runtime.driver import driver as driver_cfg
    from triton.runtime.jit import JITFunction

    if not hasattr(driver_cfg, "_active"):
        pytest.skip("this triton's DriverConfig has no _active to stand in for")

    class FakeDriver:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device):
            return 77

    launches, binder_calls = [], []
    ck = _fake_compiled(lambda *a: launches.append(a))

    class FakeJIT(JITFunction):  # a real JITFunction whose binder path is recorded, not compiled
        def __getitem__(self, grid):
            def call(**kw):
                binder_calls.append((grid, kw))
                return ck

            return call

    def py_kernel(X, BLOCK: tl.constexpr, n, scale, OUT, FLAG: tl.constexpr = False):
        pass

    monkeypatch.setattr(driver_cfg, "_active", FakeDriver())
    monkeypatch.setattr(L.env, "triton_interpreting", lambda: False)
    fn = FakeJIT(py_kernel)
    fl = FastLaunch(fn, (3, 2), dict(BLOCK=64), num_warps=4, num_stages=2)
    x, out = torch.zeros(16), torch.zeros(16)
    fl(x, 48, 0.5, out)
    assert fl.armed and fl.reason is None and fl.kernel is ck, fl.reason
    assert binder_calls == [((3, 2, 1), dict(X=x, n=48, scale=0.5, OUT=out, BLOCK=64, num_warps=4, num_stages=2))]
    assert not launches
    x2, out2 = torch.ones(16), torch.ones(16)
    fl(x2, 48, 0.75, out2)
    # every parameter in declaration order; constexprs (and defaulted ones) in their slots
    assert launches == [(3, 2, 1, 77, "FUNC", (4, 1, 0), None, None, None, x2, 64, 48, 0.75, out2, False)]
    fl(x2, 1, 0.75, out2)  # n == 1 is another specialisation: the binder again
    assert len(launches) == 1 and len(binder_calls) == 2 and fl.slow_calls == 2


def test_xpu_tiles_ask_for_the_grf_mode_the_intel_lowering_job_checked():
    """The xpu tile table carries Intel's grf_mode (ci/intel_lowering.py compiles these exact tiles); the
    launch passes it as a compile option on xpu only (CUDA's backend rejects the key)."""
    from vllm_xpu_attn.kernels.providers.triton.tuning import tile_config

    for phase in ("prefill", "decode", "mla_decode"):
        *_, opts = tile_config("xpu", phase)
        assert opts == {"grf_mode": "large"}
        assert tile_config("cuda_sm90", phase)[4] == {} and tile_config("cpu", phase)[4] == {}


def test_bind_bakes_fixed_arguments_as_addresses(monkeypatch):
    """FastLaunch.bind (the provider's per-layer hot path): fixed runtime arguments become constants,
    tensors among them their device addresses; the free ones stay in place; constexprs keep their
    slots; a different current device raises instead of launching with stale addresses."""
    ok, why, _ = L._static_support()
    if not ok:
        pytest.skip(f"installed triton not verified: {why}")
    from triton.runtime.driver import driver as driver_cfg
    from triton.runtime.jit import JITFunction

    if not hasattr(driver_cfg, "_active"):
        pytest.skip("this triton's DriverConfig has no _active to stand in for")
    current = {"dev": 0}

    class FakeDriver:
        def get_current_device(self):
            return current["dev"]

        def get_current_stream(self, device):
            return 77

    launches = []
    ck = _fake_compiled(lambda *a: launches.append(a))

    class FakeJIT(JITFunction):
        def __getitem__(self, grid):
            return lambda **kw: ck

    def py_kernel(X, BLOCK: tl.constexpr, n, T, scale, OUT, FLAG: tl.constexpr = False):
        pass

    monkeypatch.setattr(driver_cfg, "_active", FakeDriver())
    monkeypatch.setattr(L.env, "triton_interpreting", lambda: False)
    fl = FastLaunch(FakeJIT(py_kernel), (3, 2), dict(BLOCK=64), num_warps=4, num_stages=2, check=False)
    x, t, out = torch.zeros(16), torch.zeros(8), torch.zeros(16)
    with pytest.raises(RuntimeError, match="armed"):
        fl.bind({1: 48})
    fl(x, 48, t, 0.5, out)
    assert fl.takes_addresses
    bound = fl.bind({1: 48, 2: t, 3: 0.25})
    bound(x, out)
    assert launches == [(3, 2, 1, 77, "FUNC", (4, 1, 0), None, None, None, x, 64, 48, t.data_ptr(), 0.25, out, False)]
    bound(1234, 5678)  # free arguments may be addresses too
    assert launches[-1][9] == 1234 and launches[-1][14] == 5678
    # step slots: argument 2 read from the closure's first parameter on every call (per-step addresses)
    slotted = fl.bind({1: 48, 3: 0.25}, {2: 1})
    slotted((0, 111), x, out)
    assert launches[-1][9:15] == (x, 64, 48, 111, 0.25, out)
    slotted((0, 222), x, out)
    assert launches[-1][12] == 222 and len(launches) == 4
    with pytest.raises(IndexError, match="overlapping"):
        fl.bind({2: t}, {2: 0})
    # by name (what the provider uses): free names stay in place, slots read per call, the rest baked in
    named = fl.bind_named(dict(X=x, n=48, T=t, scale=0.25, OUT=out), free=("X", "OUT"))
    named(x, out)
    assert launches[-1][9:15] == (x, 64, 48, t.data_ptr(), 0.25, out)
    named_slotted = fl.bind_named(dict(X=x, n=48, T=t, scale=0.25, OUT=out), free=("X", "OUT"), slots={"T": 1})
    named_slotted((0, 333), x, out)
    assert launches[-1][12] == 333
    with pytest.raises(KeyError, match=r"\['BLOCK', 'nope'\] are not runtime parameters"):
        fl.bind_named(dict(X=x, n=48, T=t, scale=0.25, OUT=out), free=("nope", "BLOCK"))
    current["dev"] = 1
    with pytest.raises(RuntimeError, match="planned on"):
        bound(x, out)
    with pytest.raises(IndexError):
        fl.bind({9: 1})
