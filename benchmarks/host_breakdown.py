"""Where the host time of one decode layer goes: each layer of the call stack timed alone.

    python benchmarks/host_breakdown.py      # CUDA machine; prints one JSON object (us)

Tiny decode batch (B 1, 128 keys, bf16, Hq 32 / Hkv 8 / D 128, page 64) so the GPU time per call is far
below the host time. Each figure is the median (and min) over repeats of host microseconds per call for N
back-to-back calls rotating over 32 layers' caches (timing.host_per_call, after 200 warm-up calls):

  forward        LayerRunner.forward(plan, q, k, v, out)       (the engine-facing per-layer call)
  launch_run     PagedLaunch.run(...)                           (the O(1) checks + run_checked)
  run_checked    TritonLaunch._execute(...)                     (signature key + launcher call)
  fastlaunch     the armed FastLaunch closure with the real arguments
  kernel_run_tensors / kernel_run_ints   CompiledKernel.run directly: tensors vs data_ptr() ints
  floor_*        an empty 1-pointer kernel through its launcher; torch's own empty kernel (x.zero_())
  py_*           single Python/torch calls the per-layer path makes (current_device, stream, stride...)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository: the package

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from timing import host_per_call  # noqa: E402
from vllm_xpu_attn import core  # noqa: E402
from vllm_xpu_attn.kernels.api import NO_LAYER_TENSORS  # noqa: E402

DEV = torch.device("cuda")
N, REPEATS, LAYERS = 2000, 15, 32


def host_us(calls, n=N, repeats=REPEATS) -> dict:
    """Median and min over repeats of host us per call (n back-to-back calls rotating over ``calls``)."""
    vals = [x * 1e6 for x in host_per_call(calls, n, repeats, warmup=200)]
    return {"median": round(statistics.median(vals), 3), "min": round(min(vals), 3)}


@triton.jit
def _empty(X):
    pass


def main():
    hq, hkv, d, page, b, keys = 32, 8, 128, 64, 1, 128
    dt = torch.bfloat16
    per = keys // page
    pt = torch.arange(b * per, dtype=torch.int32, device=DEV).reshape(b, per)
    seq = torch.full((b,), keys, dtype=torch.int32, device=DEV)
    caches = [(torch.randn(b * per + 1, page, hkv, d, device=DEV, dtype=dt),
               torch.randn(b * per + 1, page, hkv, d, device=DEV, dtype=dt)) for _ in range(LAYERS)]
    q = torch.randn(b, hq, d, device=DEV, dtype=dt)
    outs = [torch.empty_like(q) for _ in range(LAYERS)]
    spec = core.LayerSpec(num_q_heads=hq, num_kv_heads=hkv, head_dim=d, scale=d ** -0.5, dtype=dt, kv_dtype=dt)
    runner = core.LayerRunner(spec, DEV, page, override="triton")
    plan = core.plan_step(core.StepInputs(mode=core.Mode.DECODE, seq_lens=seq, max_seqlen_k=keys, num_tokens=b,
                                          page_size=page, page_table=pt))
    res = {}
    res["forward"] = host_us([lambda i=i: runner.forward(plan, q, caches[i][0], caches[i][1], outs[i])
                              for i in range(LAYERS)])
    launch = next(iter(plan.launches.values()))
    res["launch_run"] = host_us([lambda i=i: launch.run(q, caches[i][0], caches[i][1], outs[i])
                                 for i in range(LAYERS)])
    res["run_checked"] = host_us([lambda i=i: launch._execute(q, caches[i][0], caches[i][1], outs[i], NO_LAYER_TENSORS)
                                  for i in range(LAYERS)])
    armed = next(iter(launch.cfg.layers.values()))
    attn = armed.attn
    res["armed"] = attn.armed
    res["num_splits"] = launch.num_splits
    st = launch.step

    def targs(i):
        kc, vc, o = caches[i][0], caches[i][1], outs[i]
        qs, ks, vs, os_ = q.stride(), kc.stride(), vc.stride(), o.stride()
        return (q, kc, vc, st.page_table, st.cache_seqlens, st.cu_seqlens_q, None, None, None, None, o, None, None,
                None, qs[0], qs[1], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2], os_[0], os_[1],
                st.page_table.stride(0), 0, b, hq, float(spec.scale), 0.0)

    pre = [targs(i) for i in range(LAYERS)]
    res["fastlaunch"] = host_us([lambda a=a: attn(*a) for a in pre])
    kernel = attn.kernel
    # the full positional layout of the launcher: runtime args + constexprs in declaration order
    names = [p[0] for p in attn._params]
    consts = dict(attn.constexprs)

    def full(a):
        it = iter(a)
        out = []
        for n_ in names:
            out.append(consts[n_] if n_ in consts else next(it))
        return tuple(out)

    fulls = [full(a) for a in pre]
    run = kernel.run
    fn_, meta = kernel.function, kernel.packed_metadata
    gx, gy, gz = attn.grid
    stream = torch.cuda.current_stream().cuda_stream
    res["kernel_run_tensors"] = host_us([lambda f=f: run(gx, gy, gz, stream, fn_, meta, None, None, None, *f)
                                         for f in fulls])

    def as_ints(f):
        return tuple(x.data_ptr() if isinstance(x, torch.Tensor) else x for x in f)

    ints = [as_ints(f) for f in fulls]
    res["kernel_run_ints"] = host_us([lambda f=f: run(gx, gy, gz, stream, fn_, meta, None, None, None, *f)
                                      for f in ints])
    res["kernel_run_ints_incl_data_ptr"] = host_us(
        [lambda f=f: run(gx, gy, gz, stream, fn_, meta, None, None, None, *as_ints(f)) for f in fulls])
    res["n_launcher_args"] = len(fulls[0])
    res["n_tensor_args"] = sum(isinstance(x, torch.Tensor) for x in fulls[0])
    # floors
    x = torch.empty(16, device=DEV)
    ck = _empty[(1,)](x)
    erun = ck.run
    res["floor_empty_kernel_tensor"] = host_us([lambda: erun(1, 1, 1, stream, ck.function, ck.packed_metadata, None,
                                                             None, None, x)])
    xp = x.data_ptr()
    res["floor_empty_kernel_int"] = host_us([lambda: erun(1, 1, 1, stream, ck.function, ck.packed_metadata, None,
                                                          None, None, xp)])
    res["floor_torch_zero_"] = host_us([lambda: x.zero_()])
    from triton.runtime.driver import driver
    drv = driver.active
    res["py_current_device"] = host_us([drv.get_current_device])
    res["py_get_stream"] = host_us([lambda: drv.get_current_stream(0)])
    res["py_stride"] = host_us([q.stride])
    res["py_data_ptr"] = host_us([q.data_ptr])
    res["py_shape"] = host_us([lambda: q.shape])
    res["py_sig_tuple"] = host_us([lambda: (q.shape, caches[0][0].shape, caches[0][1].shape, q.dtype, q.device)])
    # the first layer of a step: arm_paged + the checked launch + arming the hot path (bind)
    from vllm_xpu_attn.kernels.providers.triton import launch as L, provider as P, step_launch as S

    spent = {"bind": 0.0, "arm_paged": 0.0, "run_checked": 0.0}

    def timed(name, f):
        def w(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0
        return w

    orig = (L.FastLaunch.bind, P.TritonProvider.arm_paged, S.TritonLaunch._execute)
    L.FastLaunch.bind = timed("bind", orig[0])
    P.TritonProvider.arm_paged = timed("arm_paged", orig[1])
    S.TritonLaunch._execute = timed("run_checked", orig[2])
    steps, first, later = 300, 0.0, 0.0
    try:
        for s_ in range(steps):
            p = core.plan_step(core.StepInputs(mode=core.Mode.DECODE, seq_lens=seq, max_seqlen_k=keys, num_tokens=b,
                                               page_size=page, page_table=pt))
            t0 = time.perf_counter()
            runner.forward(p, q, caches[0][0], caches[0][1], outs[0])
            t1 = time.perf_counter()
            for i in range(1, LAYERS):
                runner.forward(p, q, caches[i][0], caches[i][1], outs[i])
            t2 = time.perf_counter()
            first += t1 - t0
            later += (t2 - t1) / (LAYERS - 1)
            if s_ % 50 == 0:
                torch.cuda.synchronize()
    finally:
        L.FastLaunch.bind, P.TritonProvider.arm_paged, S.TritonLaunch._execute = orig
    res["first_layer_us"] = round(first / steps * 1e6, 2)
    res["later_layers_us"] = round(later / steps * 1e6, 2)
    res["first_layer_parts_us"] = {k: round(v / steps * 1e6, 2) for k, v in spent.items()}
    res["device"] = torch.cuda.get_device_name()
    res["triton"] = triton.__version__
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
