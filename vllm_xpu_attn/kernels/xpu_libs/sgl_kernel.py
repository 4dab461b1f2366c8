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

MLA decode (absorbed DeepSeek MLA) runs ``sgl_kernel.flash_mla_decode`` (``att`` =
python/sgl_kernel/attention.py, ``mla`` = src/sycl/mla_decode.cpp, 9cf16bf9): kv_lora_rank 512 + rope 64
hard-coded (att:77-81), H <= 128 (att:83-84), one query row per page-table row (att:97-99), table width
a multiple of 128/page (att:101: padded here on the device), fp16/bf16 with q, q_pe and cache of one
dtype (att:103-107: no FP8 latent), int32 lengths/table (att:108-113), every tensor contiguous
(mla:145-151), pages 16/32/64/128 (mla:162-166), no out= (att:115-119: copied into the engine's
buffer), no LSE. The ops exist only in a USE_MLA build (src/torch_extension_sycl.cc:361-390): the
Python wrappers are there in every build, so the ops themselves are looked up.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from ..base import Feature, KernelRequest, PagedLaunch, Phase
from ..contract import FP8_DTYPES, NO_LAYER_ARGS, AttnPlan
from ..torch_ops import write_kv_torch
from .common import (XpuLibProvider, empty_result, Probes, compare, fa3_window, int32_contiguous, is_fp8, next_pow2,
                     per_tensor_scale, tiny_paged_case, try_import)

MODULE = "sgl_kernel.flash_attn"
DECODE_PAGE_SIZES = (64, 128)  # cpp:668-671

# MLA decode (attention.py / mla_decode.cpp @9cf16bf9)
MLA_FUNCS = ("flash_mla_decode", "flash_mla_get_workspace_size")  # __init__.py:16-22
MLA_LATENT, MLA_ROPE = 512, 64  # att:77-81
MLA_MAX_HEADS = 128  # att:83-84
MLA_PAGE_SIZES = (16, 32, 64, 128)  # mla_decode.cpp:162-166
MLA_TILE = 128  # att:101: page-table width % (128 / page_size) == 0
MLA_DTYPES = (torch.float16, torch.bfloat16)  # att:103-107


class SglMlaLaunch(PagedLaunch):
    """One step's MLA decode launch: the padded int32 table, int32 lengths and the workspace, fixed once."""

    __slots__ = ("workspace", "num_kv_splits")

    def __init__(self, provider, step: AttnPlan, call, workspace: Optional[torch.Tensor], num_kv_splits: int):
        super().__init__(provider, step, call)
        self.workspace = workspace
        self.num_kv_splits = num_kv_splits

    def run(self, q, k_cache, v_cache, out, *, layer=NO_LAYER_ARGS):
        self.check(q, k_cache, v_cache, out, layer)
        return self.provider._run_mla(self, q, k_cache, v_cache, out, layer)


