"""The ``triton`` provider: device-neutral Triton kernels behind the common contract.

Runs on CUDA and Intel XPU (Intel's Triton backend); on the CPU only through Triton's
interpreter (TRITON_INTERPRET=1), which is how CI checks it.
"""

from __future__ import annotations

import math
import os
from typing import Optional, Sequence

import torch

from ..base import KernelProvider, KernelRequest, batch_invariant_requested
from ..contract import (FLOAT_DTYPES, FP8_DTYPES, check_paged_call, check_per_head, check_window, check_write_kv,
                        is_fp8)

# Tile sizes per device family and phase: (BLOCK_M, BLOCK_N, num_warps, num_stages).
# Measured on an H200 (docs/benchmarks.md); Intel entries are conservative starting points
# (smaller tiles: less register file / SLM on Xe), not measured here.
TUNING: dict[str, dict[str, tuple[int, int, int, int]]] = {
    "cuda_sm90": {"prefill": (64, 64, 4, 3), "decode": (16, 128, 4, 3)},  # benchmarks/tune.py, H200
    "cuda": {"prefill": (64, 64, 4, 2), "decode": (16, 64, 4, 2)},
    "xpu": {"prefill": (64, 32, 8, 2), "decode": (16, 32, 4, 2)},
    "cpu": {"prefill": (16, 16, 1, 1), "decode": (16, 16, 1, 1)},  # interpreter: small tiles, fast tests
}


def device_family(device: torch.device) -> str:
    if device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return "cuda_sm90" if major >= 9 else "cuda"
    return device.type if device.type in TUNING else "cuda"


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _pow2(n: int, lo: int = 16) -> int:
    return max(lo, 1 << (max(n, 1) - 1).bit_length())


