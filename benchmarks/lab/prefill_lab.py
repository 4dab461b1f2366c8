"""Prefill experiments on the H200: tile sweep of the shipped paged kernel, a lean tensor-descriptor (TMA)
variant of it, and cuDNN dense SDPA as the yardstick, all in one process (one JSON line per result).

    python benchmarks/lab/prefill_lab.py [--quick]

Shapes: bench_attention's prefill cases (bf16, D=128, 32 q / 8 KV heads, page 64, shuffled pages):
1 x 8192 causal and 16 x 512 on 2048 cached keys. Every variant's output is checked against SDPA
before it is timed (back-to-back throughput, CUDA events).
"""

import json
import os
import sys

import torch
import triton
import triton.language as tl

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_BENCH, os.path.dirname(_BENCH)]  # benchmarks/ (bench_attention, timing); the package's repository
from bench_attention import D, HKV, HQ, PAGE, dense_from_paged, paged_inputs, sdpa  # noqa: E402
from timing import throughput  # noqa: E402
from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.descriptors import ensure_scratch_allocator  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.provider import TritonProvider  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.tiles import device_family  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton.tuning import TUNING  # noqa: E402

LOG2E = 1.4426950408889634


@triton.jit
def _lab_tma_kernel(Q, k_desc, v_desc, PT, O, stride_qt, stride_qh, stride_ot, stride_oh, stride_ptb,
                    q_len, k_len, scale_log2, kv_rows,
                    PAGE: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, DEV_DESC: tl.constexpr = False, ROW_COLS: tl.constexpr = 0):
    """Causal paged prefill, GQA-packed rows, K/V tiles by tensor descriptor over the cache viewed as
    [pages * PAGE, HKV * D] (BLOCK_N <= PAGE). Lab only: no features."""
    b = tl.program_id(0)
    tile = tl.num_programs(1) - 1 - tl.program_id(1)
    kvh = tl.program_id(2)
    if tile * BLOCK_M >= q_len * GROUP:
        return
    if DEV_DESC:  # device-side descriptors (what the provider's kernel does): K/V come as pointers
        k_desc = tl.make_tensor_descriptor(k_desc, shape=[kv_rows, ROW_COLS], strides=[ROW_COLS, 1],
                                           block_shape=[BLOCK_N, D])
        v_desc = tl.make_tensor_descriptor(v_desc, shape=[kv_rows, ROW_COLS], strides=[ROW_COLS, 1],
                                           block_shape=[BLOCK_N, D])
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    t = rows // GROUP
    head = kvh * GROUP + rows % GROUP
    row_ok = t < q_len
    pos = k_len - q_len + t
    offs_d = tl.arange(0, D)
    q_rows = (b * q_len + t).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :], mask=row_ok[:, None],
                other=0.0)
    pos_lo = k_len - q_len + (tile * BLOCK_M) // GROUP
    pos_hi = tl.minimum(k_len - q_len + (tile * BLOCK_M + BLOCK_M - 1) // GROUP, k_len - 1)
    hi = pos_hi + 1
    full_hi = tl.minimum((pos_lo + 1) // BLOCK_N * BLOCK_N, hi)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    pt_row = PT + b.to(tl.int64) * stride_ptb
    for start in range(0, full_hi, BLOCK_N):
        pg = tl.load(pt_row + start // PAGE)
        r = pg * PAGE + start % PAGE
        k = k_desc.load([r, kvh * D])
        s = tl.dot(q, k.T)
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        p = tl.exp2(s * scale_log2 - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([r, kvh * D])
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(q.dtype), v, acc)
        m_i = m_new
    for start in range(full_hi, hi, BLOCK_N):
        pg = tl.load(pt_row + start // PAGE)
        r = pg * PAGE + start % PAGE
        k = k_desc.load([r, kvh * D])
        s = tl.dot(q, k.T) * scale_log2
        j = start + tl.arange(0, BLOCK_N)
        ok = (j[None, :] <= pos[:, None]) & row_ok[:, None]
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([r, kvh * D])
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(q.dtype), v, acc)
        m_i = m_new
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(O + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :], o.to(O.dtype.element_ty),
             mask=row_ok[:, None])


def lab_tma(q, kc, vc, pt, batch, q_len, k_len, cfg, dev_desc=False):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, warps, stages = cfg
    k2 = kc.view(-1, HKV * D)
    v2 = vc.view(-1, HKV * D)
    if dev_desc:
        ensure_scratch_allocator()
        kd, vd = k2, v2
    else:
        kd = TensorDescriptor.from_tensor(k2, [bn, D])
        vd = TensorDescriptor.from_tensor(v2, [bn, D])
    out = torch.empty_like(q)
    grid = (batch, triton.cdiv(q_len * (HQ // HKV), bm), HKV)

    def f():
        _lab_tma_kernel[grid](q, kd, vd, pt, out, q.stride(0), q.stride(1), out.stride(0), out.stride(1),
                              pt.stride(0), q_len, k_len, D ** -0.5 * LOG2E, k2.shape[0], PAGE=PAGE,
                              GROUP=HQ // HKV, D=D, BLOCK_M=bm, BLOCK_N=bn, DEV_DESC=dev_desc, ROW_COLS=HKV * D,
                              num_warps=warps, num_stages=stages)
        return out
    return f


def causal_flops(batch, q_len, k_len):
    # visible (query, key) pairs of a bottom-right aligned causal mask, 4 * D FLOPs each, per q head
    pairs = q_len * (k_len - q_len) + q_len * (q_len + 1) / 2
    return 4 * D * HQ * batch * pairs


def main():
    quick = "--quick" in sys.argv
    tri = get_provider("triton")
    fam = device_family(torch.device("cuda"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    shapes = [(1, 8192, 8192), (16, 512, 2560)]
    # provider variants: (label, TritonProvider.tensor_descriptors, TUNING["prefill"] override or None)
    prov = [("provider", None, None), ("provider_ptr", False, None)]
    if not quick:
        prov += [("provider", None, c) for c in [(128, 64, 4, 3), (128, 64, 8, 2), (64, 64, 4, 2)]]
    tma_cfgs = [(128, 64, 4, 2)] if quick else [(128, 64, 4, 2), (64, 64, 4, 2), (128, 64, 4, 3), (128, 32, 4, 2)]
    shipped = dict(TUNING[fam])
    for rep in range(2):
        for batch, q_len, k_len in shapes:
            q, kc, vc, pt, seq, cu = paged_inputs(batch, q_len, k_len, gen)
            qd, kd, vd = dense_from_paged(q, kc, vc, pt, batch, q_len, k_len)
            fl = causal_flops(batch, q_len, k_len)
            sd = sdpa("cudnn", qd, kd, vd, q_len != k_len)
            ref = sd().transpose(1, 2).reshape(batch * q_len, HQ, D)
            t = throughput(sd, n=20)
            rec = dict(rep=rep, shape=[batch, q_len, k_len])
            print(json.dumps({**rec, "variant": "cudnn_sdpa", "tflops": round(fl / t / 1e12, 1)}), flush=True)
            for label, use_desc, cfg in prov:
                TritonProvider.tensor_descriptors = use_desc
                if cfg is not None:
                    TUNING[fam]["prefill"] = cfg
                tri.clear_caches()
                f = lambda: tri.flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, q_len)  # noqa: E731
                try:
                    err = (f().float() - ref.float()).abs().max().item()
                    t = throughput(f, n=20)
                    c = next(iter(tri._configs.values()))
                    used = (c.block_m, c.block_n, c.warps, c.stages, "desc" if c.desc else "ptr")
                except Exception as e:  # out of shared memory etc.
                    print(json.dumps({**rec, "variant": label, "cfg": cfg, "error": str(e)[:100]}), flush=True)
                    continue
                finally:
                    TUNING[fam].update(shipped)
                    TritonProvider.tensor_descriptors = None
                print(json.dumps({**rec, "variant": label, "cfg": used, "err": round(err, 4),
                                  "tflops": round(fl / t / 1e12, 1)}), flush=True)
            for cfg, dev in [(c, False) for c in tma_cfgs] + [(tma_cfgs[0], True)]:
                label = "lab_tma_devdesc" if dev else "lab_tma"
                try:
                    f = lab_tma(q, kc, vc, pt, batch, q_len, k_len, cfg, dev)
                    err = (f().float() - ref.float()).abs().max().item()
                    t = throughput(f, n=20)
                except Exception as e:
                    print(json.dumps({**rec, "variant": label, "cfg": cfg, "error": str(e)[:100]}), flush=True)
                    continue
                print(json.dumps({**rec, "variant": label, "cfg": cfg, "err": round(err, 4),
                                  "tflops": round(fl / t / 1e12, 1)}), flush=True)
            del q, kc, vc, qd, kd, vd
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
