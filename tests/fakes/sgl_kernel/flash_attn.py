"""Strict fake of sgl-kernel-xpu ``python/sgl_kernel/flash_attn.py`` and the ``sgl_kernel::fwd`` op.

Every rule cites the vendor: ``py:L`` = python/sgl_kernel/flash_attn.py, ``cpp:L`` =
src/sycl/flash_attention.cpp, ``dec_disp`` / ``pre_disp`` = src/sycl/kernels/flash_attention_v2/
xe_fmha_fwd_{decode,prefill}_dispatch.hpp, ``epi`` = .../collective/xe_fmha_fwd_epilogue.hpp,
``ml`` = .../collective/xe_fmha_fwd_mainloop.hpp, all at main 9cf16bf9 (2026-08-21) unless a PR is
named. Two builds (``BUILD``, set by tests):
  "9cf16bf9": main of 2026-08-21: softcap stored but never applied, LSE never written, decode
              page sizes 64/128 only;
  "pr491":    a build with PRs #330 (in-place out/LSE), #454 (page size 1), #487 (LSE with
              causal/local; RuntimeError with sinks or FP8) and #491 (softcap applied).
"""
from typing import Optional, Union

import torch

from _common import GARBAGE, check, record, reference, rows_as_read, sinks_as_read

BUILD = "9cf16bf9"
HAS_FP64 = True  # py:21-22 `return torch.xpu.get_device_properties().has_fp64` (BMG and later)
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
PAGED_HEAD_DIMS = (64, 96, 128, 192, 256, 512)  # cpp:664-667 decode, cpp:1185-1188 paged prefill
NOPAGE_HEAD_DIMS = (64, 72, 80, 96, 128, 192, 256, 512)  # cpp:262-266, cpp:841-845


def _next_pow2(x: int) -> int:
    return 1 << (max(x, 1) - 1).bit_length()


def _check_descale(name, d):
    # cpp:45-70 (get_per_tensor_descale_ptr): float32, on device, non-empty, numel 1 or stride-0 expanded
    check(d.dtype == torch.float32, f"{name} must be float32", "cpp:45-70")
    check(d.numel() > 0, f"{name} must not be empty", "cpp:45-70")
    check(all(d.size(i) <= 1 or d.stride(i) == 0 for i in range(d.dim())),
          f"{name} must be a scalar or a view expanded from a single scalar element", "cpp:54-63")
    return d.reshape(-1)[:1].reshape(1)


