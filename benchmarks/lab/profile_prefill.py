"""One causal prefill call (1 x 8192, bf16, Hq 32 / Hkv 8 / D 128, page 64) for Nsight Compute.

    ncu --kernel-name regex:_paged_attn_kernel --launch-skip 1 --launch-count 1 --set full \\
        python benchmarks/lab/profile_prefill.py [--extend] [--lab]

Runs the provider twice (the first call compiles; ncu skips it), then cuDNN's dense SDPA once on the
same inputs (GQA expanded) for a side-by-side profile with ``--kernel-name regex:cudnn|sm90``.
"""

import os
import sys

import torch

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_BENCH, os.path.dirname(_BENCH)]  # benchmarks/ (bench_attention, timing); the package's repository
from bench_attention import dense_from_paged, paged_inputs, sdpa  # noqa: E402
from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402


def main():
    # --extend: bench_attention's 16 x 512 on 2048 case; --lab: then prefill_lab's lean kernel, host- and
    # device-side descriptors, twice each (profile with --kernel-name regex:"_paged_attn|_lab_tma")
    batch, q_len, k_len = (16, 512, 2560) if "--extend" in sys.argv else (1, 8192, 8192)
    tri = get_provider("triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, kc, vc, pt, seq, cu = paged_inputs(batch, q_len, k_len, gen)
    for _ in range(2):
        out = tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len)
    if "--lab" in sys.argv:
        from prefill_lab import lab_tma

        for dev in (False, True):
            f = lab_tma(q, kc, vc, pt, batch, q_len, k_len, (128, 64, 4, 2), dev)
            f()
            f()
    torch.cuda.synchronize()
    qd, k, v = dense_from_paged(q, kc, vc, pt, batch, q_len, k_len)
    ref = sdpa("cudnn", qd, k, v, causal_lower_right=True)()
    torch.cuda.synchronize()
    diff = (ref.transpose(1, 2).reshape(out.shape).float() - out.float()).abs().max().item()
    print(f"max |ours - cuDNN| = {diff:.3g}")


if __name__ == "__main__":
    main()
