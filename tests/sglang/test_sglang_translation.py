"""The SGLang adapter with SGLang's own objects (ReqToTokenPool, MHATokenToKVPool, RadixAttention,
ForwardBatch), checked against the naive oracle on K/V the test keeps itself."""

from types import SimpleNamespace

import pytest
import torch
from layouts import assert_close_to
from naive import naive_paged_attention
from sgl_objects import forward_batch as _fb

H, HKV, D = 4, 2, 16


def _setup(page_size=1, kv_dtype=torch.float32, chunk=None, encoder_decoder=False):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    req_pool = ReqToTokenPool(size=4, max_context_len=64, device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(
        size=512,
        page_size=page_size,
        dtype=kv_dtype,
        head_num=HKV,
        head_dim=D,
        layer_num=3,
        device="cpu",
        enable_memory_saver=False,
    )
    runner = SimpleNamespace(
        device="cpu",
        page_size=page_size,
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        model_config=SimpleNamespace(is_encoder_decoder=encoder_decoder),
        dtype=torch.float32,
        kv_cache_dtype=kv_dtype,
        server_args=SimpleNamespace(speculative_eagle_topk=None, speculative_num_draft_tokens=None),
        model=None,
        attention_chunk_size=chunk,
        use_mla_backend=False,
    )
    from sglang_compat.backend import XpuAttnSGLangBackend

    return XpuAttnSGLangBackend(runner), req_pool, kv_pool


def _layers():
    from sglang.srt.layers.radix_attention import RadixAttention

    return [
        RadixAttention(H, D, D**-0.5, HKV, layer_id=0),
        RadixAttention(H, D, D**-0.5, HKV, layer_id=1, sliding_window_size=3, logit_cap=5.0),
    ]


@pytest.mark.parametrize("layer_idx", [0, 1])
def test_extend_with_prefix_then_decode_matches_oracle(layer_idx):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend, req_pool, kv_pool = _setup()
    layer = _layers()[layer_idx]
    g = torch.Generator().manual_seed(layer_idx)
    prefix, new = [10, 0], [4, 5]  # request A: radix-cached prefix of 10 + 4 new; request B: 5 new
    total = [p + n for p, n in zip(prefix, new)]
    slots = torch.randperm(400, generator=g)[: sum(total) + 2] + 1  # shuffled, non-contiguous slots
    keys = torch.randn(sum(total) + 2, HKV, D, generator=g)
    vals = torch.randn(sum(total) + 2, HKV, D, generator=g)
    rows, start = [], 0
    for b, t in enumerate(total):
        req_pool.req_to_token[b + 1, : t + 1] = slots[start : start + t + 1].int()
        rows.append(list(range(start, start + t + 1)))
        start += t + 1
    # the cached prefix is already in the pool (written by an earlier step)
    kv_pool.set_kv_buffer(layer, slots[rows[0][:10]].long(), keys[rows[0][:10]], vals[rows[0][:10]])
    new_idx = rows[0][10:14] + rows[1][:5]
    fb = _fb(ForwardMode.EXTEND, [1, 2], total, slots[new_idx].long(), new, prefix)
    backend.init_forward_metadata(fb)
    q = torch.randn(9, H * D, generator=g) * 3
    out = backend.forward_extend(q, keys[new_idx], vals[new_idx], layer, fb)

    # oracle: each request's keys in its own contiguous "cache" (page size 1)
    kc = keys[:, None]
    vc = vals[:, None]
    pt = torch.zeros(2, 15, dtype=torch.int32)
    pt[0, :14] = torch.tensor(rows[0][:14])
    pt[1, :5] = torch.tensor(rows[1][:5])
    window = (3, 0) if layer_idx == 1 else (-1, -1)
    softcap = 5.0 if layer_idx == 1 else 0.0
    want, _ = naive_paged_attention(
        q.view(9, H, D),
        kc,
        vc,
        pt,
        torch.tensor(total),
        torch.tensor([0, 4, 9]),
        scale=D**-0.5,
        window=window,
        softcap=softcap,
    )
    assert_close_to(out.view(9, H, D), want, torch.float32)

    # decode: one more token each (slots already reserved in the token table)
    dec_idx = [rows[0][14], rows[1][5]]
    fb = _fb(ForwardMode.DECODE, [1, 2], [15, 6], slots[dec_idx].long())
    backend.init_forward_metadata(fb)
    qd = torch.randn(2, H * D, generator=g)
    out = backend.forward_decode(qd, keys[dec_idx], vals[dec_idx], layer, fb)
    pt[0, 14] = rows[0][14]
    pt[1, 5] = rows[1][5]
    want, _ = naive_paged_attention(
        qd.view(2, H, D),
        kc,
        vc,
        pt,
        torch.tensor([15, 6]),
        torch.tensor([0, 1, 2]),
        scale=D**-0.5,
        window=window,
        softcap=softcap,
    )
    assert_close_to(out.view(2, H, D), want, torch.float32)


def test_shared_kv_layer_skips_the_write_and_plan_is_hand_computed():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend, req_pool, kv_pool = _setup()
    layer = _layers()[0]
    req_pool.req_to_token[1, :3] = torch.tensor([7, 8, 9], dtype=torch.int32)
    fb = _fb(ForwardMode.DECODE, [1], [3], torch.tensor([9]))
    backend.init_forward_metadata(fb)
    plan = backend.forward_metadata
    assert plan.main.page_table.tolist() == [[7, 8, 9]] and plan.main.cache_seqlens.tolist() == [3]
    assert plan.main.cu_seqlens_q.tolist() == [0, 1] and plan.num_tokens == 1
    before = kv_pool.get_key_buffer(0).clone()
    backend.forward_decode(torch.randn(1, H * D), None, None, layer, fb)  # cross-layer KV sharing
    assert torch.equal(kv_pool.get_key_buffer(0), before)
    with pytest.raises(ValueError, match="both"):
        backend.forward_decode(torch.randn(1, H * D), torch.randn(1, HKV, D), None, layer, fb)


def test_page_size_16_plan_strides_the_token_table():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend, req_pool, _ = _setup(page_size=16)
    req_pool.req_to_token[1, :20] = torch.arange(32, 52, dtype=torch.int32)  # pages 2 and 3
    fb = _fb(ForwardMode.DECODE, [1], [20], torch.tensor([51]))
    backend.init_forward_metadata(fb)
    assert backend.forward_metadata.main.page_table.tolist() == [[2, 3]]


def _prefill_one(backend, req_pool, layer, n, g, q_scale=3.0, **fb_extra):
    """One request of n new tokens in shuffled slots; returns (q, keys, vals, slots, out)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    slots = (torch.randperm(400, generator=g)[:n] + 1).long()
    req_pool.req_to_token[1, :n] = slots.int()
    keys, vals = torch.randn(n, HKV, D, generator=g), torch.randn(n, HKV, D, generator=g)
    fb = _fb(ForwardMode.EXTEND, [1], [n], slots, [n], [0])
    for k_, v_ in fb_extra.items():
        setattr(fb, k_, v_)
    backend.init_forward_metadata(fb)
    q = torch.randn(n, H * D, generator=g) * q_scale
    return q, keys, vals, slots, fb


def _contiguous_oracle(q, keys, vals, n, **kw):
    pt = torch.arange(n, dtype=torch.int32).reshape(1, n)
    return naive_paged_attention(
        q.view(n, H, D), keys[:, None], vals[:, None], pt, torch.tensor([n]), torch.tensor([0, n]), scale=D**-0.5, **kw
    )[0]


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_kv_pool_with_scales(fp8):
    backend, req_pool, kv_pool = _setup(kv_dtype=fp8)
    layer = _layers()[0]
    layer.k_scale, layer.v_scale = torch.tensor(0.5), torch.tensor(0.25)
    g = torch.Generator().manual_seed(5)
    q, keys, vals, slots, fb = _prefill_one(backend, req_pool, layer, 9, g)
    out = backend.forward_extend(q, keys.clone(), vals.clone(), layer, fb)  # the pool divides its inputs in place
    # what the pool stores: value / scale cast to FP8; the kernel must dequantise with the same scales
    kq = (keys / 0.5).to(fp8).float() * 0.5
    vq = (vals / 0.25).to(fp8).float() * 0.25
    assert_close_to(out.view(9, H, D), _contiguous_oracle(q, kq, vq, 9), torch.float32)


def test_sinks_kwarg_reaches_the_kernel():
    backend, req_pool, _ = _setup()
    layer = _layers()[0]
    g = torch.Generator().manual_seed(6)
    q, keys, vals, slots, fb = _prefill_one(backend, req_pool, layer, 7, g)
    sinks = torch.tensor([2.0, -1.0, 0.5, 3.0])
    out = backend.forward_extend(q, keys, vals, layer, fb, sinks=sinks)
    assert_close_to(out.view(7, H, D), _contiguous_oracle(q, keys, vals, 7, sinks=sinks), torch.float32)


def test_local_attention_layer_uses_chunks():
    from sglang.srt.layers.radix_attention import RadixAttention

    backend, req_pool, _ = _setup(chunk=4)
    layer = RadixAttention(H, D, D**-0.5, HKV, layer_id=0, use_irope=True)
    g = torch.Generator().manual_seed(7)
    q, keys, vals, slots, fb = _prefill_one(backend, req_pool, layer, 10, g)
    out = backend.forward_extend(q, keys, vals, layer, fb)
    assert backend.forward_metadata.local is not None
    assert_close_to(out.view(10, H, D), _contiguous_oracle(q, keys, vals, 10, chunk_size=4), torch.float32)


def test_cross_attention_reads_encoder_tokens_non_causal():
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend, req_pool, kv_pool = _setup(encoder_decoder=True)
    layer = RadixAttention(H, D, D**-0.5, HKV, layer_id=2, is_cross_attention=True)
    g = torch.Generator().manual_seed(8)
    enc, dec = 6, 3
    slots = (torch.randperm(400, generator=g)[: enc + dec] + 1).long()
    req_pool.req_to_token[1, : enc + dec] = slots.int()  # encoder tokens first, then the decoder's
    enc_k, enc_v = torch.randn(enc, HKV, D, generator=g), torch.randn(enc, HKV, D, generator=g)
    fb = _fb(ForwardMode.EXTEND, [1], [dec], slots[enc:], [dec], [0])
    fb.encoder_lens = torch.tensor([enc], dtype=torch.int32)
    fb.encoder_lens_cpu = [enc]
    fb.encoder_out_cache_loc = slots[:enc]
    backend.init_forward_metadata(fb)
    q = torch.randn(dec, H * D, generator=g) * 3
    out = backend.forward_extend(q, enc_k, enc_v, layer, fb)  # cross layer writes the encoder's K/V
    pt = torch.arange(enc, dtype=torch.int32).reshape(1, enc)
    want = naive_paged_attention(
        q.view(dec, H, D),
        enc_k[:, None],
        enc_v[:, None],
        pt,
        torch.tensor([enc]),
        torch.tensor([0, dec]),
        scale=D**-0.5,
        causal=False,
    )[0]
    assert_close_to(out.view(dec, H, D), want, torch.float32)


def test_encoder_decoder_with_encoder_ending_mid_page():
    """Page size 4, 6 encoder tokens: the decoder's tokens start mid-page (as Whisper's 1,500 positions at any page
    > 4). The cross layer reads the encoder's 6 keys, the self-attention layer the decoder's own, causally, in an
    extend step and the decode step after it; both against the naive oracle on K/V the test keeps."""
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend, req_pool, _ = _setup(page_size=4, encoder_decoder=True)
    cross = RadixAttention(H, D, D**-0.5, HKV, layer_id=2, is_cross_attention=True)
    self_attn = RadixAttention(H, D, D**-0.5, HKV, layer_id=0)
    g = torch.Generator().manual_seed(9)
    enc, dec = 6, 3
    slots = torch.arange(8, 8 + enc + dec + 1)  # the request's pages 2, 3, 4: its tokens in page order
    req_pool.req_to_token[1, : enc + dec + 1] = slots.int()
    enc_k, enc_v = torch.randn(enc, HKV, D, generator=g), torch.randn(enc, HKV, D, generator=g)
    dec_k, dec_v = torch.randn(dec + 1, HKV, D, generator=g), torch.randn(dec + 1, HKV, D, generator=g)

    def oracle(q, k, v, n_q, causal):
        pt = torch.arange(k.shape[0], dtype=torch.int32).reshape(1, -1)
        return naive_paged_attention(
            q.view(n_q, H, D),
            k[:, None],
            v[:, None],
            pt,
            torch.tensor([k.shape[0]]),
            torch.tensor([0, n_q]),
            scale=D**-0.5,
            causal=causal,
        )[0]

    fb = _fb(ForwardMode.EXTEND, [1], [dec], slots[enc : enc + dec], [dec], [0])
    fb.encoder_lens, fb.encoder_lens_cpu = torch.tensor([enc], dtype=torch.int32), [enc]
    fb.encoder_out_cache_loc = slots[:enc]
    backend.init_forward_metadata(fb)
    q = torch.randn(dec, H * D, generator=g) * 3
    out = backend.forward_extend(q, enc_k, enc_v, cross, fb)
    assert_close_to(out.view(dec, H, D), oracle(q, enc_k, enc_v, dec, causal=False), torch.float32)
    out = backend.forward_extend(q, dec_k[:dec], dec_v[:dec], self_attn, fb)
    assert_close_to(out.view(dec, H, D), oracle(q, dec_k[:dec], dec_v[:dec], dec, causal=True), torch.float32)

    fb = _fb(ForwardMode.DECODE, [1], [dec + 1], slots[enc + dec :], None, None)
    fb.encoder_lens, fb.encoder_lens_cpu = torch.tensor([enc], dtype=torch.int32), [enc]
    backend.init_forward_metadata(fb)
    q = torch.randn(1, H * D, generator=g) * 3
    out = backend.forward_decode(q, None, None, cross, fb)
    assert_close_to(out.view(1, H, D), oracle(q, enc_k, enc_v, 1, causal=False), torch.float32)
    out = backend.forward_decode(q, dec_k[dec:], dec_v[dec:], self_attn, fb)
    assert_close_to(out.view(1, H, D), oracle(q, dec_k, dec_v, 1, causal=True), torch.float32)
