"""Sweep decode tiles for FP8 (e4m3) KV vs the bf16 default, % of copy by bytes read (back-to-back calls)."""
import itertools, json, sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "benchmarks/lab")
from fp8_probe import SHAPES, HKV, D, inputs, bench_tp
from vllm_xpu_attn.kernels import get_provider
from vllm_xpu_attn.kernels.triton import provider as tp

tri = get_provider("triton")
fam = tp.device_family(torch.device("cuda"))
default = tp.TUNING[fam]["decode"]
x = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
bw = 2 * x.numel() / bench_tp(lambda: y.copy_(x), 20) / 1e12
del x, y
gen = torch.Generator(device="cuda").manual_seed(0)
tiles = list(itertools.product([16], [32, 64, 128], [2, 4, 8], [2, 3]))
best = {}
for batch, ctx in SHAPES:
    for name, dt in (("bf16", torch.bfloat16), ("e4m3", torch.float8_e4m3fn)):
        q, kc, vc, pt, seq, cu = inputs(batch, ctx, dt, gen)
        kw = {} if name == "bf16" else dict(k_descale=torch.full((batch, HKV), 0.5, device="cuda"), v_descale=torch.full((batch, HKV), 0.25, device="cuda"))
        byts = 2 * batch * ctx * HKV * D * kc.element_size()
        splits = [None, 2] if batch * HKV < 1024 else [None]
        for cfg in ([default] if name == "bf16" else tiles):
            tp.TUNING[fam]["decode"] = cfg
            tri.clear_caches()
            for ns in splits:
                try:
                    t = min(bench_tp(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, num_splits=ns, **kw)) for _ in range(2))
                except Exception as e:
                    print(json.dumps({"shape": [batch, ctx], "cfg": cfg, "splits": ns, "error": str(e)[:80]}), flush=True)
                    continue
                rec = {"shape": [batch, ctx], "dtype": name, "cfg": cfg, "splits": ns, "us": round(t * 1e6, 1), "pct_copy": round(byts / t / 1e12 / bw * 100, 1)}
                print(json.dumps(rec), flush=True)
                k = f"{batch}x{ctx}-{name}"
                if k not in best or rec["pct_copy"] > best[k]["pct_copy"]:
                    best[k] = rec
        del q, kc, vc
tp.TUNING[fam]["decode"] = default
print(json.dumps({"copy_tbps": round(bw, 3), "default": default, "best": best}))
