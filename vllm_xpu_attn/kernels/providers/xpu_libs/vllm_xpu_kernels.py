"""vllm-xpu-kernels' ``flash_attn_varlen_func`` with ``block_table`` (the XPU flash path of vLLM).

Requirements read from the 0.1.16.2 wheel (``W:L`` = vllm_xpu_kernels/flash_attn_interface.py) and
its binaries; docs/xpu_vendors.md has the table, tests/fakes/vllm_xpu_kernels the strict model:
- q fp16/bf16 (no fp32); FP8 KV needs both descales (W:517-521), each a float32 value owning its
  one-element storage (W:158-159: a view into a larger scales tensor fails);
- block tables are read at ``row * size(1)`` and never made contiguous (W:507): made contiguous here;
- softcap and ALiBi are accepted but no kernel reads them (flash_api.cpp: never forwarded): refused;
- sinks (``s_aux``) are read as q's dtype with no check: passed in q's dtype;
- the LSE is refused with a window or sinks (BIN xe_2), and with any paged call on xe3: refused;
- only the kernel tuples compiled into the wheel run on the device; any other configuration drops
  into ``_fallback_varlen_attn``, a PyTorch reference with ``.cpu().tolist()`` host syncs and only a
  warning (W:620-653). The compiled set of the versions known here is declared below, the rest is
  refused at start-up, and the fallback is replaced by an error, so nothing falls back silently.
"""

from __future__ import annotations

from typing import Optional

import torch

from .... import env
from ...api import FP8_DTYPES, Feature, KernelRequest, Phase, write_kv_torch
from .common import (
    XpuLibProvider,
    dist_version,
    empty_result,
    fa3_window,
    is_fp8,
    own_storage,
    per_tensor_scale,
    try_import,
)

MODULE = "vllm_xpu_kernels.flash_attn_interface"
DIST = "vllm-xpu-kernels"
ENV_TRUST = env.TRUST_VLLM_XPU_KERNELS  # =1: take an unknown version's kernel set to be 0.1.16.2's

# Compiled xe2 kernel tuples of the 0.1.16.2 wheel (from its generated kernel file names; the xe3 set
# is a subset for what is declared here). Decode: (qgroup, head bucket, page tile, local, sink) with
# causal false (decode always runs non-causal, flash_api.cpp:320). Chunk prefill (paged):
# (head bucket, causal, local, sink) with lse false.
_DECODE_0_1_16_2 = {
    (8, 64, 16, False, False),
    (8, 64, 64, False, False),
    (8, 64, 64, False, True),
    (8, 64, 64, True, False),
    (8, 64, 64, True, True),
    (8, 96, 16, True, False),
    (8, 96, 64, False, False),
    (8, 96, 64, True, False),
    (8, 128, 16, False, False),
    (8, 128, 16, True, False),
    (8, 128, 32, False, False),
    (8, 128, 64, False, False),
    (8, 128, 64, False, True),
    (8, 128, 64, True, False),
    (8, 192, 64, False, False),
    (8, 256, 32, True, False),
    (8, 256, 64, False, False),
    (8, 256, 64, True, False),
    (8, 512, 32, False, False),
    (8, 512, 64, False, False),
    (16, 64, 16, False, False),
    (16, 64, 32, False, False),
    (16, 64, 64, False, False),
    (16, 128, 16, False, False),
    (16, 128, 16, True, False),
    (16, 128, 64, False, False),
    (16, 128, 64, True, False),
    (16, 256, 64, False, False),
}
_CHUNK_PAGED_0_1_16_2 = {
    (64, False, False, False),
    (64, False, True, False),
    (64, False, False, True),
    (64, False, True, True),
    (64, True, False, False),
    (64, True, True, False),
    (64, True, False, True),
    (64, True, True, True),
    (96, False, True, False),
    (96, True, False, False),
    (128, False, False, False),
    (128, False, True, False),
    (128, False, False, True),
    (128, False, True, True),
    (128, True, False, False),
    (128, True, True, False),
    (128, True, False, True),
    (128, True, True, True),
    (192, True, False, False),
    (256, False, True, False),
    (256, True, False, False),
    (512, True, False, False),
}
# Non-paged chunk prefill (encoder self-attention): (head bucket, causal, local, sink), lse false
_CHUNK_VARLEN_0_1_16_2 = {
    (64, False, False, False),
    (64, True, False, False),
    (96, False, False, False),
    (128, False, False, False),
    (128, True, False, False),
    (192, True, False, False),
    (256, False, False, False),
    (256, True, False, False),
}
KNOWN_BUILDS = {"0.1.16.2": (_DECODE_0_1_16_2, _CHUNK_PAGED_0_1_16_2, _CHUNK_VARLEN_0_1_16_2)}
HEAD_BUCKETS = (64, 96, 128, 192, 256, 512)  # exact sizes only: other sizes' bucketing is not verifiable


