"""Fake ipex.llm.modules.PagedAttention: IPEX's signatures; caches [blocks, kv_heads, block_size, head]."""
import torch

from _common import record


def _nhd(cache):
    return cache.permute(0, 2, 1, 3)


class PagedAttention:
    @classmethod
    def reshape_and_cache(cls, key, value, key_cache, value_cache, slot_mapping):
        assert key_cache.dim() == 4 and key_cache.shape[1] == key.shape[1], "cache must be [blocks, heads, block, dim]"
        record("ipex", "reshape_and_cache")
        from vllm_xpu_attn.kernels import get_provider

        get_provider("reference").write_kv(key, value, _nhd(key_cache), _nhd(value_cache), slot_mapping)

    @classmethod
    def single_query_cached_kv_attention(cls, output, query, key_cache, value_cache, head_mapping, scale, block_tables,
                                         context_lens, block_size, max_context_len, alibi_slopes):
        assert head_mapping.dtype == torch.int32 and head_mapping.shape == (query.shape[1],)
        assert key_cache.shape[2] == block_size, "cache must be [blocks, heads, block, dim]"
        assert block_tables.dtype == torch.int32 and context_lens.dtype == torch.int32
        assert query.dtype in (torch.float16, torch.bfloat16)
        record("ipex", "single_query")
        from vllm_xpu_attn.kernels import get_provider

        n = query.shape[0]
        cu = torch.arange(n + 1, dtype=torch.int32)
        output.copy_(get_provider("reference").flash_attn_with_kvcache(
            query, _nhd(key_cache), _nhd(value_cache), block_tables, context_lens, cu, 1, softmax_scale=scale,
            alibi_slopes=alibi_slopes))

    @classmethod
    def flash_attn_varlen_func(cls, output, query, k_cache, v_cache, cu_seq_lens_q, cu_seq_lens_kv, max_seq_len_q,
                               max_seq_len_kv, scale, is_causal, block_table, alibi_slopes=None):
        assert block_table.dtype == torch.int32 and cu_seq_lens_q.dtype == torch.int32
        assert query.dtype in (torch.float16, torch.bfloat16)
        record("ipex", "varlen")
        from vllm_xpu_attn.kernels import get_provider

        lens = (cu_seq_lens_kv[1:] - cu_seq_lens_kv[:-1]).to(torch.int32)
        output.copy_(get_provider("reference").flash_attn_with_kvcache(
            query, _nhd(k_cache), _nhd(v_cache), block_table, lens, cu_seq_lens_q, max_seq_len_q, softmax_scale=scale,
            causal=is_causal, alibi_slopes=alibi_slopes))