def _fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, page_table, q_descale, k_descale,
         v_descale, softmax_scale, sinks, is_causal, left, right, softcap, out):
    """The op's top-level dispatcher (cpp:1332-1435) and the checks of the path it takes."""
    check(q.dim() == 3, "query must be in ragged format (total_q, h, d)", "cpp:1362")
    hq, d = q.shape[1], q.shape[2]
    if out is not None:
        check(out.dtype == q.dtype, "out dtype must match q dtype", "cpp:1367")
        check(tuple(out.shape) == (q.shape[0], hq, v.shape[-1]), "out shape must be [total_q, num_heads, head_size_v]",
              "cpp:1368-1371")
        check(out.stride(-1) == 1, "out must have a contiguous last dimension", "cpp:1373")
    batch = cu_seqlens_q.numel() - 1
    if int(max_seqlen_q) == 1:
        path = "decode"  # cpp:1419-1421
    elif page_table is None or batch == 1:
        path = "prefill"  # cpp:1422-1429
    else:
        path = "chunkprefill"  # cpp:1430-1434: a decode launch and a prefill launch
    check(q.dtype in (torch.float16, torch.bfloat16), f"mha_fwd only supports Half and BFloat16, got {q.dtype}",
          "cpp:309-312")
    fp8 = k.dtype in FP8
    if fp8:
        check(v.dtype == k.dtype, "fp8 KV cache requires key and value to have the same fp8 dtype", "cpp:323-325")
    else:
        check(k.dtype == q.dtype and v.dtype == q.dtype, "query and key/value must have the same dtype", "cpp:327-328")
    for t in (q, k, v):
        check(t.stride(-1) == 1, "tensor must have contiguous last dimension", "cpp:330-332 CHECK_LAST_DIM_CONTIGUOUS")
    check(hq % k.shape[-2] == 0, "Number of heads in key/value must divide number of heads in query", "cpp:390")
    check(d <= 512, "FlashAttention forward only supports head dimension at most 512", "cpp:389")
    check(d % 8 == 0 and v.shape[-1] % 8 == 0, "head_size should be a multiple of 8", "cpp:415-417")

    if page_table is None:  # mha_fwd_nopage (cpp:83-271 decode, cpp:686-877 prefill)
        check(not fp8, "query and key must have the same dtype (no FP8 without a page table)", "cpp:104-105, 707-708")
        check(d in NOPAGE_HEAD_DIMS, f"Unsupported head size for non-paged attention: {d}", "cpp:262-266, 841-845")
        check(sinks is None, "No-page attention does not support sink logits", "xe_fmha_fwd_*_nopage_kernel.cpp.in:51-55")
        if path == "decode":
            check(_next_pow2(hq // k.shape[-2]) <= 16, "Unsupported q_group_size for decode attention", "cpp:258-259")
        lens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
        res = reference().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(lens_k.max()) if lens_k.numel() else 0,
            softmax_scale=softmax_scale, causal=is_causal,
            window_size=(left, right), softcap=softcap if BUILD != "9cf16bf9" else 0.0)
        o = res if out is None else out.copy_(res)
        # nopage LSE is never written (cpp:161, 764; after #330 "softmax_lse is left untouched")
        return o, torch.full((hq, q.shape[0]), GARBAGE)

    check(page_table.dtype == torch.int32, "page_table must have dtype torch.int32", "cpp:356")
    check(page_table.stride(-1) == 1, "page_table must have contiguous last dimension", "cpp:357")
    check(cu_seqlens_q.is_contiguous() and cu_seqlens_q.dtype == torch.int32,
          "cu_seqlens_q must be contiguous int32", "cpp:360-361 CHECK_INPUT")
    check(cu_seqlens_k.is_contiguous() and cu_seqlens_k.dtype == torch.int32,
          "cu_seqlens_k must be contiguous int32", "cpp:363-364 CHECK_INPUT")
    check(page_table.shape[0] == cu_seqlens_k.shape[0], "batch_size must be equal to batch_size_k", "cpp:383-385")
    page = k.shape[1]
    check(d in PAGED_HEAD_DIMS, f"Unsupported head size for paged attention: {d}", "cpp:664-667, 1185-1188")
    decode_launch = path in ("decode", "chunkprefill")  # chunkprefill's decode launch has the same limits (cpp:1320)
    if decode_launch:
        check(_next_pow2(hq // k.shape[-2]) <= 16, "Unsupported q_group_size for decode attention", "cpp:660-661")
        pages = (64, 128) if BUILD == "9cf16bf9" else (1, 64, 128)  # page size 1: PR #454
        check(page in pages, f"Unsupported page size for decode attention: {page}", "cpp:668-671 (+PR #454)")
    if path == "chunkprefill":
        check(q_descale is None, "chunkprefill two-launch path does not yet support q_descale", "cpp:1264-1267")
    if sinks is not None:
        check(d == 64, f"sink is only supported for head_size == 64, got {d}", "cpp:550-553, 1078-1083")
    descale = (None, None)
    if fp8:
        check(q.dtype == torch.bfloat16, "fp8 KV cache decode/prefill only supports a bf16 query",
              "dec_disp:142, pre_disp:86")
        check(sinks is None, "fp8 KV cache does not support sink logits",
              "xe_fmha_fwd_decode_fp8_kernel.cpp.in:33, xe_fmha_fwd_prefill_fp8_kernel.cpp.in:29-30")
        check(k_descale is not None and v_descale is not None, "fp8 KV cache requires k_descale and v_descale",
              "cpp:566-568, 930")
        descale = (_check_descale("k_descale", k_descale), _check_descale("v_descale", v_descale))
    # epi:81/419: ElementSink = TensorQ::element_type, pointer cast with no dtype check (cpp:553)
    sinks_read = sinks_as_read(sinks, q.dtype)
    if sinks_read is not None:
        sinks_read = sinks_read[:hq].float()
    # ml:278: `batch_offset = l_coord * params.max_num_pages_per_seq` (rows at index * size(1), cpp:373)
    table = rows_as_read(page_table)
    # decode never masks causally (cpp:580); prefill is causal iff left < 0 and right == 0 (cpp:1104-1105)
    applied_softcap = 0.0 if BUILD == "9cf16bf9" else softcap  # cpp:559/1085: params.softcap stored only
    o = reference().flash_attn_with_kvcache(
        q, k, v, table, cu_seqlens_k, cu_seqlens_q, int(max_seqlen_q), softmax_scale=softmax_scale,
        causal=is_causal, window_size=(left, 0 if is_causal else right), softcap=applied_softcap, sinks=sinks_read,
        k_descale=descale[0], v_descale=descale[1], return_softmax_lse=True)
    o, lse = o
    if out is not None:
        out.copy_(o)
        o = out
    if BUILD == "9cf16bf9":
        # cpp:494, 1034: softmax_lse = torch::empty(...) never written; chunkprefill returns {0} (cpp:1326-1327)
        lse = torch.empty(0) if path == "chunkprefill" else torch.full((hq, q.shape[0]), GARBAGE)
    return o, lse


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, torch.Tensor]] = None, cache_batch_idx=None,
                            cache_leftpad=None, page_table=None, cu_seqlens_q=None, cu_seqlens_k_new=None,
                            max_seqlen_q=0, max_seqlen_k=0, rotary_seqlens=None, q_descale=None, k_descale=None,
                            v_descale=None, softmax_scale=None, sinks=None, causal=False, window_size=(-1, -1),
                            softcap=0.0, rotary_interleaved=True, scheduler_metadata=None, num_splits=0,
                            pack_gqa=None, sm_margin=0, return_softmax_lse=False, out=None):
    # signature: py:103-136
    assert k_cache.stride(-1) == 1, "k_cache must have contiguous last dimension"  # py:231
    assert v_cache.stride(-1) == 1, "v_cache must have contiguous last dimension"  # py:232
    check(k is None and v is None and qv is None, "q_v is not supported yet (and k/v are never passed to the op)",
          "cpp:603-608; py:267-297 (no k/v in the op call)")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5  # py:233-236
    assert cu_seqlens_q is not None, "the varlen-q form is the one the wrapper uses"
    # py:264-266: no else branch, cache_seqlens=None leaves cu_seqlens_k unbound
    if cache_seqlens is None:
        raise UnboundLocalError("cannot access local variable 'cu_seqlens_k' (py:264-273)")
    assert cache_seqlens.size(0) + 1 == cu_seqlens_q.size(0)  # py:264
    left, right = window_size[0], window_size[1]  # py:288-289
    if causal:
        right = 0  # cpp:401-402
    record("sgl_kernel", "flash_attn_with_kvcache", page=k_cache.shape[1], lse=return_softmax_lse, build=BUILD)
    if BUILD != "9cf16bf9" and return_softmax_lse:
        # PR #487: LSE supported with causal/local masking, RuntimeError with sinks or an FP8 KV cache
        check(sinks is None and k_cache.dtype not in FP8,
              "return_softmax_lse is not supported with sink logits or an fp8 KV cache", "PR #487 docstring")
    o, lse = _fwd(q, k_cache, v_cache, cu_seqlens_q, cache_seqlens, max_seqlen_q, max_seqlen_k, page_table, q_descale,
                  k_descale, v_descale, softmax_scale, sinks, causal, left, right, softcap, out)
    if BUILD == "9cf16bf9":
        rest = (torch.empty(0), torch.empty(0))  # the schema returns 4 tensors (torch_extension_sycl.cc:357)
        return (o, lse, *rest) if return_softmax_lse else o  # py:298
    return (o, lse) if return_softmax_lse else o  # PR #330: `return (out, softmax_lse) if return_softmax_lse else out`


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, sinks=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), softcap=0.0, num_splits=0,
                           pack_gqa=None, sm_margin=0, return_softmax_lse=False):
    # signature: py:301-324 (no out=)
    if not HAS_FP64:
        raise NotImplementedError("flash_attn at sgl-kernel-xpu is only supported on BMG and later")  # py:325-328
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5  # py:330-333
    left, right = window_size[0], window_size[1]
    if causal:
        right = 0
    record("sgl_kernel", "flash_attn_varlen_func", build=BUILD)
    o, lse = _fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, None, q_descale, k_descale,
                  v_descale, softmax_scale, sinks, causal, left, right, softcap, None)  # py:340-370, page_table None
    return (o, lse) if return_softmax_lse else o  # py:372
