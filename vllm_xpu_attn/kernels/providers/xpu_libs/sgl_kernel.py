"""sgl-kernel's FlashAttention-3 API as built for Intel XPU (sgl-kernel-xpu).

Requirements read from sgl-project/sgl-kernel-xpu main 9cf16bf9 (2026-08-21) and its later PRs;
docs/xpu_vendors.md has the table with every source line, tests/fakes/sgl_kernel the strict model.
In short (``cpp`` = src/sycl/flash_attention.cpp):
- q fp16/bf16; FP8 KV (e4m3/e5m2) only with a bf16 query, never with sinks, and with both
  per-tensor descales (cpp:566-568; decode/prefill dispatch .hpp:142/:86);
- paged decode, and the decode launch of chunked prefill, take page sizes 64/128 only (cpp:668-671;
  page size 1 from PR #454: probed); head dims 64/96/128/192/256/512 (cpp:664-667); GQA group,
  rounded up to a power of two, <= 16 (cpp:660-661);
- sinks only at head dim 64 (cpp:550-553) and read as q's dtype (ElementSink = TensorQ::element_type,
  xe_fmha_fwd_epilogue.hpp:81): passed in q's dtype here;
- softcap is stored but not applied up to main 9cf16bf9 (cpp:559; applied from PR #491) and the
  LSE is never written there (cpp:494, 1034, 1326-1327; written from PRs #330/#487, refused with
  sinks or FP8): both are *probed* at start-up against the reference, never assumed;
- page tables are read at ``row * size(1)`` (xe_fmha_fwd_mainloop.hpp:278): made contiguous here;
- ``out=`` is taken (py:135) and written in place.

The same library's MLA decode (``flash_mla_decode``) is a different operator with its own limits: the
``sgl_kernel_mla`` provider (sgl_kernel_mla.py).
"""

from __future__ import annotations

from typing import Optional

import torch

from .... import env
from ...api import FP8_DTYPES, Feature, KernelRequest, Phase, write_kv_torch
from .common import (
    Probes,
    XpuLibProvider,
    compare,
    empty_result,
    fa3_window,
    is_fp8,
    module_version,
    next_pow2,
    per_tensor_scale,
    require,
    tiny_paged_case,
    try_import,
)

PACKAGE = "sgl_kernel"
MODULE = "sgl_kernel.flash_attn"
DECODE_PAGE_SIZES = (64, 128)  # cpp:668-671


