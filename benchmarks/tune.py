"""Sweep the Triton provider's tile table on the current GPU (prints one JSON line per config).

    PYTHONPATH=. python benchmarks/tune.py > tune.jsonl

Time per call: one call timed alone (timing.event_latency, median of 10). The chosen entries go into TUNING
in vllm_xpu_attn/kernels/providers/triton/tuning.py.
"""

import itertools
import json

import torch

from bench_attention import paged_inputs
from timing import event_latency
from vllm_xpu_attn.kernels.api import get_provider
from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
from vllm_xpu_attn.kernels.providers.triton.tuning import TUNING


def main():
    tri = get_provider("triton")
    fam = device_family(torch.device("cuda"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = {"decode": [(64, 1, 4096), (256, 1, 1024), (8, 1, 32768)], "prefill": [(1, 8192, 8192)]}
    grids = {
        "decode": list(itertools.product([16], [64, 128], [4, 8], [2, 3, 4])),
        "prefill": list(itertools.product([64, 128], [32, 64, 128], [4, 8], [2, 3])),
    }
    for phase, shapes in cases.items():
        saved = TUNING[fam][phase]
        for batch, q_len, k_len in shapes:
            q, kc, vc, pt, seq, cu = paged_inputs(batch, q_len, k_len, gen)
            for cfg in grids[phase]:
                TUNING[fam][phase] = cfg
                tri.clear_caches()  # the provider keeps launch configurations (tiles included) across calls
                for ns in ([None, 2, 4] if phase == "decode" else [None]):
                    try:
                        t = event_latency(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len,
                                                                              num_splits=ns), iters=10)
                    except Exception as e:  # out of shared memory etc.
                        print(json.dumps({"phase": phase, "shape": [batch, q_len, k_len], "cfg": cfg,
                                          "error": str(e)[:80]}))
                        continue
                    print(json.dumps({"phase": phase, "shape": [batch, q_len, k_len], "cfg": cfg, "splits": ns,
                                      "us": t * 1e6}), flush=True)
            del q, kc, vc
            torch.cuda.empty_cache()
        TUNING[fam][phase] = saved
        tri.clear_caches()

if __name__ == "__main__":
    main()
