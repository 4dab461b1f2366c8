"""A/B of the paged attention kernel against another copy of kernels.py, in one process (H200).

    python benchmarks/lab/ab_kernel.py OLD_KERNELS.py [REPS=2]   # one JSON line per (variant, case)

Both variants run through the provider (tiles, split count, launchers as shipped); only
``_paged_attn_kernel`` is swapped. Cases: bench_attention's decode shapes and both prefill cases (1 x 8192, 16 x 512 on 2048);
back-to-back throughput, A/B/A/B interleaved (the machine is shared).
"""

import importlib.util
import json
import os
import sys

import torch

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_BENCH, os.path.dirname(_BENCH)]  # benchmarks/ (bench_attention, timing); the package's repository
from bench_attention import paged_inputs  # noqa: E402
from timing import throughput  # noqa: E402
from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton import kernels as K  # noqa: E402


def main():
    spec = importlib.util.spec_from_file_location("old_kernels", sys.argv[1])
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    variants = {"new": K._paged_attn_kernel, "old": old._paged_attn_kernel}
    tri = get_provider("triton")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    copy_s = throughput(lambda: x.clone(), n=20)
    copy_tbps = 2 * x.numel() / copy_s / 1e12
    cases = [(64, 1, 4096), (256, 1, 1024), (8, 1, 32768), (1, 8192, 8192), (16, 512, 2560)]
    for rep in range(int(sys.argv[2]) if len(sys.argv) > 2 else 2):
        for batch, q_len, k_len in cases:
            q, kc, vc, pt, seq, cu = paged_inputs(batch, q_len, k_len, gen)
            for name, fn in variants.items():
                K._paged_attn_kernel = fn  # the provider imports it at launcher creation
                tri.clear_caches()
                f = lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len)  # noqa: E731
                t = throughput(f, n=20 if q_len > 1 else 50)
                if q_len == 1:
                    val = {"pct_copy": round(100 * 2 * kc.numel() * kc.element_size() / t / 1e12 / copy_tbps, 1)}
                else:
                    pairs = q_len * (k_len - q_len) + q_len * (q_len + 1) / 2  # bottom-right causal
                    val = {"tflops": round(4 * 128 * 32 * batch * pairs / t / 1e12, 1)}
                print(json.dumps({"rep": rep, "variant": name, "case": [batch, q_len, k_len], **val}), flush=True)
            del q, kc, vc
    K._paged_attn_kernel = variants["new"]


if __name__ == "__main__":
    main()
