"""Sweep decode tiles x split-K counts on the current GPU, as % of copy bandwidth (back-to-back calls).

    PYTHONPATH=.:benchmarks python benchmarks/tune_decode.py > tune_decode.jsonl

Shapes of docs/benchmarks.md (bf16, Hq 32 / Hkv 8 / D 128, page 64, shuffled pages). One JSON line per
(shape, tile, splits); the last line names the best per shape. Chosen entries go into TUNING
(vllm_xpu_attn/kernels/providers/triton/tuning.py) / split_count (vllm_xpu_attn/kernels/providers/triton/launch_config.py).
"""

import itertools
import json

import torch

from bench_attention import DECODE, HKV, paged_inputs
from timing import copy_tbps, throughput
from vllm_xpu_attn.kernels.api import get_provider
from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
from vllm_xpu_attn.kernels.providers.triton.tuning import TUNING


def main():
    tri = get_provider("triton")
    fam = device_family(torch.device("cuda"))
    default = TUNING[fam]["decode"]
    bw = copy_tbps()
    gen = torch.Generator(device="cuda").manual_seed(0)
    best = {}
    tiles = list(itertools.product([16], [64, 128], [4, 8], [2, 3, 4]))
    for batch, ctx in DECODE:
        q, kc, vc, pt, seq, cu = paged_inputs(batch, 1, ctx, gen)
        kv_bytes = 2 * batch * ctx * HKV * kc.shape[-1] * kc.element_size()
        splits = [None, 2, 4, 8, 16, 32] if batch * HKV < 128 else [None, 2]
        for cfg in tiles:
            TUNING[fam]["decode"] = cfg
            tri.clear_caches()  # launch configurations are kept across steps: a new tile needs a fresh one
            for ns in splits:
                try:
                    t = min(throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, num_splits=ns))
                            for _ in range(3))
                except Exception as e:  # noqa: BLE001 - out of shared memory etc.
                    print(json.dumps({"shape": [batch, ctx], "cfg": cfg, "splits": ns, "error": str(e)[:80]}))
                    continue
                pct = kv_bytes / t / 1e12 / bw * 100
                rec = {"shape": [batch, ctx], "cfg": cfg, "splits": ns, "us": round(t * 1e6, 2), "pct_copy": round(pct, 1)}
                print(json.dumps(rec), flush=True)
                key = f"{batch}x{ctx}"
                if key not in best or pct > best[key]["pct_copy"]:
                    best[key] = rec
        del q, kc, vc
        torch.cuda.empty_cache()
    TUNING[fam]["decode"] = default
    print(json.dumps({"copy_tbps": round(bw, 3), "default": default, "best": best}))


if __name__ == "__main__":
    main()
