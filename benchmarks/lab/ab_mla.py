"""Does a change to the absorbed-MLA kernel move its speed? Times MLA decode of the package on PYTHONPATH, one
JSON line per shape and latent cache dtype (each checked against an fp32 MQA over the gathered latent rows).

    git archive OLD vllm_xpu_attn | tar -x -C /tmp/old
    for i in 1 2; do PYTHONPATH=/tmp/old python benchmarks/lab/ab_mla.py old; PYTHONPATH=. python benchmarks/lab/ab_mla.py new; done
    PYTHONPATH=. python benchmarks/lab/ab_mla.py chunked '[64, 64]'   # force tuning.MLA_LATENT_TILES on this device

Run from the repository root on a CUDA machine; interleave old/new processes (shared, noisy machines).
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # mla_sweep.py (its inputs, reference and launch)
from mla_sweep import case, run_one  # noqa: E402

SHAPES = [(128, 64, 4096), (16, 64, 4096), (128, 256, 1024), (16, 1, 8192), (16, 32, 4096)]  # heads, batch, ctx


def measure(h: int, b: int, ctx: int, kv: str, g: torch.Generator) -> dict:
    """One shape and latent dtype: mla_sweep.py's inputs, fp32 reference and timed launch (min of 3 x 30 calls)."""
    c = case(h, b, ctx, kv, "cuda", g)
    try:
        row = run_one(c, h, b, ctx, "cuda", timed=True, n=30)
    except Exception as e:  # noqa: BLE001 - a forced tile that does not fit (shared memory) is reported
        return {"error": str(e)[:160]}
    return {"us": row["us"], "err": row["err"]}


def main():
    tag = sys.argv[1]
    lat = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    if lat:
        from vllm_xpu_attn.kernels.providers.triton import tiles, tuning

        fam = tiles.device_family(torch.device("cuda"))
        tuning.MLA_LATENT_TILES[fam] = {"mla_decode": tuple(lat), "mla_wide": tuple(lat)}
    g = torch.Generator(device="cuda").manual_seed(0)
    for h, b, ctx in SHAPES:
        for kv in ("bf16", "e4m3"):
            row = {"tag": tag, "lat": lat, "shape": [h, b, ctx], "kv": kv, **measure(h, b, ctx, kv, g)}
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
