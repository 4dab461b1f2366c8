"""Strict fake of IPEX 2.8.10+xpu ``ipex.llm.modules.PagedAttention`` (XPU backend).

Citations at intel/intel-extension-for-pytorch release/xpu/2.8.10 09330339 (= tag v2.8.10+xpu but
README): ``LLM`` = intel_extension_for_pytorch/llm/modules/mha_fusion.py, ``XPUF`` =
.../transformers/models/xpu/fusions/mha_fusion.py, ``CACHE`` = csrc/gpu/aten/operators/CacheOps.cpp,
``ATT`` = csrc/gpu/aten/operators/transformers/attention.cpp, ``FMHA`` / ``FMHAK`` / ``PA1`` / ``PA2`` /
``PAK`` = csrc/gpu/aten/operators/xetla/kernels/SDP/{fmha_forward.cpp, fmha_forward_kernel.cpp.in,
paged_attention_v1.cpp, paged_attention_v2.cpp, paged_attention_kernel.hpp}.
"""
import torch

from _common import VendorError, check, record, reference

ARCH = "bmg"  # XeHpc (FMHA:52-53, xetla_arch.h:28-31); "pvc" lifts the BMG-only GQA limit below
HOST_SYNCS = []  # calls that would read device values on the host (tests assert it stays empty)


