"""Strict fake of vllm-xpu-kernels 0.1.16.2 ``flash_attn_interface`` and the ``_vllm_fa2_C.varlen_fwd`` op.

Citations: ``W:L`` = vllm_xpu_kernels/flash_attn_interface.py of the 0.1.16.2 wheel; ``BIN`` = a
string in the wheel's binaries (_vllm_fa2_C.abi3.so, libattn_kernels_xe_2.so); ``M:path:L`` = the
C++ at vllm-project/vllm-xpu-kernels main 4543b580 (2026-08-21; no 0.1.16.2 source exists, the
binary strings win where they differ). The compiled kernel set is the xe2 (BMG) set read from the
wheel's generated kernel file names (tests/fakes/README.md).
"""
from typing import Optional

import torch

from _common import check, record, reference, rows_as_read, sinks_as_read

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
_SPEC_DECODE_MAX_QLEN = 16  # W:51-55
_warned_missing_configs = set()  # W:24

# Paged decode tuples compiled for xe2: (qgroup, head bucket, page tile, causal, local, sink)
# from the TU names paged_decode_kernel_template_q<QG>_h<HEAD>_p<PAGE>_<c><l><s>.cpp (BIN xe_2)
_DECODE = set()
for qg, head, tile, flags in [
    (8, 64, 16, "fff"), (8, 64, 64, "fff fft ftf ftt"), (8, 96, 16, "ftf"), (8, 96, 64, "fff ftf"),
    (8, 128, 16, "fff ftf tff"), (8, 128, 32, "fff tff"), (8, 128, 64, "fff fft ftf tff"), (8, 192, 16, "tff"),
    (8, 192, 32, "tff"), (8, 192, 64, "fff tff"), (8, 256, 32, "ftf"), (8, 256, 64, "fff ftf"), (8, 512, 32, "fff"),
    (8, 512, 64, "fff"), (8, 576, 64, "fff"), (16, 64, 16, "fff tff"), (16, 64, 32, "fff tff"),
    (16, 64, 64, "fff tff"), (16, 128, 16, "fff ftf"), (16, 128, 64, "fff ftf"), (16, 256, 64, "fff"),
]:
    for f in flags.split():
        _DECODE.add((qg, head, tile, *(c == "t" for c in f)))
# Chunk-prefill tuples compiled for xe2: (head bucket, paged, causal, local, sink, lse)
# from chunk_prefill_kernel_template_chunk_policy_head<H>_<paged><causal><sink><local><lse>.cpp (BIN xe_2)
_CHUNK = set()
for head, tuples in [
    (64, "fffff ftfff tffff tffft tftff tfftf tfttf ttfff ttfft tttff ttftf ttttf"),
    (80, "fffff"), (96, "fffff tftff ttfff ttfft"),
    (128, "fffff fffft ftfff ftfft tffff tffft tftff tfftf tfttf ttfff ttfft tttff ttftf ttttf"),
    (192, "fffft ftfff ftfft ttfff ttfft"), (256, "fffff fffft ftfff ftfft tftff ttfff ttfft"), (512, "ttfff ttfft"),
]:
    for t in tuples.split():  # written here in (paged, causal, local, sink, lse) order
        _CHUNK.add((head, *(c == "t" for c in t)))
DECODE_HEADS = (64, 96, 128, 192, 256, 512, 576)  # M:csrc/xpu/attn/xe_2/fmha_utils.hpp:6-12 (bucketed by <=)
CHUNK_HEADS = (64, 80, 96, 128, 192, 256, 512)  # + the 0.1.16.2 head-80 policy (BIN chunk_policy_head80)


def _bucket(d, heads, what):
    for h in heads:
        if d <= h:
            return h
    raise RuntimeError(f"{what} only supports head dimension at most {heads[-1]}")  # BIN "...at most "


def _tile(block_size):  # W:169-179 (mirror of C++ dispatch_by_page_size)
    return 64 if block_size % 64 == 0 else 32 if block_size == 32 else 16


