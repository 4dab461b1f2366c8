"""Does a change to the absorbed-MLA kernel move its speed? Times MLA decode of the package on PYTHONPATH, one
JSON line per shape and latent cache dtype (each checked against an fp32 MQA over the gathered latent rows).

    git archive OLD vllm_xpu_attn | tar -x -C /tmp/old
    for i in 1 2; do PYTHONPATH=/tmp/old python benchmarks/lab/ab_mla.py old; PYTHONPATH=. python benchmarks/lab/ab_mla.py new; done
    PYTHONPATH=. python benchmarks/lab/ab_mla.py chunked '[64, 64]'   # force tiles.MLA_LATENT_TILES on this device

Run from the repository root on a CUDA machine; interleave old/new processes (shared, noisy machines).
"""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # timing.py
from timing import throughput  # noqa: E402

from vllm_xpu_attn.kernels import AttnPlan, PagedCall, get_provider  # noqa: E402
from vllm_xpu_attn.kernels.contract import LayerArgs  # noqa: E402

D_C, D_R, PAGE = 512, 64, 64
SHAPES = [(128, 64, 4096), (16, 64, 4096), (128, 256, 1024), (16, 1, 8192), (16, 32, 4096)]  # heads, batch, ctx


def measure(h: int, b: int, ctx: int, kv: str, g: torch.Generator) -> dict:
    pages = b * (ctx // PAGE)
    cache = torch.randn(pages, PAGE, 1, D_C + D_R, device="cuda", generator=g) * 0.3
    cache = cache.to(torch.float8_e4m3fn) if kv == "e4m3" else cache.bfloat16()
    q = (torch.randn(b, h, D_C + D_R, device="cuda", generator=g) * 0.3).bfloat16()
    table = torch.randperm(pages, device="cuda", generator=g).to(torch.int32).reshape(b, -1)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    rows = cache[table.long()].reshape(b, -1, D_C + D_R)[:, :ctx].float()
    p = torch.softmax(torch.einsum("bhd,bkd->bhk", q.float(), rows) * 192 ** -0.5, -1)
    ref = torch.einsum("bhk,bkc->bhc", p, rows[..., :D_C])
    step = AttnPlan(torch.arange(b + 1, dtype=torch.int32, device="cuda"), lens, table, 1, ctx, PAGE)
    call = PagedCall.make(h, 1, D_C + D_R, D_C, softmax_scale=192 ** -0.5, mla=True)
    out = torch.empty(b, h, D_C, dtype=torch.bfloat16, device="cuda")
    launch = get_provider("triton").plan_paged(step, call)
    kw = {}
    if kv == "e4m3":
        one = torch.ones(1, device="cuda")
        kw["layer"] = LayerArgs.make(call, device="cuda", kv_dtype=cache.dtype, k_descale=one, v_descale=one)

    def fn():
        return launch.run(q, cache, cache[..., :D_C], out, **kw)

    try:
        fn()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a forced tile that does not fit (shared memory) is reported
        return {"error": str(e)[:160]}
    err = (out.float() - ref).abs().max().item()
    return {"us": round(min(throughput(fn, n=30) for _ in range(3)) * 1e6, 2), "err": err}


def main():
    tag = sys.argv[1]
    lat = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    if lat:
        from vllm_xpu_attn.kernels.triton import tiles

        fam = tiles.device_family(torch.device("cuda"))
        tiles.MLA_LATENT_TILES[fam] = {"mla_decode": tuple(lat), "mla_wide": tuple(lat)}
    g = torch.Generator(device="cuda").manual_seed(0)
    for h, b, ctx in SHAPES:
        for kv in ("bf16", "e4m3"):
            row = {"tag": tag, "lat": lat, "shape": [h, b, ctx], "kv": kv, **measure(h, b, ctx, kv, g)}
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
