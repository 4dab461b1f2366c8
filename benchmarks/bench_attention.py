"""Paged-attention benchmark: one process, same inputs, providers side by side.

    python benchmarks/bench_attention.py --out benchmarks/out   # writes results.json + results.png
    TRITON_INTERPRET=1 PYTHONPATH=.:benchmarks python benchmarks/bench_attention.py --cpu   # dry run, tiny shapes

Ours is measured on two paths, one JSON row each per shape (key ``path``):

- ``engine``: what vLLM's and SGLang's adapters run. One ``core.plan_step`` per step, then
  ``LayerRunner.forward`` for each of ``--layers`` (32) layers, each layer with its own K/V cache (same
  shapes, own random values), as an engine's model step does; the step's time / layers is the per-layer
  figure, so the plan's cost is amortised over the layers. Its output is checked against the one-call API
  on every layer's cache (same kernel: bitwise equal expected; ``max_abs_diff_vs_one_call``).
- ``one_call``: ``flash_attn_with_kvcache`` (plan + run in every call) on layer 0's cache: the API for
  direct users, as this benchmark measured before.

Decode is reported as attained KV bandwidth (K+V bytes read / time, TB/s) and as % of the
device-copy bandwidth measured in the same run; prefill as TFLOP/s and % of cuDNN SDPA on
the dense equivalent. bf16, head_dim 128, 32 query / 8 KV heads, page 64. Ours and the peers (vLLM, SGLang):
throughput of back-to-back calls (engine: back-to-back steps) and latency per call + sync (engine: per step
+ sync, / layers) (keys ``*_latency``); the reference, FlexAttention and SDPA: latency per call (timing.py
says how each is taken). The peers, FlexAttention and SDPA sit on the engine row and are compared with its
output. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

if "--cpu" in sys.argv:  # the interpreter must be chosen before triton (imported by the package) is
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import torch.nn.functional as F

from timing import copy_tbps, event_latency, throughput
from vllm_xpu_attn.core import LayerRunner, LayerSpec, Mode, StepInputs, plan_step
from vllm_xpu_attn.kernels.api import get_provider

HQ, HKV, D, PAGE = 32, 8, 128, 64
DTYPE = torch.bfloat16
DEVICE = "cuda"
DECODE = [(64, 4096), (256, 1024), (8, 32768)]
PREFILL = [("1x8192 causal", 1, 8192, 0), ("16x512 on 2048 prefix", 16, 512, 2048)]
LAYERS = 32
ENGINE_PATH = ("plan_step once per step, then LayerRunner.forward per layer over {n} layers' own K/V caches; "
               "per-layer figure = step time / {n} (plan cost amortised)")
ONE_CALL_PATH = "flash_attn_with_kvcache (plan + run every call), layer 0's cache"


def use_cpu() -> None:
    """--cpu: the Triton interpreter on tiny shapes; checks that the paths run and agree, times mean nothing."""
    global HQ, HKV, D, PAGE, DTYPE, DEVICE, DECODE, PREFILL, LAYERS
    HQ, HKV, D, PAGE = 4, 2, 64, 16
    DTYPE = torch.float16  # the interpreter runs on numpy: no bf16
    DEVICE = "cpu"
    DECODE = [(2, 64), (1, 512)]
    PREFILL = [("1x32 causal", 1, 32, 0), ("2x16 on 32 prefix", 2, 16, 32)]
    LAYERS = 3


def _host_throughput(fn, n: int = 50, warmup: int = 1) -> float:
    """--cpu stand-in for timing.throughput: host clock, 2 calls (no CUDA)."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    for _ in range(2):
        fn()
    return (time.perf_counter() - t0) / 2


def _host_latency(fn, iters: int = 20, warmup: int = 3) -> float:
    """--cpu stand-in for timing.event_latency: host clock, one call."""
    fn()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


TIMERS = {"throughput": throughput, "latency": event_latency}


def _peers():
    """benchmarks/peers.py (vLLM's and SGLang's Triton kernels from their wheels), or None with why."""
    try:
        import sys as _sys

        _sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import peers

        return peers, None
    except Exception as e:  # noqa: BLE001
        return None, f"{type(e).__name__}: {e}"