class TritonProvider(KernelProvider):
    name = "triton"
    description = "portable Triton kernels (CUDA, Intel XPU); split-K decode"
    devices = frozenset({"cuda", "xpu", "cpu"})
    dtypes = frozenset(FLOAT_DTYPES)
    kv_dtypes = frozenset(FLOAT_DTYPES + FP8_DTYPES)
    max_head_dim = 256
    features = frozenset({"window", "softcap", "sinks", "alibi", "lse", "non_causal", "dv", "batch_invariant"})

    def unavailable_reason(self) -> Optional[str]:
        try:
            import triton  # noqa: F401
        except ImportError:
            return "triton is not installed (pip install 'vllm-xpu-attn[triton]')"
        return None

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        if req.device_type == "cpu" and not _interpreting():
            return ["on the CPU Triton runs only through its interpreter (TRITON_INTERPRET=1; tests only)"]
        return []

    # ---- paged attention ----------------------------------------------------------
    def flash_attn_with_kvcache(
        self, q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q,
        softmax_scale=None, causal=True, window_size: Sequence[int] = (-1, -1), softcap=0.0, sinks=None,
        alibi_slopes=None, k_descale=None, v_descale=None, return_softmax_lse=False, out=None,
        num_splits: Optional[int] = None, batch_invariant: Optional[bool] = None,
    ):
        """The contract call. ``batch_invariant`` (default: $VLLM_XPU_ATTN_BATCH_INVARIANT): one tile
        shape for every row (prefill and decode alike) and no split-K, so each row's key blocks start at
        the same absolute positions and are reduced in one fixed order whatever else is in the batch."""
        check_paged_call(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, causal=causal,
                         window_size=window_size, softcap=softcap, sinks=sinks, alibi_slopes=alibi_slopes,
                         k_descale=k_descale, v_descale=v_descale, out=out, check_values=False)
        from .kernels import _merge_splits, _paged_attn_kernel

        total_q, hq, d = q.shape
        _, page, hkv, _ = k_cache.shape
        dv = v_cache.shape[-1]
        group = hq // hkv
        batch = page_table.shape[0]
        if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
            raise ValueError("triton provider: q, k_cache and v_cache need a contiguous last (head_dim) dimension")
        if out is None:
            out = torch.empty(total_q, hq, dv, dtype=q.dtype, device=q.device)
        lse = torch.empty(hq, total_q, dtype=torch.float32, device=q.device) if return_softmax_lse else None
        if total_q == 0 or batch == 0:
            return (out, lse) if return_softmax_lse else out
        left, right = check_window(window_size, causal)
        invariant = batch_invariant_requested() if batch_invariant is None else batch_invariant
        phase = "decode" if max_seqlen_q <= 1 and not invariant else "prefill"
        block_m, block_n, warps, stages = TUNING[device_family(q.device)][phase]
        block_m = max(block_m, _pow2(group)) if phase == "decode" else block_m
        if invariant:
            if num_splits not in (None, 1):
                raise ValueError(f"batch-invariant mode runs without split-K; got num_splits={num_splits}")
            num_splits = 1
        elif num_splits is None:
            num_splits = self._num_splits(q.device, batch, hkv, max_seqlen_q, page_table.shape[1] * page)
        # aligned tiles (batch-invariant mode) may start up to block_m - 1 rows before the first query
        tiles = triton_cdiv(max(int(max_seqlen_q), 1) * group + (block_m - 1 if invariant else 0), block_m)
        bd, bdv = _pow2(d), _pow2(dv)
        per_head = k_descale is not None and k_descale.numel() != 1
        scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)
        dummy = q  # any tensor for absent optional pointers
        if num_splits > 1:
            o_part = torch.empty(num_splits * total_q * hq * bdv, dtype=torch.float32, device=q.device)
            l_part = torch.empty(num_splits * total_q * hq, dtype=torch.float32, device=q.device)
        else:
            o_part = l_part = dummy
        grid = (batch, tiles, hkv * num_splits)
        _paged_attn_kernel[grid](
            q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q,
            sinks if sinks is not None else dummy, alibi_slopes if alibi_slopes is not None else dummy,
            k_descale if k_descale is not None else dummy, v_descale if v_descale is not None else dummy,
            out, lse if lse is not None else dummy, o_part, l_part,
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
            out.stride(0), out.stride(1),
            page_table.stride(0),
            k_descale.stride(0) if per_head else 0,
            total_q, hq,
            float(scale), float(softcap),
            WIN_LEFT=left, WIN_RIGHT=right, PAGE=page, GROUP=group, D=d, DV=dv, BLOCK_D=bd, BLOCK_DV=bdv,
            BLOCK_M=block_m, BLOCK_N=block_n, NUM_SPLITS=num_splits, CAUSAL=causal,
            HAS_SOFTCAP=softcap > 0, HAS_SINKS=sinks is not None, HAS_ALIBI=alibi_slopes is not None,
            HAS_DESCALE=k_descale is not None, DESCALE_PER_HEAD=per_head,
            WRITE_LSE=return_softmax_lse,
            # the CPU interpreter mis-evaluates bf16 dots (numpy has no bf16): upcast there only
            FP32_DOT=q.dtype == torch.float32 or (_interpreting() and q.dtype == torch.bfloat16),
            ALIGN_ROWS=invariant,
            num_warps=warps, num_stages=stages,
        )
        if num_splits > 1:
            _merge_splits[(total_q, hq)](
                o_part, l_part, out, lse if lse is not None else dummy, sinks if sinks is not None else dummy,
                out.stride(0), out.stride(1), total_q, hq,
                DV=dv, BLOCK_DV=bdv, NUM_SPLITS=num_splits, HAS_SINKS=sinks is not None,
                WRITE_LSE=return_softmax_lse, num_warps=4,
            )
        return (out, lse) if return_softmax_lse else out

    @staticmethod
    def _num_splits(device: torch.device, batch: int, hkv: int, max_seqlen_q: int, max_keys: int) -> int:
        """Flash-decoding: split long contexts when batch x heads cannot fill the device. Host-only math."""
        if max_seqlen_q > 1 or max_keys < 1024:
            return 1
        if device.type == "cuda":
            sms = torch.cuda.get_device_properties(device).multi_processor_count
        elif device.type == "xpu":
            sms = getattr(torch.xpu.get_device_properties(device), "gpu_subslice_count", 64)
        else:
            return 2 if max_keys >= 2048 else 1
        splits = 1
        while batch * hkv * splits < 2 * sms and splits < 32 and max_keys // (splits * 2) >= 512:
            splits *= 2
        return splits

    # ---- the rest of the contract ---------------------------------------------------
    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
                               alibi_slopes=None, return_softmax_lse=False, out=None):
        """Contiguous K/V: viewed as a page-size-1 cache with a device-built table (no host sync)."""
        if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
            raise ValueError(f"q/k/v must be 3-D [tokens, heads, dim], got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}")
        check_per_head("sinks", sinks, q.shape[1], q.device)
        batch = cu_seqlens_k.shape[0] - 1
        lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)
        cols = torch.arange(max(int(max_seqlen_k), 1), device=q.device, dtype=torch.int32)
        table = (cu_seqlens_k[:-1, None].to(torch.int32) + cols[None, :]).clamp(max=max(k.shape[0] - 1, 0))
        kc = k.unsqueeze(1)
        vc = v.unsqueeze(1)
        if batch == 0 or k.shape[0] == 0:
            kc = torch.zeros(1, 1, *k.shape[1:], dtype=k.dtype, device=k.device)
            vc = torch.zeros(1, 1, *v.shape[1:], dtype=v.dtype, device=v.device)
            table = torch.zeros(batch, 1, dtype=torch.int32, device=q.device)
        return self.flash_attn_with_kvcache(q, kc, vc, table, lens, cu_seqlens_q.to(torch.int32), max_seqlen_q,
                                            softmax_scale, causal, window_size, softcap, sinks, alibi_slopes,
                                            return_softmax_lse=return_softmax_lse, out=out)

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        from .kernels import _merge_state_kernel

        if o_a.shape != o_b.shape or lse_a.shape != lse_b.shape or lse_a.shape != (o_a.shape[1], o_a.shape[0]):
            raise ValueError(f"merge_state: o {list(o_a.shape)}/{list(o_b.shape)}, lse {list(lse_a.shape)}/{list(lse_b.shape)} "
                             "must be o [T, H, D] and lse [H, T]")
        t, h, d = o_a.shape
        o_a, o_b = o_a.contiguous(), o_b.contiguous()
        o = torch.empty_like(o_a)
        lse = torch.empty(h, t, dtype=torch.float32, device=o_a.device)
        if t:
            _merge_state_kernel[(t, h)](o_a, lse_a.float().contiguous(), o_b, lse_b.float().contiguous(),
                                        sinks if sinks is not None else lse, o, lse, o.stride(0), o.stride(1), t,
                                        D=d, BLOCK_D=_pow2(d), HAS_SINKS=sinks is not None)
        return o, lse

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        from .kernels import _write_kv_kernel

        for name, x, cache, scale in (("k", k, k_cache, k_scale), ("v", v, v_cache, v_scale)):
            if x is None:
                continue
            check_write_kv(name, x, cache, slot_mapping)
            quant = is_fp8(cache.dtype)
            if x.stride(-1) != 1 or cache.stride(-1) != 1:
                raise ValueError("write_kv: the head_dim dimension must be contiguous")
            if scale is None or not isinstance(scale, torch.Tensor):
                scale = torch.tensor([1.0 if scale is None else float(scale)], dtype=torch.float32, device=x.device)
            if x.shape[0] == 0:
                continue
            _write_kv_kernel[(x.shape[0], x.shape[1])](
                x, cache, slot_mapping, scale.float().reshape(-1), x.stride(0), x.stride(1),
                cache.stride(0), cache.stride(1), cache.stride(2), H=x.shape[1], D=x.shape[2], PAGE=cache.shape[1],
                BLOCK_D=_pow2(x.shape[2], 1), QUANT=quant, FMAX=float(torch.finfo(cache.dtype).max) if quant else 0.0)


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
