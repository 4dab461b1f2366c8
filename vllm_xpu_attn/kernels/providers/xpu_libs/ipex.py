"""Intel Extension for PyTorch 2.8.10+xpu ``ipex.llm.modules.PagedAttention`` (legacy stacks; IPEX is
no longer developed).

Only IPEX's two entry points that read the core's NHD pages ``[pages, page, Hkv, D]`` are used
(read at release/xpu/2.8.10 09330339; docs/xpu_vendors.md has the table, tests/fakes/
intel_extension_for_pytorch the strict model):
- ``reshape_and_cache_flash`` (CacheOps.cpp:666-688) writes them;
- ``flash_attn_varlen_func`` (-> ``chunked_prefill``, attention.cpp:1725-2013) reads them for
  prefill, chunked prefill and decode (decode as one query per row, as IPEX's own flash-decoding
  test does). Contiguous int32 tables and cu_seqlens (attention.cpp:1757-1780), page size 64 or
  128 on XeHpc GPUs (PVC, BMG: fmha_forward.cpp:92-138; 16/32 run fp16 only and silently skip
  bf16, so they are not declared), head dims multiple of 64 (otherwise ``block_table.unique()``,
  a host sync per call, mha_fusion.py:580-584) up to 512, window and softcap (blocked_attention
  kernel), causal and not.
Not used: ``reshape_and_cache`` (5-D x-interleaved key cache) and ``single_query_cached_kv_attention``
(reads ``[blocks, H, D, block]``, ignores the window, drops softcap at <= 512 keys and syncs on
``head_mapping``). No sinks, LSE or ALiBi (the chunked-prefill ALiBi formula is untested by IPEX);
no FP8 (its write multiplies by the scale and its read multiplies again for e4m3 only).
"""

from __future__ import annotations

from typing import Optional

import torch

from ...api import Feature, KernelRequest, Phase, write_kv_torch
from .common import XpuLibProvider, empty_result, try_import

MODULE = "intel_extension_for_pytorch"
# decode on BMG (not PVC) with Hkv * 8 >= Hq: query heads per KV head in {1,2,4,5,7,8}
# (fmha_forward_kernel.cpp.in:106-115)
GQA_DECODE = (1, 2, 4, 5, 7, 8)


class IpexProvider(XpuLibProvider):
    name = "ipex"
    description = "IPEX PagedAttention.flash_attn_varlen_func over NHD pages (legacy)"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16})
    head_dims = frozenset({64, 128, 192, 256, 320, 384, 448, 512})
    features = frozenset({Feature.WINDOW, Feature.SOFTCAP, Feature.NON_CAUSAL})

    def version(self) -> Optional[str]:
        mod, _ = try_import(MODULE)
        return getattr(mod, "__version__", None) if mod is not None else None

    def unavailable_reason(self) -> Optional[str]:
        mod, why = try_import(MODULE)
        if why:
            return why
        if not mod.has_xpu():  # init_python_bindings.cpp:16-21
            return f"intel_extension_for_pytorch {self.version()} is a CPU build (has_xpu() is False)"
        if not self._xehpc():
            return "IPEX's paged chunked prefill runs on XeHpc GPUs only (PVC, BMG; fmha_forward.cpp:52-53)"
        return None

    def _xehpc(self) -> bool:
        """PVC and BMG are the GPUs with fp64 among those IPEX supports (Arc A-series, MTL/LNL iGPUs have none)."""
        try:
            return bool(torch.xpu.get_device_properties().has_fp64)
        except Exception:
            return False

    def page_size_reason(self, page_size: int, phase: Phase) -> Optional[str]:
        return None if page_size in (64, 128) else f"page size {page_size} not in [64, 128] (fmha_forward.cpp:92-138)"

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        g = req.gqa_group
        if req.num_kv_heads * 8 >= req.num_q_heads and g not in GQA_DECODE:
            return [f"GQA group {g}: IPEX decode on BMG takes {list(GQA_DECODE)} query heads per KV head"]
        return []

    @staticmethod
    def _paged():
        mod, why = try_import(MODULE)
        if why:
            raise RuntimeError(why)
        return mod.llm.modules.PagedAttention

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        if q.shape[0] == 0:  # no query: nothing to launch (vendor kernels are not checked on empty grids)
            return empty_result(q, out, call.return_lse)
        if layer.tensors or call.return_lse:
            raise ValueError("ipex provider: no sinks, ALiBi, LSE or FP8 (the registry should not route here)")
        scale = call.softmax_scale if call.softmax_scale is not None else q.shape[-1] ** -0.5
        dst = (
            out
            if out.is_contiguous()
            else torch.empty(q.shape[0], q.shape[1], v_cache.shape[-1], dtype=q.dtype, device=q.device)
        )
        cu_k = torch.nn.functional.pad(torch.cumsum(step.cache_seqlens, 0, dtype=torch.int32), (1, 0))  # on device
        left, right = int(call.window[0]), int(call.window[1])
        self._paged().flash_attn_varlen_func(
            dst,
            q.contiguous(),
            k_cache,
            v_cache,
            step.cu_seqlens_q,
            cu_k,
            int(step.max_seqlen_q),
            int(step.page_table.shape[1] * k_cache.shape[1]),
            scale,
            call.causal,
            step.page_table,
            None,
            window_size_left=left,
            window_size_right=0 if call.causal and right != -1 else right,
            softcap=float(call.softcap) if call.softcap > 0 else -1.0,
        )
        if dst is not out:  # the vendor op writes a contiguous output only
            out.copy_(dst)
        return out

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        raise NotImplementedError("ipex provider returns no LSE, so it never takes part in a cascade")

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        if k is None or k_cache.dtype != k.dtype or k_cache.stride(0) != v_cache.stride(0):
            return write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        self._paged().reshape_and_cache_flash(k, v, k_cache, v_cache, slot_mapping, kv_cache_dtype="auto")
