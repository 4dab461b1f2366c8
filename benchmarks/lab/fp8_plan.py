"""FP8 vs bf16 paged decode through the per-layer path (plan once, run per layer: what engines launch),
back-to-back, with decode tile variants for FP8. Prints JSON lines.

    python benchmarks/lab/fp8_plan.py > plan.jsonl   # fp8_probe, imported first, sets sys.path
"""
import itertools, json
import torch
from fp8_probe import SHAPES, HQ, HKV, D, PAGE, inputs
from timing import throughput
from vllm_xpu_attn.kernels.api import get_provider
from vllm_xpu_attn.kernels.api import PagedStep, LayerConsts, LayerTensors
from vllm_xpu_attn.kernels.providers.triton.tiles import device_family
from vllm_xpu_attn.kernels.providers.triton.tuning import TUNING

tri = get_provider("triton")
fam = device_family(torch.device("cuda"))
default = TUNING[fam]["decode"]
x = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
bw = 2 * x.numel() / throughput(lambda: y.copy_(x), 20) / 1e12
del x, y
gen = torch.Generator(device="cuda").manual_seed(0)
call = LayerConsts.make(HQ, HKV, D)
tiles = [default] + [c for c in itertools.product([16], [32, 64], [2, 4], [2, 3])]
for batch, ctx in SHAPES:
    for name, dt in (("bf16", torch.bfloat16), ("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
        q, kc, vc, pt, seq, cu = inputs(batch, ctx, dt, gen)
        step = PagedStep(cu, seq, pt, 1, pt.shape[1] * PAGE, PAGE)
        kw = {} if name == "bf16" else dict(k_descale=torch.full((batch, HKV), 0.5, device="cuda"),
                                            v_descale=torch.full((batch, HKV), 0.25, device="cuda"))
        layer = LayerTensors.make(call, device=q.device, kv_dtype=dt, batch=batch, **kw)
        out = torch.empty(batch, HQ, D, device="cuda", dtype=torch.bfloat16)
        byts = 2 * batch * ctx * HKV * D * kc.element_size()
        for cfg in (tiles if name != "bf16" else [default]):
            TUNING[fam]["decode"] = cfg
            tri.clear_caches()
            launch = tri.arm_paged(step, call)
            try:
                t = min(throughput(lambda: launch.run(q, kc, vc, out, layer=layer), 100) for _ in range(3))
            except Exception as e:
                print(json.dumps({"shape": [batch, ctx], "dtype": name, "cfg": cfg, "error": str(e)[:120]}), flush=True)
                continue
            print(json.dumps({"shape": [batch, ctx], "dtype": name, "cfg": cfg, "splits": launch.config.num_splits if hasattr(launch, "config") else None,
                              "us": round(t * 1e6, 1), "TBps": round(byts / t / 1e12, 3), "pct_copy": round(byts / t / 1e12 / bw * 100, 1)}), flush=True)
        del q, kc, vc
TUNING[fam]["decode"] = default
print(json.dumps({"copy_tbps": round(bw, 3)}))