class PagedAttention:
    @classmethod
    def reshape_and_cache(cls, key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto", k_scale=1.0,
                          v_scale=1.0):
        # LLM:716-727 -> CACHE:642-664: key cache is 5-D [nb, H, D/x, bs, x] (CACHE:645-646)
        key_cache.size(4)  # CACHE:657 `int x = key_cache.size(4);` (a 4-D NHD cache raises IndexError)
        raise VendorError("the fake does not model the 5-D layout write; use reshape_and_cache_flash  [CACHE:645-657]")

    @classmethod
    def reshape_and_cache_flash(cls, key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype="auto",
                                k_scale=1.0, v_scale=1.0):
        # LLM:741-752 -> XPUF:450-471 -> CACHE:666-688; cache [num_blocks, block_size, num_heads, head_size]
        check(key.dtype in (torch.float32, torch.float16, torch.bfloat16), "Unsupported input type of kv cache",
              "CACHE:522")
        check(kv_cache_dtype in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), "Unsupported data type of kv cache",
              "CACHE:514-546")
        check(key_cache.stride(0) == value_cache.stride(0), "TORCH_CHECK(key_cache.stride(0) == value_cache.stride(0))",
              "CACHE:684")
        h, d = key.shape[1], key.shape[2]
        for c in (key_cache, value_cache):  # CACHE:379-380: in-block offset `block_offset * n + head_idx * head_size_`
            check(c.dim() == 4 and c.shape[2] == h and c.shape[3] == d and c.stride(3) == 1 and c.stride(2) == d
                  and c.stride(1) == h * d, "each block must be a dense [block_size, H, D]", "CACHE:379-380")
        check(key.stride(2) == 1 and key.stride(1) == d, "each token's [H, D] must be dense", "CACHE:279, 681")
        check(slot_mapping.dtype in (torch.int64, torch.int32), "slot_mapping int64 or int32", "CACHE:600, 630")
        check(key_cache.numel() < 2**31, "32-bit index arithmetic", "CACHE:379")
        if kv_cache_dtype == "auto":
            check(key_cache.dtype == key.dtype, "'auto' stores the key dtype (reinterpret_cast)", "CACHE:518, 560")
        record("ipex", "reshape_and_cache_flash")
        keep = slot_mapping >= 0  # CACHE:368-369 negative slot = skip
        for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
            flat = cache.view(-1, h, d)
            vals = src[keep].float() * scale if kv_cache_dtype != "auto" else src[keep]  # CACHE:384: x * k_scale
            flat[slot_mapping[keep].long()] = vals.to(cache.dtype)
        return key_cache, value_cache

    @classmethod
    def single_query_cached_kv_attention(cls, output, query, key_cache, value_cache, head_mapping, scale,
                                         block_tables, context_lens, block_size, max_context_len, alibi_slopes,
                                         kv_cache_dtype="auto", window_size=-1, k_scale=1.0, v_scale=1.0,
                                         softcap=-1.0):
        # LLM:778-797 -> XPUF:473-511: reads [num_blocks, num_kv_heads, head_size, block_size] (PAK:293-294)
        check(key_cache.shape[3] == block_size and key_cache.shape[2] == query.shape[2],
              "K/V cache must be [num_blocks, num_kv_heads, head_size, block_size]", "PAK:293-294, PAK:433-434")
        HOST_SYNCS.append("single_query_cached_kv_attention: (head_mapping == 0).sum() -> int (XPUF:496)")
        raise VendorError("the fake does not model the head-major decode layout  [PAK:293-294]")

    @classmethod
    def flash_attn_varlen_func(cls, output, query, k_cache, v_cache, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q,
                               max_seqlen_kv, scale, is_cusal, block_tables, alibi_slopes, window_size_left=-1,
                               window_size_right=-1, kv_cache_dtype="auto", k_scale=1.0, v_scale=1.0, softcap=-1.0):
        # LLM:852-873 -> XPUF:546-622 -> torch.ops.torch_ipex.chunked_prefill (ATT:1725-2013)
        check(k_cache.dtype == query.dtype and v_cache.dtype == query.dtype,
              "The datatype of key should be the same as query", "ATT:1751-1756 (FP8 is up-converted first, XPUF:25-31)")
        check(cu_seqlens_q.dtype == torch.int32 and cu_seqlens_kv.dtype == torch.int32,
              "The datatype of cu_seqlens_q/k should be int32", "ATT:1757-1762")
        check(block_tables.dtype == torch.int32, "The block_table should be int32", "ATT:1763-1764")
        for name, t in (("query", query), ("key", k_cache), ("value", v_cache), ("cu_seqlens_q", cu_seqlens_q),
                        ("cu_seqlens_k", cu_seqlens_kv), ("block_table", block_tables), ("Output tensor", output)):
            check(t.is_contiguous(), f"{name} must be contiguous", "ATT:1775-1780, 1797-1798")
        batch = cu_seqlens_q.numel() - 1  # ATT:1782
        check(block_tables.size(0) == batch, "The first dimension of block_table should be equal to batch_size",
              "ATT:1792-1794")
        check(query.dtype in (torch.float16, torch.bfloat16),
              "XPU scaled_dot_product_efficient_attention only supports half and bfloat16", "SDPU:105-107")
        check(alibi_slopes is None or alibi_slopes.dim() in (1, 2), "only support 1 dim or 2 dim alibi tensor",
              "ATT:1822-1839")
        block_size, hkv, d = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]  # XPUF:594, ATT:1787-1789
        hq = query.shape[1]
        if d % 64 != 0:  # XPUF:580-584: block_table.unique(return_inverse=True) + cache gathers, every call
            HOST_SYNCS.append(f"flash_attn_varlen_func: head_dim {d} % 64 != 0 -> block_table.unique() (XPUF:583)")
        if block_size >= 64:  # ATT:1875-1876 -> fmha_forward_kernel (XeHpc)
            check(block_size in (64, 128), f"unsupported block size {block_size}; assert(false)", "FMHA:92-138")
            check(d <= 512, "head size > 512; assert(false)", "FMHA:107-111")
            if int(max_seqlen_q) == 1 and ARCH != "pvc" and hkv * 8 >= hq:
                check(hq // hkv in (1, 2, 4, 5, 7, 8), "Unsupported kHeadPerKv value", "FMHA:89-91, FMHAK:106-115")
        else:
            check(block_size in (16, 32), "Unsupported block size", "PA1:202-212, PA2:192-201")
            check(d <= 256, "Unsupported head size", "PA1:225-226")
            if query.dtype != torch.float16:
                record("ipex", "flash_attn_varlen_func", silent="bf16 with block < 64")
                return output  # PA1:358-363: `printf("chunked_prefill: Unsupported dtype!")` and no launch
        lens_q = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
        lens_k = (cu_seqlens_kv[1:] - cu_seqlens_kv[:-1]).to(torch.int32)
        check(bool((lens_k >= lens_q).all()), "seqlen_k >= seqlen_q (unsigned seqlen_k - seqlen_q)", "BAK:360-361")
        check(batch == 0 or int(max_seqlen_q) >= int(lens_q.max()) and int(max_seqlen_kv) >= int(lens_k.max()),
              "max_seqlen_q / max_seqlen_kv must bound every sequence", "XPUF:595-597, ATT:1929-1930, PA1:122-123")
        left, right = window_size_left, window_size_right
        if left >= max_seqlen_kv:
            left = -1  # ATT:1800-1803
        if right >= max_seqlen_kv:
            right = -1
        if is_cusal and (left != -1 or right != -1):
            right = 0  # BAK:230-231
        record("ipex", "flash_attn_varlen_func", block=block_size)
        res = reference().flash_attn_with_kvcache(
            query, k_cache, v_cache, block_tables, lens_k, cu_seqlens_q, int(max_seqlen_q), softmax_scale=scale,
            causal=bool(is_cusal), window_size=(left, right),
            softcap=softcap if softcap > 0 else 0.0)  # BAK:450-455: softcap * tanh(score * scale / softcap)
        output.copy_(res)
        return output
