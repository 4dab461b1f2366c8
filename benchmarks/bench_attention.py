"""Paged-attention benchmark: one process, same inputs, providers side by side.

    python benchmarks/bench_attention.py --out benchmarks/out   # writes results.json + results.png

Decode is reported as attained KV bandwidth (K+V bytes read / time, TB/s) and as % of the
device-copy bandwidth measured in the same run; prefill as TFLOP/s and % of cuDNN SDPA on
the dense equivalent. bf16, head_dim 128, 32 query / 8 KV heads, page 64. Ours and the peers (vLLM, SGLang):
throughput of back-to-back calls and latency per call (keys ``*_latency``); the reference, FlexAttention and
SDPA: latency per call (timing.py says how each is taken). Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time

import torch
import torch.nn.functional as F

from timing import copy_tbps, event_latency, throughput
from vllm_xpu_attn.kernels import get_provider

HQ, HKV, D, PAGE = 32, 8, 128, 64
DTYPE = torch.bfloat16
DECODE = [(64, 4096), (256, 1024), (8, 32768)]
PREFILL = [("1x8192 causal", 1, 8192, 0), ("16x512 on 2048 prefix", 16, 512, 2048)]


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
    kc = torch.randn(n_pages, PAGE, HKV, D, device="cuda", dtype=DTYPE, generator=gen)
    vc = torch.randn_like(kc)
    pt = torch.randperm(n_pages, device="cuda", generator=gen).to(torch.int32).reshape(batch, pages_per)
    q = torch.randn(batch * q_len, HQ, D, device="cuda", dtype=DTYPE, generator=gen)
    seq = torch.full((batch,), k_len, device="cuda", dtype=torch.int32)
    cu = torch.arange(0, batch * q_len + 1, q_len, device="cuda", dtype=torch.int32)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/out")
    ap.add_argument("--reference", action="store_true", help="also time the (slow) reference provider")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    tri = get_provider("triton")
    ref = get_provider("reference")
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "copy_tbps": copy_tbps(),
           "flex_attention_paged": "torch.nn.attention.experimental._paged_attention + torch.compile(flex_attention)",
           "decode": [], "prefill": []}
    import triton

    res["triton"] = triton.__version__

    for batch, ctx in DECODE:
        q, kc, vc, pt, seq, cu = paged_inputs(batch, 1, ctx, gen)
        kv_bytes = 2 * batch * ctx * HKV * D * kc.element_size()
        row = {"batch": batch, "context": ctx, "kv_gb": kv_bytes / 1e9}
        t = event_latency(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1))
        row["triton_us"] = t * 1e6
        row["triton_tbps_latency"] = kv_bytes / t / 1e12  # one call + sync: includes the host launch
        row["triton_pct_copy_latency"] = 100 * row["triton_tbps_latency"] / res["copy_tbps"]
        t = throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1))
        row["triton_tbps"] = kv_bytes / t / 1e12  # back-to-back
        row["triton_pct_copy"] = 100 * row["triton_tbps"] / res["copy_tbps"]
        peer_rows(row, "tbps", kv_bytes, tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1), q, kc, vc, pt, seq,
                  cu, 1, ctx)
        for name in ("vllm_unified", "sglang_decode"):
            if f"{name}_tbps" in row:
                row[f"{name}_pct_copy"] = 100 * row[f"{name}_tbps"] / res["copy_tbps"]
        if a.reference:
            t = event_latency(lambda: ref.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1), iters=3, warmup=1)
            row["reference_tbps"] = kv_bytes / t / 1e12
        flex_row(row, "tbps", kv_bytes, tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1),
                 lambda: flex_paged(q, kc, vc, pt, batch, 1, ctx))
        qd, k, v = dense_from_paged(q, kc, vc, pt, batch, 1, ctx)
        for name in ("cudnn", "flash", "efficient"):
            try:
                t = event_latency(sdpa(name, qd, k, v, False))
                row[f"sdpa_{name}_tbps"] = kv_bytes / t / 1e12  # (dense K/V, GQA expanded: reads 4x the bytes)
            except Exception as e:  # a backend may refuse the shape
                row[f"sdpa_{name}_error"] = str(e).splitlines()[0][:200]
        res["decode"].append(row)
        save(res, a.out)  # after every row: a run cut short keeps what it measured
        print(json.dumps(row), flush=True)
        del q, kc, vc, qd, k, v
        torch.cuda.empty_cache()

    for label, batch, new, prefix in PREFILL:
        k_len = prefix + new
        q, kc, vc, pt, seq, cu = paged_inputs(batch, new, k_len, gen)
        # causal FLOPs: query i sees prefix + i + 1 keys; 2 matmuls x 2 FLOP per MAC
        macs = batch * HQ * D * sum(prefix + i + 1 for i in range(new))
        flops = 4 * macs
        row = {"case": label, "batch": batch, "new": new, "prefix": prefix}
        t = event_latency(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), iters=10)
        row["triton_tflops_latency"] = flops / t / 1e12
        t = throughput(lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), 10)
        row["triton_tflops"] = flops / t / 1e12
        peer_rows(row, "tflops", flops, tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), q, kc, vc, pt, seq,
                  cu, new, k_len)
        if a.reference:
            t = event_latency(lambda: ref.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new), iters=2, warmup=1)
            row["reference_tflops"] = flops / t / 1e12
        flex_row(row, "tflops", flops, tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, new),
                 lambda: flex_paged(q, kc, vc, pt, batch, new, k_len), iters=10)
        qd, k, v = dense_from_paged(q, kc, vc, pt, batch, new, k_len)
        for name in ("cudnn", "flash"):
            try:
                t = event_latency(sdpa(name, qd, k, v, prefix > 0), iters=10)
                row[f"sdpa_{name}_tflops"] = flops / t / 1e12
            except Exception as e:
                row[f"sdpa_{name}_error"] = str(e).splitlines()[0][:200]
        if "sdpa_cudnn_tflops" in row:
            row["triton_pct_cudnn"] = 100 * row["triton_tflops"] / row["sdpa_cudnn_tflops"]
        res["prefill"].append(row)
        save(res, a.out)
        print(json.dumps(row), flush=True)
        del q, kc, vc, qd, k, v
        torch.cuda.empty_cache()

    save(res, a.out)
    plot(res, os.path.join(a.out, "results.png"))
    print(json.dumps({"copy_tbps": res["copy_tbps"]}))


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

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"b{r['batch']} ctx{r['context']}" for r in res["decode"]]
    series = [("triton_tbps", "triton (paged)"), ("flex_paged_tbps", "FlexAttention (paged)"),
              ("sdpa_flash_tbps", "SDPA flash (dense, GQA expanded)"), ("sdpa_cudnn_tbps", "SDPA cuDNN (dense, GQA expanded)")]
    w = 0.8 / len(series)
    for i, (key, name) in enumerate(series):
        ax1.bar([x + i * w for x in range(len(labels))], [r.get(key, 0) for r in res["decode"]], w, label=name)
    ax1.axhline(res["copy_tbps"], color="k", ls="--", label=f"device copy {res['copy_tbps']:.2f} TB/s")
    ax1.set_xticks([x + w * (len(series) - 1) / 2 for x in range(len(labels))], labels)
    ax1.set_ylabel("attained KV bandwidth (TB/s)")
    ax1.set_title("decode, bf16, D=128, 32/8 heads, page 64")
    ax1.legend(fontsize=7)
    labels = [r["case"] for r in res["prefill"]]
    series = [("triton_tflops", "triton (paged)"), ("flex_paged_tflops", "FlexAttention (paged)"),
              ("sdpa_cudnn_tflops", "SDPA cuDNN"), ("sdpa_flash_tflops", "SDPA flash")]
    for i, (key, name) in enumerate(series):
        ax2.bar([x + i * w for x in range(len(labels))], [r.get(key, 0) for r in res["prefill"]], w, label=name)
    ax2.set_xticks([x + w * (len(series) - 1) / 2 for x in range(len(labels))], labels)
    ax2.set_ylabel("TFLOP/s")
    ax2.set_title(f"prefill, causal ({res['device']})")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