def _tile(block_size: int) -> int:
    return 64 if block_size % 64 == 0 else 32 if block_size == 32 else 16  # W:169-179


def _refuse_fallback(*args, **kwargs):
    raise RuntimeError(
        "vllm-xpu-kernels has no compiled kernel for this configuration and would fall back to its PyTorch "
        "reference (host syncs, no graph capture); vllm-xpu-attn refuses that. The configuration should have been "
        "refused at start-up: please report it."
    )


class VllmXpuKernelsProvider(XpuLibProvider):
    name = "vllm_xpu_kernels"
    description = "vllm-xpu-kernels flash_attn_varlen_func with block_table"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16, *FP8_DTYPES})
    head_dims = frozenset(HEAD_BUCKETS)
    features = frozenset(
        {Feature.WINDOW, Feature.SINKS, Feature.NON_CAUSAL}
    )  # no softcap/ALiBi (never applied), no LSE

    def version(self) -> Optional[str]:
        return dist_version(DIST)

    def kernel_set(self):
        """(decode, paged chunk, non-paged chunk) tuples of the installed version, or None when unknown."""
        v = self.version()
        if v in KNOWN_BUILDS:
            return KNOWN_BUILDS[v]
        if env.on(env.TRUST_VLLM_XPU_KERNELS):
            return KNOWN_BUILDS["0.1.16.2"]
        return None

    def unavailable_reason(self) -> Optional[str]:
        mod, why = try_import(MODULE)
        if why:
            return why
        if self.kernel_set() is None:
            return (
                f"vllm-xpu-kernels {self.version()}: its compiled kernel set is known for "
                f"{sorted(KNOWN_BUILDS)} only (anything else falls back to a host-syncing PyTorch path); "
                f"set {ENV_TRUST}=1 to assume 0.1.16.2's set"
            )
        if getattr(mod, "_fallback_varlen_attn", None) is not _refuse_fallback:
            mod._fallback_varlen_attn = _refuse_fallback  # never fall back silently (W:640 calls it by name)
        return None

    def page_size_reason(self, page_size: int, phase: Phase) -> Optional[str]:
        return None if page_size % 16 == 0 else f"block size {page_size} is not a multiple of 16"

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        kernels = self.kernel_set()
        if kernels is None or req.head_dim not in HEAD_BUCKETS or req.page_size % 16:
            return []  # already refused for that reason
        decode, chunk, varlen = kernels
        local = req.has_window
        ratio = req.gqa_group
        r = []
        d_key = (8 if ratio <= 8 else 16, req.head_dim, _tile(req.page_size), local, req.has_sinks)
        # a mixed (or uniform spec-decode) batch runs its one-token rows through the decode kernel, so
        # every phase needs the decode tuple; rows with more queries need the chunk-prefill tuple
        if d_key not in decode:
            r.append(
                f"paged decode kernel (qgroup {d_key[0]}, head {req.head_dim}, tile {d_key[2]}, "
                f"local={local}, sink={req.has_sinks}) is not compiled into vllm-xpu-kernels {self.version()}"
            )
        if req.phase != Phase.DECODE:
            causal = req.causal and not local  # causal + window runs as local non-causal (fmha_xe2.cpp:117-124)
            if (req.head_dim, causal, local, req.has_sinks) not in chunk:
                r.append(
                    f"chunk-prefill kernel (head {req.head_dim}, causal={causal}, local={local}, "
                    f"sink={req.has_sinks}) is not compiled into vllm-xpu-kernels {self.version()}"
                )
            if not req.causal and (req.head_dim, False, local, req.has_sinks) not in varlen:
                # bidirectional layers may also run unpaged (encoder self-attention, flash_attn_varlen_func)
                r.append(
                    f"non-paged chunk-prefill kernel (head {req.head_dim}, causal=False, local={local}, "
                    f"sink={req.has_sinks}) is not compiled into vllm-xpu-kernels {self.version()}"
                )
        return r

    def _module(self):
        mod, why = try_import(MODULE)
        if why:
            raise RuntimeError(why)
        self.unavailable_reason()  # installs the fallback refusal
        return mod

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        if layer.alibi_slopes is not None or call.softcap > 0 or call.return_lse:
            raise ValueError("vllm_xpu_kernels provider: no ALiBi, softcap or LSE (the registry should not route here)")
        kd = vd = None
        if is_fp8(k_cache.dtype):
            kd = own_storage(per_tensor_scale("k_descale", layer.k_descale, q.device))
            vd = own_storage(per_tensor_scale("v_descale", layer.v_descale, q.device))
        if q.shape[0] == 0:  # no query: nothing to launch (vendor kernels are not checked on empty grids)
            return empty_result(q, out, call.return_lse)
        max_k = int(step.page_table.shape[1] * k_cache.shape[1])  # an upper bound; a host value, no sync
        sinks = layer.sinks
        res = self._module().flash_attn_varlen_func(
            q,
            k_cache,
            v_cache,
            int(step.max_seqlen_q),
            step.cu_seqlens_q,
            max_k,
            seqused_k=step.cache_seqlens,
            softmax_scale=call.softmax_scale,
            causal=call.causal,
            window_size=list(fa3_window(call.window, call.causal)),
            block_table=step.page_table,
            out=out,
            k_descale=kd,
            v_descale=vd,
            s_aux=sinks.to(q.dtype) if sinks is not None else None,
        )
        if res is not None and res.data_ptr() != out.data_ptr():  # a build that ignores out= (one place)
            out.copy_(res)
        return out

    def flash_attn_varlen_func(
        self,
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        sinks=None,
        alibi_slopes=None,
        return_softmax_lse=False,
        out=None,
    ):
        if alibi_slopes is not None or softcap > 0 or return_softmax_lse:
            raise ValueError("vllm_xpu_kernels provider: no ALiBi, softcap or LSE")
        res = self._module().flash_attn_varlen_func(
            q,
            k,
            v,
            int(max_seqlen_q),
            cu_seqlens_q.to(torch.int32).contiguous(),
            int(max_seqlen_k),
            cu_seqlens_k=cu_seqlens_k.to(torch.int32).contiguous(),
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=list(fa3_window(window_size, causal)),
            out=out,
            s_aux=sinks.to(q.dtype) if sinks is not None else None,
        )
        if out is None:
            return res
        if res is not None and res.data_ptr() != out.data_ptr():  # a build that ignores out= (one place)
            out.copy_(res)
        return out

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        raise NotImplementedError("vllm_xpu_kernels provider returns no LSE, so it never takes part in a cascade")

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        # reshape_and_cache_flash (torch.ops._C_cache_ops) for model-dtype caches; FP8 caches through
        # torch: how that op scales FP8 could not be read in its source, so it is not trusted with it
        op = getattr(getattr(torch.ops, "_C_cache_ops", None), "reshape_and_cache_flash", None)
        if op is None or is_fp8(k_cache.dtype) or k is None or k_cache.stride(0) != v_cache.stride(0):
            return write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        one = torch.ones(1, dtype=torch.float32, device=k.device)
        op(k, v, k_cache, v_cache, slot_mapping.long(), "auto", one, one)