class SglKernelProvider(XpuLibProvider):
    name = "sgl_kernel"
    description = "sgl-kernel flash_attn (FA3 API) built for Intel XPU"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16, *FP8_DTYPES})
    head_dims = frozenset({64, 96, 128, 192, 256, 512})
    # softcap, lse and page size 1 are further gated by probes of the installed build (extra_reasons)
    features = frozenset({Feature.WINDOW, Feature.SOFTCAP, Feature.SINKS, Feature.LSE, Feature.NON_CAUSAL})
    probe_device: Optional[str] = None  # where probes run; None = XPU_ATTN_PROBE_DEVICE (tests: the fake's CPU)

    def __init__(self) -> None:
        self.probes = Probes()

    def _module(self):
        return require(MODULE)

    def unavailable_reason(self) -> Optional[str]:
        return try_import(MODULE)[1]

    def version(self) -> Optional[str]:
        return module_version(PACKAGE)

    # ---- capabilities of the installed build ----------------------------------------
    def _device(self) -> torch.device:
        # where a model of the library runs: the device itself, or the CPU for the tests' fakes
        return torch.device(self.probe_device or env.text(env.PROBE_DEVICE))

    def _vs_reference(self, page: int, q_lens, k_lens, lse: bool, **kw) -> Optional[str]:
        from ...api import paged_attention  # the oracle (a function, not a provider) judges the answer

        case = tiny_paged_case(self._device(), page, q_lens, k_lens)
        got = self.probe_call(*case, return_softmax_lse=lse, **kw)
        want = paged_attention(*case, return_softmax_lse=lse, **kw)
        if not lse:
            return compare(got, want, "out")
        return compare(got[0], want[0], "out") or compare(got[1], want[1], "lse", atol=1e-2)

    def softcap_reason(self) -> Optional[str]:
        why = self.probes.why_not("softcap", lambda: self._vs_reference(64, [1], [40], False, causal=True, softcap=2.0))
        return (
            None
            if why is None
            else (
                f"this sgl-kernel build does not apply softcap (probe: {why}; "
                "builds before PR #491 store it without applying it)"
            )
        )

    def lse_reason(self) -> Optional[str]:
        def run():
            for q_lens, k_lens in (([1, 1], [40, 70]), ([5], [40]), ([1, 5], [30, 50])):  # decode, prefill, chunked
                why = self._vs_reference(64, q_lens, k_lens, True, causal=True)
                if why:
                    return f"q_lens {q_lens}: {why}"
            return None

        why = self.probes.why_not("lse", run)
        return (
            None
            if why is None
            else (
                f"this sgl-kernel build does not return a correct LSE (probe: {why}; "
                "builds before PRs #330/#487 never write it)"
            )
        )

    def page_size_1_reason(self) -> Optional[str]:
        why = self.probes.why_not("page1", lambda: self._vs_reference(1, [1, 1], [5, 9], False, causal=True))
        return None if why is None else f"page size 1 is not served by this sgl-kernel build (probe: {why}; PR #454)"

    def capabilities(self) -> dict[str, Optional[str]]:
        """Probe results by feature: None = supported, else why not."""
        return {"softcap": self.softcap_reason(), "lse": self.lse_reason(), "page_size_1": self.page_size_1_reason()}

    def page_size_reason(self, page_size: int, phase: Phase) -> Optional[str]:
        # every phase: decode, and chunked prefill's decode launch (cpp:1320), share the decode limits
        if page_size in DECODE_PAGE_SIZES:
            return None
        if page_size == 1:
            return self.page_size_1_reason()
        return f"page size {page_size}: sgl-kernel-xpu's paged decode takes {list(DECODE_PAGE_SIZES)} only"

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        if req.mla:  # the FA3 kernels have no latent layout: one reason, not every declaration an MLA shape misses
            why = self.unavailable_reason()
            return ([why] if why else []) + [
                "MLA latent attention is not the FA3 API's (sgl_kernel_mla serves its decode)"
            ]
        return super().not_supported_reasons(req)

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        r = []
        if next_pow2(req.gqa_group) > 16:
            r.append(f"GQA group {req.gqa_group} (rounded up to {next_pow2(req.gqa_group)}) > 16")
        fp8 = is_fp8(req.kv_dtype)
        if fp8 and req.dtype != torch.bfloat16:
            r.append("an FP8 KV cache needs a bf16 query")
        if req.has_sinks and req.head_dim != 64:
            r.append(f"sinks only at head dim 64 (got {req.head_dim})")
        if req.has_sinks and fp8:
            r.append("no sinks with an FP8 KV cache")
        if req.softcap:
            why = self.softcap_reason()
            if why:
                r.append(why)
        if req.return_lse:
            if req.has_sinks or fp8:
                r.append("no LSE with sinks or an FP8 KV cache (refused from PR #487; never written before)")
            else:
                why = self.lse_reason()
                if why:
                    r.append(why)
        return r

    # ---- the contract -----------------------------------------------------------------
    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        if call.mla:
            raise ValueError(
                "sgl_kernel flash_attn has no MLA (latent) layout; the sgl_kernel_mla provider runs flash_mla_decode"
            )
        sinks, k_descale, v_descale = layer.sinks, layer.k_descale, layer.v_descale
        if layer.alibi_slopes is not None:
            raise ValueError("sgl_kernel flash_attn has no ALiBi parameter; the registry should not route ALiBi here")
        kd = vd = None
        if is_fp8(k_cache.dtype):
            kd = per_tensor_scale("k_descale", k_descale, q.device)
            vd = per_tensor_scale("v_descale", v_descale, q.device)
        if q.shape[0] == 0:  # no query: nothing to launch (vendor kernels are not checked on empty grids)
            return empty_result(q, out, call.return_lse)
        res = self._module().flash_attn_with_kvcache(
            q=q,
            k_cache=k_cache,
            v_cache=v_cache,
            cache_seqlens=step.cache_seqlens,
            page_table=step.page_table,
            cu_seqlens_q=step.cu_seqlens_q,
            max_seqlen_q=int(step.max_seqlen_q),
            softmax_scale=call.softmax_scale,
            causal=call.causal,
            window_size=fa3_window(call.window, call.causal),
            softcap=float(call.softcap),
            sinks=sinks.to(q.dtype) if sinks is not None else None,
            k_descale=kd,
            v_descale=vd,
            return_softmax_lse=call.return_lse,
            out=out,
        )
        o = res[0] if call.return_lse else res  # main 9cf16bf9 returns (out, lse, *rest), PR #330 (out, lse)
        if o.data_ptr() != out.data_ptr():  # a build that ignores out= (one place)
            out.copy_(o)
        return (out, res[1]) if call.return_lse else out

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
        # non-paged path (mha_fwd_nopage): no sinks (nopage kernels), no LSE (never written), no out= (py:301-324)
        if sinks is not None or alibi_slopes is not None:
            raise ValueError("sgl_kernel flash_attn_varlen_func takes neither sinks nor ALiBi")
        if return_softmax_lse:
            raise ValueError("sgl_kernel flash_attn_varlen_func never writes the LSE (flash_attention.cpp:161, 764)")
        if softcap > 0 and self.softcap_reason():
            raise ValueError(self.softcap_reason())
        o = self._module().flash_attn_varlen_func(
            q,
            k,
            v,
            cu_seqlens_q.to(torch.int32).contiguous(),
            cu_seqlens_k.to(torch.int32).contiguous(),
            int(max_seqlen_q),
            int(max_seqlen_k),
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=fa3_window(window_size, causal),
            softcap=float(softcap),
        )
        if out is not None:
            out.copy_(o)
            o = out
        return o

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        # sgl_kernel.merge_state_v2 takes contiguous lse [T, H] (merge_states.cpp:92-93, 340-345); ours are [H, T]
        o, lse = require(PACKAGE).merge_state_v2(
            o_a.contiguous(), lse_a.T.contiguous(), o_b.contiguous(), lse_b.T.contiguous()
        )
        lse = lse.T
        if sinks is not None:  # merge_state_v2 has no sink: the sink's share of the denominator, here
            with_sink = torch.logaddexp(lse, sinks.float()[:, None].expand_as(lse))
            o = (o.float() * torch.exp(lse - with_sink).nan_to_num(0.0).T[..., None]).to(o.dtype)
            lse = with_sink
        return o, lse

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        # sgl-kernel has no cache-write op: SGLang's pools write with torch indexing; so do we
        write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