def _normalize_descale_tensor(descale, name):
    if descale is None:
        return None
    assert descale.dtype in (torch.float32, torch.bfloat16, torch.float16), \
        f"{name} must be a float32 or bfloat16 or float16 scalar tensor view"  # W:156-157
    assert descale.untyped_storage().nbytes() == descale.element_size(), \
        f"{name} must be view of single scalar tensor"  # W:158-159
    if descale.dtype == torch.float32:
        return descale  # W:161
    return descale.flatten()[0].to(torch.float32).expand(descale.shape)  # W:162-166


def _varlen_fwd(q, k, v, out, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, alibi_slopes, max_seqlen_q,
                max_seqlen_k, q_scale, k_scale, v_scale, softmax_scale, softmax_sink, is_causal, left, right, softcap,
                return_softmax, mix_batch, decode_only=False):
    """torch.ops._vllm_fa2_C.varlen_fwd (schema: BIN _vllm_fa2_C.abi3.so)."""
    check(q.dtype in (torch.float16, torch.bfloat16, *FP8),
          "VLLM Kernel XPU only supports fp16, bf16, and fp8 (e4m3/e5m2) query types", "BIN _vllm_fa2_C")
    check(k.dtype == v.dtype, "key and value must have the same dtype", "M:flash_api.cpp:131-132")
    fp8 = k.dtype in FP8
    if not fp8:
        check(k.dtype == q.dtype, "query and key must have the same dtype", "M:flash_api.cpp:133-139")
    for t in (q, k, v):
        check(t.stride(-1) == 1, "Input tensor must have contiguous last dimension", "M:flash_api.cpp:145-150")
        check(t.shape[-1] * t.element_size() % 16 == 0,
              "Xe2 2D block requires the contiguous dim to be 16-byte aligned", "BIN; M:csrc/utils.h:15")
    check(q.dim() == 3, "query must be in ragged format", "M:flash_api.cpp:154")
    paged = block_table is not None
    if paged:
        check(block_table.dtype == torch.int32, "page_table must have dtype torch.int32", "M:flash_api.cpp:158-168")
        check(block_table.stride(-1) == 1, "page_table must have contiguous last dimension", "M:flash_api.cpp:158-168")
        block = k.shape[1]
        check(block > 0 and block % 16 == 0, "Expected block_size > 0 && (block_size % 16) == 0", "BIN xe_2")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        check(t.is_contiguous() and t.dtype == torch.int32, f"{name} must be contiguous int32",
              "M:flash_api.cpp:170-180")
    if fp8:
        check(k_scale is not None and v_scale is not None,
              "FP8 KV cache requires both k_scale and v_scale tensors to be provided.", "BIN xe_2/xe_3")
        for t in (k_scale, v_scale):
            check(t.dtype == torch.float32 and all(t.size(i) <= 1 or t.stride(i) == 0 for i in range(t.dim())),
                  "FP8 KV k_scale must be a float32 tensor with a single element.", "M:paged_decode_xe2.cpp:73-81")
    local = left != -1 or right != -1  # M:flash_api.cpp:190
    sink = softmax_sink is not None  # M:flash_api.cpp:191
    hq, d = q.shape[1], q.shape[2]
    lens_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).tolist()
    prefill_only = (not mix_batch and max_seqlen_q > 1) or not paged  # M:flash_api.cpp:207-208
    need_decode = paged and not prefill_only and (max_seqlen_q == 1 or any(n == 1 for n in lens_q))
    need_chunk = prefill_only or (max_seqlen_q > 1 and any(n > 1 for n in lens_q))
    if decode_only:
        need_decode, need_chunk = True, False
    if return_softmax:
        check(not local and not sink, "chunk prefill softmax_lse output is only supported when is_local=false and "
              "is_sink=false", "BIN xe_2")
    if need_decode:
        ratio = hq // k.shape[2]
        key = (8 if ratio <= 8 else 16, _bucket(d, DECODE_HEADS, "paged decode"), _tile(k.shape[1]), False, local,
               sink)  # decode runs with is_causal=false (M:flash_api.cpp:320)
        if key not in _DECODE:
            raise RuntimeError(f"Paged decode kernel tuple not compiled for this configuration. {key}")  # BIN
    if need_chunk:
        c_causal, c_local = is_causal, local
        if local and is_causal:
            c_causal = False  # M:csrc/xpu/attn/xe_2/fmha_xe2.cpp:117-124 (right window becomes 0)
        key = (_bucket(d, CHUNK_HEADS, "FMHA forward"), paged, c_causal, c_local, sink, bool(return_softmax))
        if key not in _CHUNK:
            raise RuntimeError(f"Chunk prefill kernel tuple not compiled for this configuration. {key}")  # BIN
    # softcap and alibi reach the op but no kernel reads them (M:flash_api.cpp:103-120, C5): dropped
    sinks_read = sinks_as_read(softmax_sink, q.dtype)  # ElementSink = TensorQ::element_type (chunk_prefill_epilogue.hpp:80)
    if sinks_read is not None:
        sinks_read = sinks_read[:hq].float()
    ks = k_scale.reshape(-1)[:1].reshape(1) if fp8 else None
    vs = v_scale.reshape(-1)[:1].reshape(1) if fp8 else None
    if paged:
        # rows at idx_b * block_table.size(1) (M:fmha_xe2.cpp:113, paged_decode_xe2.cpp:163, chunk_prefill_mainloop.hpp:244)
        res = reference().flash_attn_with_kvcache(
            q, k, v, rows_as_read(block_table), seqused_k, cu_seqlens_q, max_seqlen_q, softmax_scale=softmax_scale,
            causal=is_causal, window_size=(left, 0 if is_causal and right != -1 else right), sinks=sinks_read,
            k_descale=ks, v_descale=vs, return_softmax_lse=True)
    else:
        res = reference().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=softmax_scale,
            causal=is_causal, window_size=(left, right), sinks=sinks_read, return_softmax_lse=True)
    o, lse = res
    if out is not None:
        out.copy_(o)
        o = out
    return [o, lse if return_softmax else None]