def peer_rows(row: dict, unit: str, work: float, ours_out, q, kc, vc, pt, seq, cu, max_q: int, max_k: int) -> None:
    """vLLM unified attention (decode and prefill) and SGLang decode (decode only), side by side:
    throughput (back-to-back) and latency (per call with a sync), plus max |diff| from ours."""
    peers, why = _peers()
    if peers is None:
        row["peers_error"] = why
        return
    scale = D ** -0.5
    runs = {}
    # NaN, not torch.empty: a fresh block from the caching allocator may hold an output of ours from the timing
    # loops above (same inputs, same bits), so an element a peer leaves unwritten would compare as equal to ours.
    # NaN makes such an element show as a NaN max |diff| instead.
    out_v = torch.full_like(q, float("nan"))
    runs["vllm_unified"] = lambda: peers.vllm_unified_decode(q, kc, vc, pt, seq, cu, max_q, max_k, scale, out_v)
    if max_q == 1:
        try:  # the metadata needs the extracted kernels too: a missing peer is a recorded error, not a crash
            meta = peers.sglang_decode_metadata(pt, seq, PAGE, HQ, HKV, D)
        except Exception as e:  # noqa: BLE001 - record, never hide
            row["sglang_decode_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
        else:
            out_s = torch.full_like(q, float("nan"))
            runs["sglang_decode"] = lambda: peers.sglang_decode(q, kc, vc, meta, scale, out_s)
    for name, fn in runs.items():
        try:
            fn()
            out = out_v if name == "vllm_unified" else out_s
            row[f"{name}_max_abs_diff"] = float((out.float() - ours_out.float()).abs().max())
            row[f"{name}_{unit}"] = work / throughput(fn) / 1e12
            row[f"{name}_{unit}_latency"] = work / event_latency(fn) / 1e12
        except Exception as e:  # noqa: BLE001 - record, never hide
            row[f"{name}_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def paged_inputs(batch: int, q_len: int, k_len: int, gen: torch.Generator):
    pages_per = math.ceil(k_len / PAGE)
    n_pages = batch * pages_per
    kc = torch.randn(n_pages, PAGE, HKV, D, device=DEVICE, dtype=DTYPE, generator=gen)
    vc = torch.randn_like(kc)
    pt = torch.randperm(n_pages, device=DEVICE, generator=gen).to(torch.int32).reshape(batch, pages_per)
    q = torch.randn(batch * q_len, HQ, D, device=DEVICE, dtype=DTYPE, generator=gen)
    seq = torch.full((batch,), k_len, device=DEVICE, dtype=torch.int32)
    cu = torch.arange(0, batch * q_len + 1, q_len, device=DEVICE, dtype=torch.int32)
    return q, kc, vc, pt, seq, cu


def dense_from_paged(q, kc, vc, pt, batch, q_len, k_len):
    k = kc[pt.long()].reshape(batch, -1, HKV, D)[:, :k_len].transpose(1, 2).contiguous()
    v = vc[pt.long()].reshape(batch, -1, HKV, D)[:, :k_len].transpose(1, 2).contiguous()
    qd = q.reshape(batch, q_len, HQ, D).transpose(1, 2).contiguous()
    return qd, k, v


def sdpa(backend_name: str, qd, k, v, causal_lower_right: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend_name]
    k2 = k.repeat_interleave(HQ // HKV, dim=1)  # GQA expanded: cuDNN/flash SDPA need equal heads
    v2 = v.repeat_interleave(HQ // HKV, dim=1)
    kw = {}
    if causal_lower_right:
        from torch.nn.attention.bias import causal_lower_right

        kw["attn_mask"] = causal_lower_right(qd.shape[2], k.shape[2])
    else:
        kw["is_causal"] = qd.shape[2] > 1

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qd, k2, v2, **kw)

    return run


def flex_paged(q, kc, vc, pt, batch: int, q_len: int, k_len: int, compile: bool = True):
    """FlexAttention's paged path (torch.nn.attention.experimental._paged_attention) over the
    same pages and page table. Returns (run, to_varlen): run() -> [B, Hq, q_len, D];
    to_varlen(out) -> [B*q_len, Hq, D] for comparison with the paged providers.

    Flex wants a head-major cache [1, Hkv, pages*page, D], so it gets its own copy of the
    pages (made once here, outside the timing); the page table and page ids are the same.
    """
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    n_pages, page, hkv, d = kc.shape
    hq = q.shape[1]
    dev = q.device
    pages_per = pt.shape[1]
    paged = PagedAttention(n_pages, page, batch, device=dev)
    paged.page_table[:, :pages_per] = pt.long()
    logical = torch.arange(pages_per, device=dev).expand(batch, -1).contiguous()
    paged.physical_to_logical.scatter_(1, pt.long(), logical)
    paged.capacity[:] = pages_per * page
    kf = kc.permute(2, 0, 1, 3).reshape(1, hkv, n_pages * page, d)
    vf = vc.permute(2, 0, 1, 3).reshape(1, hkv, n_pages * page, d)
    qf = q.view(batch, q_len, hq, d).transpose(1, 2).contiguous()
    offset = k_len - q_len  # bottom-right aligned causal mask

    def causal(b, h, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    def visible(b, h, q_idx, kv_idx):
        return kv_idx < k_len

    mask = create_block_mask(causal if q_len > 1 else visible, batch, None, q_len, pages_per * page, device=dev,
                             BLOCK_SIZE=(128, page))
    mask = paged.convert_logical_block_mask(mask)
    fn = torch.compile(flex_attention, dynamic=False) if compile else flex_attention

    def run():
        return fn(qf, kf, vf, block_mask=mask, enable_gqa=True)

    return run, lambda out: out.transpose(1, 2).reshape(batch * q_len, hq, d)


def engine_runners(layers: int) -> list:
    """One LayerRunner per layer (same spec, as a model's layers), Triton forced as in the one-call row."""
    spec = LayerSpec(num_q_heads=HQ, num_kv_heads=HKV, head_dim=D, scale=1.0 / math.sqrt(D), dtype=DTYPE,
                     kv_dtype=DTYPE)  # the one-call API's default scale, to the bit
    return [LayerRunner(spec, DEVICE, PAGE, override="triton") for _ in range(layers)]


def engine_path(row: dict, one: dict, unit: str, work: float, runners: list, tri, q, caches, pt, seq, cu,
                batch: int, q_len: int, k_len: int, mode: Mode, n_tp: int, n_lat: int) -> None:
    """Ours through the engine path into ``row``: a step = plan_step + LayerRunner.forward per layer (each layer
    its own caches); throughput = back-to-back steps, latency = one step + sync; both / layers. Then every layer's
    output against flash_attn_with_kvcache on the same cache; the time ratio engine / one-call into both rows."""
    nl = len(runners)
    outs = [torch.empty_like(q) for _ in range(nl)]
    decode = mode is Mode.DECODE

    def step():
        plan = plan_step(StepInputs(mode=mode, seq_lens=seq, max_seqlen_k=k_len, num_tokens=batch * q_len,
                                    page_size=PAGE, page_table=pt, cu_seqlens_q=None if decode else cu,
                                    max_seqlen_q=q_len))
        for rn, (kc, vc), o in zip(runners, caches, outs):
            rn.forward(plan, q, kc, vc, o)

    row["layers"] = nl
    row["mode"] = mode.value
    try:
        step()
        diff, equal = 0.0, True
        for (kc, vc), o in zip(caches, outs):
            ref = tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len)
            diff = max(diff, float((o.float() - ref.float()).abs().max()))
            equal = equal and bool(torch.equal(o, ref))
        row["max_abs_diff_vs_one_call"] = diff  # over every layer's output
        row["bitwise_equal_one_call"] = equal
        t = TIMERS["latency"](step, iters=n_lat) / nl
        row["triton_us_latency"] = t * 1e6
        row[f"triton_{unit}_latency"] = work / t / 1e12  # one step + sync, / layers: the host launch included
        t = TIMERS["throughput"](step, n_tp) / nl
        row["triton_us"] = t * 1e6
        row[f"triton_{unit}"] = work / t / 1e12  # back-to-back steps, / layers
        for key in ("", "_latency"):
            if f"triton_us{key}" in one:
                ratio = row[f"triton_us{key}"] / one[f"triton_us{key}"]
                row[f"time_ratio_engine_over_one_call{key}"] = ratio
                one[f"time_ratio_engine_over_one_call{key}"] = ratio
    except Exception as e:  # noqa: BLE001 - record, never hide
        row["engine_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
    del outs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="output dir (default: $OUT, else benchmarks/out)")
    ap.add_argument("--reference", action="store_true", help="also time the (slow) reference provider")
    ap.add_argument("--cpu", action="store_true",
                    help="dry run in the Triton interpreter on tiny shapes: both paths run and their outputs are "
                         "compared; no peers, FlexAttention, SDPA or copy; times mean nothing")
    ap.add_argument("--layers", type=int, default=None, help=f"layers of the engine path (default {LAYERS})")
    ap.add_argument("--no-flex", action="store_true", help="skip FlexAttention (its torch.compile per shape is slow)")
    a = ap.parse_args()
    if a.cpu:
        use_cpu()
        TIMERS.update(throughput=_host_throughput, latency=_host_latency)
        import warnings

        warnings.filterwarnings("ignore", category=RuntimeWarning)  # interpreter numpy noise
    elif not torch.cuda.is_available():
        raise SystemExit("CUDA is not available; use --cpu for the dry run")
    out_dir = a.out or os.environ.get("OUT") or "benchmarks/out"
    os.makedirs(out_dir, exist_ok=True)
    layers = a.layers or LAYERS
    t_start = time.time()
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    tri = get_provider("triton")
    ref = get_provider("reference")
    runners = engine_runners(layers)
    res = {"device": f"cpu ({platform.machine()}), Triton interpreter: times mean nothing" if a.cpu
           else torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "copy_tbps": None if a.cpu else copy_tbps(),
           "shape": {"hq": HQ, "hkv": HKV, "head_dim": D, "page": PAGE, "dtype": str(DTYPE).replace("torch.", "")},
           "paths": {"engine": ENGINE_PATH.format(n=layers), "one_call": ONE_CALL_PATH},
           "flex_attention_paged": "skipped (--no-flex)" if a.no_flex or a.cpu else
           "torch.nn.attention.experimental._paged_attention + torch.compile(flex_attention)",
           "decode": [], "prefill": []}
    import triton

    res["triton"] = triton.__version__
    copy = res["copy_tbps"]

    def pct(x):
        return None if copy is None else 100 * x / copy

    for batch, ctx in DECODE:
        q, kc, vc, pt, seq, cu = paged_inputs(batch, 1, ctx, gen)
        caches = [(kc, vc)] + [(torch.randn(kc.shape, device=DEVICE, dtype=DTYPE, generator=gen),
                                torch.randn(kc.shape, device=DEVICE, dtype=DTYPE, generator=gen))
                               for _ in range(layers - 1)]
        kv_bytes = 2 * batch * ctx * HKV * D * kc.element_size()
        shape = {"batch": batch, "context": ctx, "kv_gb": kv_bytes / 1e9}
        one = {"path": "one_call", **shape}
        t = TIMERS["latency"](lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1))
        one["triton_us_latency"] = t * 1e6
        one["triton_tbps_latency"] = kv_bytes / t / 1e12  # one call + sync: includes the host launch
        t = TIMERS["throughput"](lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1))
        one["triton_us"] = t * 1e6
        one["triton_tbps"] = kv_bytes / t / 1e12  # back-to-back
        row = {"path": "engine", **shape}
        engine_path(row, one, "tbps", kv_bytes, runners, tri, q, caches, pt, seq, cu, batch, 1, ctx, Mode.DECODE,
                    n_tp=50, n_lat=20)
        del caches
        for r in (row, one):
            for key in ("", "_latency"):
                if f"triton_tbps{key}" in r:
                    r[f"triton_pct_copy{key}"] = pct(r[f"triton_tbps{key}"])
        ours_out = tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1)
        if not a.cpu:
            peer_rows(row, "tbps", kv_bytes, ours_out, q, kc, vc, pt, seq, cu, 1, ctx)
            for name in ("vllm_unified", "sglang_decode"):
                if f"{name}_tbps" in row:
                    row[f"{name}_pct_copy"] = pct(row[f"{name}_tbps"])
        if a.reference:
            t = TIMERS["latency"](lambda: ref.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1), iters=3, warmup=1)
            row["reference_tbps"] = kv_bytes / t / 1e12
            row["reference_max_abs_diff"] = float(
                (ref.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1).float() - ours_out.float()).abs().max())
        if not (a.cpu or a.no_flex):
            flex_row(row, "tbps", kv_bytes, ours_out, lambda: flex_paged(q, kc, vc, pt, batch, 1, ctx))
        if not a.cpu:
            qd, k, v = dense_from_paged(q, kc, vc, pt, batch, 1, ctx)
            for name in ("cudnn", "flash", "efficient"):
                try:
                    t = event_latency(sdpa(name, qd, k, v, False))
                    row[f"sdpa_{name}_tbps"] = kv_bytes / t / 1e12  # (dense K/V, GQA expanded: reads 4x the bytes)
                except Exception as e:  # a backend may refuse the shape
                    row[f"sdpa_{name}_error"] = str(e).splitlines()[0][:200]
            del qd, k, v
        res["decode"] += [row, one]
        save(res, out_dir)  # after every shape: a run cut short keeps what it measured
        print(json.dumps(row), flush=True)
        print(json.dumps(one), f"[{time.time() - t_start:.0f} s]", flush=True)
        del q, kc, vc, ours_out
        if not a.cpu:
            torch.cuda.empty_cache()

    for label, batch, new, prefix in PREFILL:
        k_len = prefix + new
        q, kc, vc, pt, seq, cu = paged_inputs(batch, new, k_len, gen)
        caches = [(kc, vc)] + [(torch.randn(kc.shape, device=DEVICE, dtype=DTYPE, generator=gen),
                                torch.randn(kc.shape, device=DEVICE, dtype=DTYPE, generator=gen))
                               for _ in range(layers - 1)]
        # causal FLOPs: query i sees prefix + i + 1 keys; 2 matmuls x 2 FLOP per MAC
        macs = batch * HQ * D * sum(prefix + i + 1 for i in range(new))
        flops = 4 * macs
        shape = {"case": label, "batch": batch, "new": new, "prefix": prefix}
        one = {"path": "one_call", **shape}
        t = TIMERS["latency"](lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), iters=10)
        one["triton_us_latency"] = t * 1e6
        one["triton_tflops_latency"] = flops / t / 1e12
        t = TIMERS["throughput"](lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), 10)
        one["triton_us"] = t * 1e6
        one["triton_tflops"] = flops / t / 1e12
        row = {"path": "engine", **shape}
        engine_path(row, one, "tflops", flops, runners, tri, q, caches, pt, seq, cu, batch, new, k_len,
                    Mode.EXTEND if prefix else Mode.PREFILL, n_tp=10, n_lat=10)
        del caches
        ours_out = tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new)
        if not a.cpu:
            peer_rows(row, "tflops", flops, ours_out, q, kc, vc, pt, seq, cu, new, k_len)
        if a.reference:
            t = TIMERS["latency"](lambda: ref.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), iters=2, warmup=1)
            row["reference_tflops"] = flops / t / 1e12
            row["reference_max_abs_diff"] = float(
                (ref.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new).float() - ours_out.float()).abs().max())
        if not (a.cpu or a.no_flex):
            flex_row(row, "tflops", flops, ours_out, lambda: flex_paged(q, kc, vc, pt, batch, new, k_len), iters=10)
        if not a.cpu:
            qd, k, v = dense_from_paged(q, kc, vc, pt, batch, new, k_len)
            for name in ("cudnn", "flash"):
                try:
                    t = event_latency(sdpa(name, qd, k, v, prefix > 0), iters=10)
                    row[f"sdpa_{name}_tflops"] = flops / t / 1e12
                except Exception as e:
                    row[f"sdpa_{name}_error"] = str(e).splitlines()[0][:200]
            del qd, k, v
        if "sdpa_cudnn_tflops" in row:
            for r in (row, one):
                if "triton_tflops" in r:
                    r["triton_pct_cudnn"] = 100 * r["triton_tflops"] / row["sdpa_cudnn_tflops"]
        res["prefill"] += [row, one]
        save(res, out_dir)
        print(json.dumps(row), flush=True)
        print(json.dumps(one), f"[{time.time() - t_start:.0f} s]", flush=True)
        del q, kc, vc, ours_out
        if not a.cpu:
            torch.cuda.empty_cache()

    res["wall_s"] = round(time.time() - t_start, 1)
    save(res, out_dir)
    try:
        plot(res, os.path.join(out_dir, "results.png"))
    except Exception as e:  # noqa: BLE001 - the JSON is written; a plot problem must not hide it
        print(f"plot failed: {type(e).__name__}: {e}", flush=True)
    print(json.dumps({"copy_tbps": res["copy_tbps"], "wall_s": res["wall_s"]}))
    for kind in ("decode", "prefill"):
        bad = [r for r in res[kind] if r["path"] == "engine" and not r.get("bitwise_equal_one_call")]
        if bad:
            print(f"{kind}: engine path differs from (or failed beside) the one-call API: "
                  + "; ".join(f"{r.get('case') or (r['batch'], r['context'])}: "
                              f"{r.get('engine_error') or r.get('max_abs_diff_vs_one_call')}" for r in bad))


