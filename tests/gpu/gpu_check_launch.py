"""GPU check of FastLaunch (vllm_xpu_attn/kernels/providers/triton/launch.py): correctness and host launch cost.

    python tests/gpu/gpu_check_launch.py            # prints one JSON object; exit status 1 on a mismatch

Run on a CUDA (or Intel XPU) machine, not in CI (named gpu_check_* so pytest never collects it).
It (1) checks FastLaunch against the binder path over 100 calls whose tensors and float scalars change,
plus calls that must fall back (an int changed, a misaligned pointer, a side stream, an installed launch
hook), and (2) measures host time per launch of a 46-argument kernel shaped like the paged-attention
kernel (14 pointers, 14 ints, 2 floats, 16 constexprs): (a) ``kernel[grid](...)``, (b) FastLaunch with
its per-call guard, (c) FastLaunch(check=False). If the fast path is unsupported, the JSON says why.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402

if os.environ.get("TRITON_INTERPRET", "0") == "1":
    raise SystemExit("gpu_check_launch: unset TRITON_INTERPRET (it measures compiled kernels)")
if torch.cuda.is_available():
    DEV = "cuda"
elif getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
    DEV = "xpu"
else:
    raise SystemExit("gpu_check_launch: needs a CUDA or XPU device")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from vllm_xpu_attn.kernels.providers.triton.launch import FastLaunch, fast_launch_supported  # noqa: E402

sync = torch.cuda.synchronize if DEV == "cuda" else torch.xpu.synchronize


@triton.jit
def _wide_kernel(
    X,
    Y,
    OUT,
    P3,
    P4,
    P5,
    P6,
    P7,
    P8,
    P9,
    P10,
    P11,
    P12,
    P13,
    n,
    s1,
    s2,
    s3,
    s4,
    s5,
    s6,
    s7,
    s8,
    s9,
    s10,
    s11,
    s12,
    s13,
    alpha,
    beta,
    BLOCK: tl.constexpr,
    C1: tl.constexpr,
    C2: tl.constexpr,
    C3: tl.constexpr,
    C4: tl.constexpr,
    C5: tl.constexpr,
    C6: tl.constexpr,
    C7: tl.constexpr,
    C8: tl.constexpr,
    C9: tl.constexpr,
    C10: tl.constexpr,
    C11: tl.constexpr,
    C12: tl.constexpr,
    C13: tl.constexpr,
    C14: tl.constexpr,
    USE_BETA: tl.constexpr,
):
    # out = alpha * x + beta * y + s1 (only a few arguments matter; the rest cost launch time only)
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    acc = alpha * x + s1
    if USE_BETA:
        acc += beta * tl.load(Y + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + offs, acc.to(OUT.dtype.element_ty), mask=mask)


BLOCK = 256
CONSTS = dict(
    BLOCK=BLOCK,
    C1=1,
    C2=2,
    C3=3,
    C4=4,
    C5=5,
    C6=6,
    C7=7,
    C8=8,
    C9=9,
    C10=10,
    C11=11,
    C12=12,
    C13=13,
    C14=14,
    USE_BETA=True,
)
WARPS, STAGES = 4, 2


def _args(n, x, y, out, spare, alpha, beta, s1=3):
    ptrs = (x, y, out) + tuple(spare)
    ints = (n, s1) + tuple(16 * (i + 2) + i for i in range(12))  # a mix of divisible / not
    return ptrs + ints + (float(alpha), float(beta))


def _binder(grid, args):
    return _wide_kernel[grid](*args, **CONSTS, num_warps=WARPS, num_stages=STAGES)


def _expect(x, y, alpha, beta, s1=3):
    return (alpha * x.float() + beta * y.float() + s1).to(x.dtype)


def check_correctness(report):
    n = 10_000
    grid = (triton.cdiv(n, BLOCK), 1, 1)
    spare = [torch.empty(64, device=DEV) for _ in range(11)]
    fl = FastLaunch(_wide_kernel, grid, CONSTS, WARPS, STAGES)
    errors = []
    for i in range(100):
        dtype = torch.float16  # fixed: a dtype change is another specialisation (it would fall back)
        x = torch.randn(n, device=DEV, dtype=dtype)
        y = torch.randn(n, device=DEV, dtype=dtype)
        alpha, beta = 0.5 + i * 0.01, -1.0 + i * 0.02
        out_fast = torch.full((n,), float("nan"), device=DEV, dtype=dtype)
        out_ref = torch.full((n,), float("nan"), device=DEV, dtype=dtype)
        fl(*_args(n, x, y, out_fast, spare, alpha, beta))
        _binder(grid, _args(n, x, y, out_ref, spare, alpha, beta))
        sync()
        if not torch.equal(out_fast, out_ref):
            errors.append(
                f"call {i}: FastLaunch != binder (max diff {(out_fast.float() - out_ref.float()).abs().max().item()})"
            )
        if not torch.allclose(out_ref.float(), _expect(x, y, alpha, beta).float(), atol=1e-2, rtol=1e-2):
            errors.append(f"call {i}: binder output wrong")
    report["armed_after_100"] = fl.armed
    report["reason"] = fl.reason
    report["slow_calls_in_100"] = fl.slow_calls  # 1 expected (the first) when armed

    # calls that break the specialisation must fall back (check=True) and still be right
    x = torch.randn(n, device=DEV, dtype=torch.float16)
    y = torch.randn(n, device=DEV, dtype=torch.float16)
    before = fl.slow_calls
    out = torch.zeros(n, device=DEV, dtype=torch.float16)
    fl(*_args(n, x, y, out, spare, 1.0, 1.0, s1=1))  # s1 == 1 -> Triton bakes it in as constexpr 1
    sync()
    if not torch.allclose(out.float(), _expect(x, y, 1.0, 1.0, s1=1).float(), atol=1e-2, rtol=1e-2):
        errors.append("int change: wrong output")
    buf = torch.zeros(n + 8, device=DEV, dtype=torch.float16)
    mis = buf[1 : n + 1]  # 2-byte offset: loses 16-byte alignment
    fl(*_args(n, x, y, mis, spare, 1.0, 1.0))
    sync()
    if not torch.allclose(mis.float(), _expect(x, y, 1.0, 1.0).float(), atol=1e-2, rtol=1e-2):
        errors.append("misaligned pointer: wrong output")
    report["fallbacks_for_2_breaking_calls"] = fl.slow_calls - before
    if fl.armed and fl.slow_calls - before != 2:
        errors.append(f"expected 2 fallbacks, got {fl.slow_calls - before}")

    # the current stream is honoured: the input is written on a busy side stream, then read by the
    # kernel; launched on any other stream the kernel would read the zeros before the copy lands
    if DEV == "cuda":
        side = torch.cuda.Stream()
        xin = torch.zeros_like(x)
        out = torch.zeros(n, device=DEV, dtype=torch.float16)
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~tens of ms of GPU time
            xin.copy_(x)
            fl(*_args(n, xin, y, out, spare, 2.0, 0.5))
        side.synchronize()
        torch.cuda.synchronize()
        if not torch.allclose(out.float(), _expect(x, y, 2.0, 0.5).float(), atol=1e-2, rtol=1e-2):
            errors.append("side stream: wrong output (launched on the wrong stream?)")

    # an installed launch hook sees the fast launches, as it sees the binder's
    report["hook"] = _check_hook(fl, n, x, y, spare, errors)
    report["errors"] = errors
    return not errors


def _check_hook(fl, n, x, y, spare, errors):
    seen = []

    def hook(metadata):
        # Triton 3.6 hands a LazyDict whose get() materialises the dict; older ones a dict
        d = metadata.get() if type(metadata).__name__ == "LazyDict" else metadata
        seen.append(d.get("name") if isinstance(d, dict) else (None if d is None else str(d)))

    try:
        from triton import knobs

        chain = knobs.runtime.launch_enter_hook
        if hasattr(chain, "add"):  # 3.6+: HookChain
            chain.add(hook)
            undo = lambda: chain.remove(hook)  # noqa: E731
        else:  # 3.4 / 3.5: a plain Optional hook
            knobs.runtime.launch_enter_hook = hook
            undo = lambda: setattr(knobs.runtime, "launch_enter_hook", None)  # noqa: E731
    except ImportError:  # 3.3
        from triton.compiler import CompiledKernel

        CompiledKernel.launch_enter_hook = hook
        undo = lambda: setattr(CompiledKernel, "launch_enter_hook", None)  # noqa: E731
    try:
        out = torch.zeros(n, device=DEV, dtype=torch.float16)
        for _ in range(3):
            fl(*_args(n, x, y, out, spare, 1.0, 1.0))
        sync()
    finally:
        undo()
    if len(seen) != 3:
        errors.append(f"launch hook called {len(seen)} times for 3 launches")
    return {"calls": len(seen), "names": sorted(set(map(str, seen)))}


def _host_us(launch, iters=500, repeats=7):
    """Median host microseconds per launch (the device queue is drained between batches)."""
    for _ in range(50):
        launch()
    sync()
    per = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            launch()
        per.append((time.perf_counter() - t0) / iters * 1e6)
        sync()
    return round(statistics.median(per), 3), [round(p, 3) for p in per]


def measure(report):
    n = 4096
    grid = (triton.cdiv(n, BLOCK), 1, 1)
    x = torch.randn(n, device=DEV, dtype=torch.float16)
    y = torch.randn(n, device=DEV, dtype=torch.float16)
    out = torch.empty(n, device=DEV, dtype=torch.float16)
    spare = [torch.empty(64, device=DEV) for _ in range(11)]
    args = _args(n, x, y, out, spare, 0.5, 0.25)
    fast = FastLaunch(_wide_kernel, grid, CONSTS, WARPS, STAGES)
    fast(*args)
    unchecked = FastLaunch(_wide_kernel, grid, CONSTS, WARPS, STAGES, check=False)
    unchecked(*args)
    res = {"num_kernel_args": len(args) + len(CONSTS), "fast_armed": fast.armed, "fast_reason": fast.reason}
    res["binder_us"], res["binder_runs"] = _host_us(lambda: _binder(grid, args))
    res["fast_checked_us"], res["fast_checked_runs"] = _host_us(lambda: fast(*args))
    res["fast_unchecked_us"], res["fast_unchecked_runs"] = _host_us(lambda: unchecked(*args))
    res["saved_checked_us"] = round(res["binder_us"] - res["fast_checked_us"], 3)
    res["saved_unchecked_us"] = round(res["binder_us"] - res["fast_unchecked_us"], 3)
    res["slow_calls_during_timing"] = fast.slow_calls - 1
    report["timing"] = res


def main():
    ok, why = fast_launch_supported()
    report = {
        "device": torch.cuda.get_device_name() if DEV == "cuda" else str(torch.xpu.get_device_name()),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fast_launch_supported": ok,
        "fast_launch_reason": why,
    }
    try:
        report["correct"] = check_correctness(report)
    except Exception as e:  # noqa: BLE001
        report["correct"] = False
        report["errors"] = report.get("errors", []) + [f"{type(e).__name__}: {e}"]
    try:
        measure(report)
    except Exception as e:  # noqa: BLE001
        report["timing_error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(report, indent=2))
    return 0 if report["correct"] else 1


if __name__ == "__main__":
    sys.exit(main())