class SglKernelProvider(XpuLibProvider):
    name = "sgl_kernel"
    description = "sgl-kernel flash_attn (FA3 API) and MLA decode (flash_mla_decode) built for Intel XPU"
    devices = frozenset({"xpu"})
    dtypes = frozenset({torch.float16, torch.bfloat16})
    kv_dtypes = frozenset({torch.float16, torch.bfloat16, *FP8_DTYPES})
    head_dims = frozenset({64, 96, 128, 192, 256, 512})
    # softcap, lse and page size 1 are further gated by probes of the installed build (extra_reasons)
    features = frozenset({Feature.WINDOW, Feature.SOFTCAP, Feature.SINKS, Feature.LSE, Feature.NON_CAUSAL})
    probe_device: Optional[str] = None  # where probes run; None = "xpu" (tests point it at the fake's CPU)
    # MLA decode split-KV count: -1 = the vendor's own choice (mla_decode.cpp:168-172, set_split_kv tuned on
    # BMG), 1 = no split (what SGLang's XPU backend passes); the workspace is sized for it either way
    mla_num_kv_splits: int = -1

    def __init__(self) -> None:
        self.probes = Probes()
        self._mla_why: Optional[tuple[str]] = None  # cached (reason,) of the MLA op lookup
        self._mla_ws: dict[torch.device, torch.Tensor] = {}  # uint8 workspaces, grown, reused across steps
        self._mla_retired: list[torch.Tensor] = []  # replaced workspaces kept alive (a graph may address them)

    def _module(self):
        mod, why = try_import(MODULE)
        if why:
            raise RuntimeError(why)
        return mod

    def unavailable_reason(self) -> Optional[str]:
        return try_import(MODULE)[1]

    def version(self) -> Optional[str]:
        mod, _ = try_import("sgl_kernel")
        return getattr(mod, "__version__", None) if mod is not None else None

    # ---- capabilities of the installed build ----------------------------------------
    def _device(self) -> torch.device:
        # VLLM_XPU_ATTN_PROBE_DEVICE: where a model of the library runs (the tests' fakes run on the CPU)
        return torch.device(self.probe_device or os.environ.get("VLLM_XPU_ATTN_PROBE_DEVICE") or "xpu")

    def _vs_reference(self, page: int, q_lens, k_lens, lse: bool, **kw) -> Optional[str]:
        from ..reference import paged_attention  # the oracle (a function, not a provider) judges the answer

        case = tiny_paged_case(self._device(), page, q_lens, k_lens)
        got = self.probe_call(*case, return_softmax_lse=lse, **kw)
        want = paged_attention(*case, return_softmax_lse=lse, **kw)
        if not lse:
            return compare(got, want, "out")
        return compare(got[0], want[0], "out") or compare(got[1], want[1], "lse", atol=1e-2)

    def softcap_reason(self) -> Optional[str]:
        why = self.probes.why_not("softcap", lambda: self._vs_reference(64, [1], [40], False, causal=True, softcap=2.0))
        return None if why is None else (f"this sgl-kernel build does not apply softcap (probe: {why}; "
                                         "builds before PR #491 store it without applying it)")

    def lse_reason(self) -> Optional[str]:
        def run():
            for q_lens, k_lens in (([1, 1], [40, 70]), ([5], [40]), ([1, 5], [30, 50])):  # decode, prefill, chunked
                why = self._vs_reference(64, q_lens, k_lens, True, causal=True)
                if why:
                    return f"q_lens {q_lens}: {why}"
            return None

        why = self.probes.why_not("lse", run)
        return None if why is None else (f"this sgl-kernel build does not return a correct LSE (probe: {why}; "
                                         "builds before PRs #330/#487 never write it)")

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

    # ---- MLA decode (flash_mla_decode) ----------------------------------------------------
    def mla_reason(self) -> Optional[str]:
        """None when the installed sgl_kernel has the MLA decode entry points *and* their ops, else why not."""
        if self._mla_why is None:
            mod, why = try_import("sgl_kernel")
            if why is None:
                missing = [f for f in MLA_FUNCS if not callable(getattr(mod, f, None))]
                if missing:
                    why = f"this sgl_kernel has no {', '.join(missing)} (sgl-kernel-xpu python/sgl_kernel/attention.py)"
                else:
                    ns = torch.ops.sgl_kernel
                    missing = [f for f in MLA_FUNCS if not hasattr(ns, f)]
                    if missing:
                        why = (f"this sgl-kernel build has no torch.ops.sgl_kernel.{missing[0]}: built without "
                               "USE_MLA (src/torch_extension_sycl.cc:361-390 registers the MLA ops only #ifdef USE_MLA)")
            self._mla_why = (why,)
        return self._mla_why[0]

    def mla_reasons(self, req: KernelRequest) -> list[str]:
        """Every reason flash_mla_decode cannot serve an MLA request (the FA-path declarations do not apply)."""
        r = []
        why = self.mla_reason()
        if why:
            r.append(why)
        if req.device_type not in self.devices:
            r.append(f"device {req.device_type!r} not in {sorted(self.devices)}")
        if req.dtype not in MLA_DTYPES:
            r.append(f"MLA: dtype {req.dtype} not fp16/bf16 (attention.py:103-106)")
        if req.kv_dtype != req.dtype:
            r.append(f"MLA: latent cache {req.kv_dtype} must be q's dtype {req.dtype}, no FP8 latent (attention.py:107)")
        if (req.head_dim, req.v_head_dim, req.num_kv_heads) != (MLA_LATENT + MLA_ROPE, MLA_LATENT, 1):
            r.append(f"MLA: only kv_lora_rank {MLA_LATENT} + rope {MLA_ROPE} over one latent head (attention.py:77-81); "
                     f"got D={req.head_dim}, Dv={req.v_head_dim}, Hkv={req.num_kv_heads}")
        if req.num_q_heads > MLA_MAX_HEADS:
            r.append(f"MLA: {req.num_q_heads} heads > {MLA_MAX_HEADS} (attention.py:83-84)")
        if req.page_size not in MLA_PAGE_SIZES:
            r.append(f"MLA: page size {req.page_size} not in {list(MLA_PAGE_SIZES)} (mla_decode.cpp:162-166)")
        if req.phase != Phase.DECODE:
            r.append(f"MLA: decode phase only (one query per request, attention.py:97-99; flash_mla_prefill not "
                     f"wrapped), got phase {Phase(req.phase).value}")
        if req.batch_invariant:
            r.append("MLA: no batch-invariant mode (split-KV count depends on the batch, mla_decode.cpp:60-93)")
        if req.return_lse:
            r.append("MLA: flash_mla_decode returns no LSE")
        for on, what in ((req.has_window, "window"), (req.softcap > 0, "softcap"), (req.has_sinks, "sinks"),
                         (req.has_alibi, "ALiBi"), (not req.causal, "non-causal")):
            if on:
                r.append(f"MLA: no {what} in flash_mla_decode")
        return r

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        if req.mla:
            return self.mla_reasons(req)
        return super().not_supported_reasons(req)

    def mla_workspace(self, device: torch.device, nbytes: int) -> torch.Tensor:
        """A uint8 workspace of >= nbytes on ``device``, owned here and reused (grown by doubling)."""
        buf = self._mla_ws.get(device)
        if buf is None or buf.numel() < nbytes:
            if buf is not None:
                self._mla_retired.append(buf)
            size = max(nbytes, 2 * buf.numel()) if buf is not None and nbytes else nbytes
            buf = self._mla_ws[device] = torch.empty(size, dtype=torch.uint8, device=device)
        return buf

    def _launch(self, step: AttnPlan, call, **options) -> PagedLaunch:
        if not call.mla:
            return super()._launch(step, call, **options)
        if options:
            raise TypeError(f"provider {self.name!r} takes no launch options, got {sorted(options)}")
        bad = self._mla_call_reasons(step, call)
        if bad:
            raise ValueError("sgl_kernel flash_mla_decode cannot run this MLA call (the registry should not have "
                             "chosen it): " + "; ".join(bad))
        step = int32_contiguous(step)
        table = step.page_table
        batch, width = table.shape
        page = step.page_size
        mult = MLA_TILE // page
        padded = max(-(-width // mult), 1) * mult  # att:100-101: > 0 and a multiple of 128 / page
        if padded != width:  # on the device, no host sync: zero page ids are never read (kern:266, 545)
            wide = table.new_zeros(batch, padded)
            wide[:, :width] = table
            table = wide
        step = AttnPlan(step.cu_seqlens_q, step.cache_seqlens, table, step.max_seqlen_q, padded * page, page)
        workspace = None
        if batch:
            # host ints only; the same (B, H, page * width, page) the kernel derives its split count from
            # (mla_decode.cpp:168-172 vs :194-201), so the size is exact for the split count it picks
            nbytes = int(self._module_mla().flash_mla_get_workspace_size(
                padded * page, batch, call.num_q_heads, page, self.mla_num_kv_splits))
            workspace = self.mla_workspace(table.device, nbytes)
        return SglMlaLaunch(self, step, call, workspace, self.mla_num_kv_splits)

    @staticmethod
    def _mla_call_reasons(step: AttnPlan, call) -> list[str]:
        r = []
        if (call.head_dim, call.v_head_dim, call.num_kv_heads) != (MLA_LATENT + MLA_ROPE, MLA_LATENT, 1):
            r.append(f"D/Dv/Hkv {call.head_dim}/{call.v_head_dim}/{call.num_kv_heads} (needs 576/512/1)")
        if call.num_q_heads > MLA_MAX_HEADS:
            r.append(f"{call.num_q_heads} heads > {MLA_MAX_HEADS}")
        if step.page_size not in MLA_PAGE_SIZES:
            r.append(f"page size {step.page_size} not in {list(MLA_PAGE_SIZES)}")
        if int(step.max_seqlen_q) > 1:
            r.append(f"max_seqlen_q {step.max_seqlen_q} > 1 (one query per request)")
        if call.return_lse or call.batch_invariant or call.softcap or call.window != (-1, -1) or not call.causal:
            r.append("LSE, batch invariance, softcap, window and non-causal are not served")
        return r

    def _module_mla(self):
        mod, why = try_import("sgl_kernel")
        why = why or self.mla_reason()
        if why:
            raise RuntimeError(why)
        return mod

    def _run_mla(self, launch: SglMlaLaunch, q, k_cache, v_cache, out, layer):
        step, call = launch.step, launch.call
        if layer.tensors:
            raise ValueError("sgl_kernel flash_mla_decode takes no sinks, ALiBi or FP8 descales")
        if q.dtype not in MLA_DTYPES or k_cache.dtype != q.dtype:
            raise ValueError(f"sgl_kernel flash_mla_decode: q {q.dtype} and latent cache {k_cache.dtype} must be one "
                             "of fp16/bf16 (attention.py:103-107)")
        if v_cache.data_ptr() != k_cache.data_ptr() or v_cache.shape[-1] != MLA_LATENT:
            raise ValueError("sgl_kernel flash_mla_decode: v_cache must be the first 512 columns of the latent "
                             "cache k_cache (one cache; the kernel reads V from it, mla_decode_types.hpp:281-285)")
        if not k_cache.is_contiguous():
            raise ValueError("sgl_kernel flash_mla_decode needs the whole contiguous latent cache [pages, page, 1, "
                             "576] (CHECK_INPUT, mla_decode.cpp:148); got a strided one")
        total_q, batch = q.shape[0], step.page_table.shape[0]
        if total_q == 0 or batch == 0:
            return out
        if total_q != batch:
            raise ValueError(f"sgl_kernel flash_mla_decode: one query per request, got {total_q} queries for "
                             f"{batch} requests (attention.py:97-99)")
        q_nope = q[..., :MLA_LATENT].contiguous()
        q_pe = q[..., MLA_LATENT:].contiguous()
        kv = k_cache.view(-1, step.page_size, MLA_LATENT + MLA_ROPE)  # [pages, page, 576] (attention.py:75)
        o = self._module_mla().flash_mla_decode(q_nope, q_pe, kv, step.cache_seqlens, step.page_table,
                                                launch.workspace, float(call.softmax_scale), launch.num_kv_splits)
        out.copy_(o)  # no out= in the vendor API (attention.py:115-119): the one copy, here
        return out

    # ---- the contract -----------------------------------------------------------------
    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        if call.mla:
            raise ValueError("sgl_kernel: an MLA call runs through the launch plan_paged() returns")
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
            q=q, k_cache=k_cache, v_cache=v_cache, cache_seqlens=step.cache_seqlens,
            page_table=step.page_table, cu_seqlens_q=step.cu_seqlens_q,
            max_seqlen_q=int(step.max_seqlen_q), softmax_scale=call.softmax_scale, causal=call.causal,
            window_size=fa3_window(call.window, call.causal), softcap=float(call.softcap),
            sinks=sinks.to(q.dtype) if sinks is not None else None, k_descale=kd, v_descale=vd,
            return_softmax_lse=call.return_lse, out=out,
        )
        o = res[0] if call.return_lse else res  # main 9cf16bf9 returns (out, lse, *rest), PR #330 (out, lse)
        if o.data_ptr() != out.data_ptr():  # a build that ignores out= (one place)
            out.copy_(o)
        return (out, res[1]) if call.return_lse else out

    def flash_attn_varlen_func(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, sinks=None,
                               alibi_slopes=None, return_softmax_lse=False, out=None):
        # non-paged path (mha_fwd_nopage): no sinks (nopage kernels), no LSE (never written), no out= (py:301-324)
        if sinks is not None or alibi_slopes is not None:
            raise ValueError("sgl_kernel flash_attn_varlen_func takes neither sinks nor ALiBi")
        if return_softmax_lse:
            raise ValueError("sgl_kernel flash_attn_varlen_func never writes the LSE (flash_attention.cpp:161, 764)")
        if softcap > 0 and self.softcap_reason():
            raise ValueError(self.softcap_reason())
        o = self._module().flash_attn_varlen_func(
            q, k, v, cu_seqlens_q.to(torch.int32).contiguous(), cu_seqlens_k.to(torch.int32).contiguous(),
            int(max_seqlen_q), int(max_seqlen_k), softmax_scale=softmax_scale, causal=causal,
            window_size=fa3_window(window_size, causal), softcap=float(softcap))
        if out is not None:
            out.copy_(o)
            o = out
        return o

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        # sgl_kernel.merge_state_v2 takes contiguous lse [T, H] (merge_states.cpp:92-93, 340-345); ours are [H, T]
        mod, why = try_import("sgl_kernel")
        if why:
            raise RuntimeError(why)
        o, lse = mod.merge_state_v2(o_a.contiguous(), lse_a.T.contiguous(), o_b.contiguous(), lse_b.T.contiguous())
        lse = lse.T
        if sinks is not None:  # merge_state_v2 has no sink: the sink's share of the denominator, here
            with_sink = torch.logaddexp(lse, sinks.float()[:, None].expand_as(lse))
            o = (o.float() * torch.exp(lse - with_sink).nan_to_num(0.0).T[..., None]).to(o.dtype)
            lse = with_sink
        return o, lse

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        # sgl-kernel has no cache-write op: SGLang's pools write with torch indexing; so do we
        write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