def _fallback_varlen_attn(q, k, v, cu_seqlens_q, max_seqlen_q, cu_seqlens_k, max_seqlen_k, seqused_k,
                          block_table, softmax_scale, causal, window_size, softcap, s_aux, return_softmax_lse,
                          q_descale=None, k_descale=None, v_descale=None):
    """W:659-757: the PyTorch reference the wrapper falls into for kernels not compiled. Host syncs:
    ``cu_q = cu_seqlens_q.cpu().tolist()`` (W:678), ``kv_lens = seqused_k.cpu().tolist()`` (W:705)."""
    cu_seqlens_q.cpu().tolist()
    if seqused_k is not None:
        seqused_k.cpu().tolist()
    record("vllm_xpu_kernels", "fallback")
    if block_table is not None:
        res = reference().flash_attn_with_kvcache(
            q, k, v, block_table, seqused_k, cu_seqlens_q, max_seqlen_q, softmax_scale=softmax_scale, causal=causal,
            window_size=tuple(window_size), softcap=softcap, sinks=s_aux, k_descale=k_descale, v_descale=v_descale,
            return_softmax_lse=True)
    else:
        res = reference().flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                                 softmax_scale=softmax_scale, causal=causal,
                                                 window_size=tuple(window_size), softcap=softcap, sinks=s_aux,
                                                 return_softmax_lse=True)
    return res[0], (res[1] if return_softmax_lse else None)  # W:755-757