def save(res: dict, out_dir: str) -> None:
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(res, f, indent=1)


def flex_row(row: dict, unit: str, work: float, triton_out, make, iters: int = 20) -> None:
    """Time FlexAttention's paged path into row['flex_paged_<unit>'] (work / s / 1e12), and record
    its max |difference| from the Triton provider's output on the same inputs."""
    try:
        run, to_varlen = make()
        out = run()
        row["flex_paged_max_abs_diff_vs_triton"] = float((to_varlen(out).float() - triton_out.float()).abs().max())
        row[f"flex_paged_{unit}"] = work / event_latency(run, iters=iters) / 1e12
    except Exception as e:  # experimental API: record why, never hide it
        row["flex_paged_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def by_path(rows, p):
        return [r for r in rows if r.get("path") == p]

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    eng, one = by_path(res["decode"], "engine"), by_path(res["decode"], "one_call")
    labels = [f"b{r['batch']} ctx{r['context']}" for r in eng]
    series = [(eng, "triton_tbps", f"ours, engine path (plan_step + forward, {res['decode'][0].get('layers', '?')} layers)"
               if eng else "ours, engine path"),
              (one, "triton_tbps", "ours, one-call API"), (eng, "vllm_unified_tbps", "vLLM unified (Triton)"),
              (eng, "sglang_decode_tbps", "SGLang decode (Triton)"), (eng, "flex_paged_tbps", "FlexAttention (paged)"),
              (eng, "sdpa_flash_tbps", "SDPA flash (dense, GQA expanded)"),
              (eng, "sdpa_cudnn_tbps", "SDPA cuDNN (dense, GQA expanded)")]
    series = [s for s in series if any(s[1] in r for r in s[0])]
    w = 0.8 / max(len(series), 1)
    for i, (rows, key, name) in enumerate(series):
        ax1.bar([x + i * w for x in range(len(rows))], [r.get(key, 0) for r in rows], w, label=name)
    if res["copy_tbps"]:
        ax1.axhline(res["copy_tbps"], color="k", ls="--", label=f"device copy {res['copy_tbps']:.2f} TB/s")
    ax1.set_xticks([x + w * (len(series) - 1) / 2 for x in range(len(labels))], labels)
    ax1.set_ylabel("attained KV bandwidth (TB/s), back-to-back (SDPA/Flex: per call)")
    sh = res.get("shape", {})
    ax1.set_title(f"decode, {sh.get('dtype', 'bf16')}, D={D}, {HQ}/{HKV} heads, page {PAGE}")
    ax1.legend(fontsize=7)
    eng, one = by_path(res["prefill"], "engine"), by_path(res["prefill"], "one_call")
    labels = [r["case"] for r in eng]
    series = [(eng, "triton_tflops", "ours, engine path"), (one, "triton_tflops", "ours, one-call API"),
              (eng, "vllm_unified_tflops", "vLLM unified (Triton)"), (eng, "flex_paged_tflops", "FlexAttention (paged)"),
              (eng, "sdpa_cudnn_tflops", "SDPA cuDNN"), (eng, "sdpa_flash_tflops", "SDPA flash")]
    series = [s for s in series if any(s[1] in r for r in s[0])]
    w = 0.8 / max(len(series), 1)
    for i, (rows, key, name) in enumerate(series):
        ax2.bar([x + i * w for x in range(len(rows))], [r.get(key, 0) for r in rows], w, label=name)
    ax2.set_xticks([x + w * (len(series) - 1) / 2 for x in range(len(labels))], labels)
    ax2.set_ylabel("TFLOP/s")
    ax2.set_title(f"prefill, causal ({res['device']})", fontsize=9)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