def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None,
                           q_v=None, dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size: Optional[list] = None, softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, return_softmax_lse=False, out=None,
                           scheduler_metadata=None, q_descale=None, k_descale=None, v_descale=None, num_splits=0,
                           fa_version=2, s_aux=None, num_splits_kv=None, is_mix_batch=True, host_kv_lens=None):
    # signature W:423-456
    if host_kv_lens is not None:
        if seqused_k is not None:
            raise ValueError("Provide only one of host_kv_lens and seqused_k")  # W:480-481
        seqused_k = host_kv_lens.to(torch.int32)  # W:482-483
    assert cu_seqlens_k is not None or seqused_k is not None, "cu_seqlens_k or seqused_k must be provided"  # W:485
    assert cu_seqlens_k is None or seqused_k is None, \
        "cu_seqlens_k and seqused_k cannot be provided at the same time"  # W:488
    assert block_table is None or seqused_k is not None, "when enable block_table, seqused_k is needed"  # W:490
    assert block_table is not None or cu_seqlens_k is not None, \
        "when block_table is disabled, cu_seqlens_k is needed"  # W:492
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)  # W:495-496
    q_descale = _normalize_descale_tensor(q_descale, "q_descale")  # W:497-499
    k_descale = _normalize_descale_tensor(k_descale, "k_descale")
    v_descale = _normalize_descale_tensor(v_descale, "v_descale")
    real_window_size = (-1, -1)
    if window_size is not None:
        assert len(window_size) == 2  # W:502-506
        real_window_size = (window_size[0], window_size[1])
    q, k, v = [x.contiguous() if x.stride(-1) != 1 else x for x in (q, k, v)]  # W:507 (block_table untouched)
    if fa_version != 2:
        raise NotImplementedError("not support yet")  # W:654-655
    if num_splits > 1:
        raise NotImplementedError("FA2 does not support num_splits > 1")  # W:512-513
    if scheduler_metadata is not None:
        raise NotImplementedError("FA2 does not support scheduler_metadata")  # W:514-516
    if (k_descale is not None) != (v_descale is not None):
        raise NotImplementedError("FA2 only supports both KV cache descaled")  # W:517-521
    batch = cu_seqlens_q.shape[0] - 1
    record("vllm_xpu_kernels", "varlen_fwd", paged=block_table is not None, lse=return_softmax_lse)
    spec = (block_table is not None and causal and not return_softmax_lse and softcap == 0.0 and alibi_slopes is None
            and q_v is None and q_descale is None and scheduler_metadata is None and seqused_k is not None
            and 1 < max_seqlen_q <= _SPEC_DECODE_MAX_QLEN and batch > 0 and q.shape[0] == batch * max_seqlen_q)
    if spec:  # W:527-551: rewritten as single-token decodes (causal False, W:105-135); no fallback
        res = _varlen_fwd(q, k, v, out, cu_seqlens_q, cu_seqlens_q, seqused_k, block_table, alibi_slopes,
                          max_seqlen_q, max_seqlen_k, q_descale, k_descale, v_descale, softmax_scale, s_aux, True,
                          real_window_size[0], real_window_size[1], softcap, False, is_mix_batch, decode_only=True)
        return res[0]  # W:536
    try:  # W:586-619
        o, lse = _varlen_fwd(q, k, v, out, cu_seqlens_q, cu_seqlens_q if cu_seqlens_k is None else cu_seqlens_k,
                             seqused_k, block_table, alibi_slopes, max_seqlen_q, max_seqlen_k, q_descale, k_descale,
                             v_descale, softmax_scale, s_aux, causal, real_window_size[0], real_window_size[1],
                             softcap, return_softmax_lse, is_mix_batch)
    except RuntimeError as e:
        if "not compiled" not in str(e):  # W:620-622
            raise
        _warned_missing_configs.add(str(e))  # W:626-639 (logged + printed once)
        o, lse = _fallback_varlen_attn(q, k, v, cu_seqlens_q, max_seqlen_q, cu_seqlens_k, max_seqlen_k, seqused_k,
                                       block_table, softmax_scale, causal, real_window_size, softcap, s_aux,
                                       return_softmax_lse, q_descale, k_descale, v_descale)
        if out is not None:
            out.copy_(o.reshape(out.shape))  # W:640-653
            o = out
    return (o, lse) if return_softmax_lse else (o)  # W:656
