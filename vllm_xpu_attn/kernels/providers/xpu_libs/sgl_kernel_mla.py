"""sgl-kernel's MLA decode (``flash_mla_decode``) as built for Intel XPU (sgl-kernel-xpu): absorbed DeepSeek MLA.

Requirements read from sgl-project/sgl-kernel-xpu main 9cf16bf9 (``att`` = python/sgl_kernel/attention.py,
``mla`` = src/sycl/mla_decode.cpp); docs/xpu_vendors.md has the table with every source line,
tests/fakes/sgl_kernel the strict model. What the op serves is written once, in ``LIMITS``; besides it:
int32 lengths and table (att:108-113), every tensor contiguous (mla:145-151), no ``out=`` (att:115-119:
the result is copied into the engine's buffer). The ops exist only in a USE_MLA build
(src/torch_extension_sycl.cc:361-390) while the Python wrappers are there in every build, so the ops
themselves are looked up.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import torch

from ...api import (
    NO_LAYER_TENSORS,
    Feature,
    KernelRequest,
    LayerConsts,
    LayerTensors,
    PagedLaunch,
    PagedStep,
    Phase,
    dtype_name,
    write_kv_torch,
)
from .common import XpuLibProvider, int32_contiguous, module_version, require, try_import
from .sgl_kernel import PACKAGE

FUNCS = ("flash_mla_decode", "flash_mla_get_workspace_size")  # sgl_kernel/__init__.py:16-22


@dataclasses.dataclass(frozen=True)
class MlaDecodeLimits:
    """What ``flash_mla_decode`` serves: the one table the provider's declarations, its refusal reasons, its
    per-step checks and its launch read."""

    kv_lora_rank: int = 512  # att:77-81: hard-coded, and V is the latent row's first kv_lora_rank columns
    rope_dim: int = 64  # att:77-81: hard-coded
    num_kv_heads: int = 1  # one latent row per token
    max_q_heads: int = 128  # att:83-84
    page_sizes: tuple[int, ...] = (16, 32, 64, 128)  # mla:162-166
    table_tile: int = 128  # att:101: page-table width a multiple of table_tile / page_size
    dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16)  # att:103-107: q, q_pe, cache one of these
    max_seqlen_q: int = 1  # att:97-99: one query row per page-table row (flash_mla_prefill is not wrapped)
    # beyond MLA itself (Dv = kv_lora_rank != D) none: no window, softcap, sinks, ALiBi, LSE, non-causal, and no
    # batch invariance (the split-KV count depends on the batch, mla:60-93)
    features: frozenset[Feature] = frozenset({Feature.MLA, Feature.DV})

    @property
    def head_dim(self) -> int:
        return self.kv_lora_rank + self.rope_dim


LIMITS = MlaDecodeLimits()

NOT_MLA = "not an MLA layer (flash_mla_decode runs absorbed MLA over a latent cache only)"


class SglMlaLaunch(PagedLaunch):
    """One step's MLA decode launch: the padded int32 table, int32 lengths and the workspace, fixed once."""

    __slots__ = ("workspace", "num_kv_splits")

    def __init__(
        self,
        provider: SglKernelMlaProvider,
        step: PagedStep,
        call: LayerConsts,
        workspace: Optional[torch.Tensor],
        num_kv_splits: int,
    ):
        super().__init__(provider, step, call)
        self.workspace = workspace
        self.num_kv_splits = num_kv_splits

    def run(self, q, k_cache, v_cache, out, *, layer=NO_LAYER_TENSORS):
        self.check(q, k_cache, v_cache, out, layer)
        return self.provider._run_mla(self, q, k_cache, v_cache, out, layer)


class SglKernelMlaProvider(XpuLibProvider):
    name = "sgl_kernel_mla"
    description = "sgl-kernel MLA decode (flash_mla_decode) built for Intel XPU"
    limits: ClassVar[MlaDecodeLimits] = LIMITS
    devices = frozenset({"xpu"})
    dtypes = frozenset(LIMITS.dtypes)
    kv_dtypes = frozenset(LIMITS.dtypes)
    head_dims = frozenset({LIMITS.head_dim})
    features = LIMITS.features
    # split-KV count: -1 = the vendor's own choice (mla:168-172, set_split_kv tuned on BMG), 1 = no split (what
    # SGLang's XPU backend passes); the workspace is sized for it either way
    num_kv_splits: int = -1

    def __init__(self) -> None:
        self._why: Optional[tuple[Optional[str]]] = None  # cached (reason,) of the op lookup
        self._ws: dict[torch.device, torch.Tensor] = {}  # uint8 workspaces, grown, reused across steps
        self._retired: list[torch.Tensor] = []  # replaced workspaces kept alive (a graph may address them)

    # ---- availability ---------------------------------------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        """None when the installed sgl_kernel has the MLA decode entry points *and* their ops, else why not."""
        if self._why is None:
            mod, why = try_import(PACKAGE)
            if why is None:
                missing = [f for f in FUNCS if not callable(getattr(mod, f, None))]
                if missing:
                    why = f"this sgl_kernel has no {', '.join(missing)} (sgl-kernel-xpu python/sgl_kernel/attention.py)"
                else:
                    missing = [f for f in FUNCS if not hasattr(torch.ops.sgl_kernel, f)]
                    if missing:
                        why = (
                            f"this sgl-kernel build has no torch.ops.sgl_kernel.{missing[0]}: built without "
                            "USE_MLA (src/torch_extension_sycl.cc:361-390 registers the MLA ops only "
                            "#ifdef USE_MLA)"
                        )
            self._why = (why,)
        return self._why[0]

    def version(self) -> Optional[str]:
        return module_version(PACKAGE)

    def _module(self):
        mod = require(PACKAGE)
        why = self.unavailable_reason()
        if why:
            raise RuntimeError(why)
        return mod

    # ---- what the op serves, from the limit table ----------------------------------------------
    def dtype_reasons(self, dtype: torch.dtype, kv_dtype: torch.dtype) -> list[str]:
        """Why q of ``dtype`` over a latent cache of ``kv_dtype`` cannot run (att:103-107)."""
        lim, r = self.limits, []
        if dtype not in lim.dtypes:
            r.append(
                f"MLA: dtype {dtype_name(dtype)} not {'/'.join(dtype_name(d) for d in lim.dtypes)} "
                "(attention.py:103-106)"
            )
        if kv_dtype != dtype:
            r.append(
                f"MLA: latent cache {dtype_name(kv_dtype)} must be q's dtype {dtype_name(dtype)}, no FP8 latent "
                "(attention.py:107)"
            )
        return r

    def call_reasons(self, call: LayerConsts, page_size: int, phase: Phase) -> list[str]:
        """Why a layer's call (shapes, options) at ``page_size`` in ``phase`` cannot run; dtypes and the layer's
        tensors aside."""
        if not call.mla:
            return [NOT_MLA]
        lim, r = self.limits, []
        if (call.head_dim, call.v_head_dim, call.num_kv_heads) != (lim.head_dim, lim.kv_lora_rank, lim.num_kv_heads):
            r.append(
                f"MLA: only kv_lora_rank {lim.kv_lora_rank} + rope {lim.rope_dim} over {lim.num_kv_heads} latent "
                f"head (attention.py:77-81); got D={call.head_dim}, Dv={call.v_head_dim}, Hkv={call.num_kv_heads}"
            )
        if call.num_q_heads > lim.max_q_heads:
            r.append(f"MLA: {call.num_q_heads} heads > {lim.max_q_heads} (attention.py:83-84)")
        if page_size not in lim.page_sizes:
            r.append(f"MLA: page size {page_size} not in {list(lim.page_sizes)} (mla_decode.cpp:162-166)")
        if phase != Phase.DECODE:
            r.append(
                f"MLA: decode phase only (max_seqlen_q <= {lim.max_seqlen_q}: one query per request, "
                f"attention.py:97-99; flash_mla_prefill not wrapped), got phase {Phase(phase).value}"
            )
        wanted = (
            (Feature.LSE, call.return_lse, "flash_mla_decode returns no LSE"),
            (
                Feature.BATCH_INVARIANT,
                call.batch_invariant,
                "no batch-invariant mode (split-KV count depends on the batch, mla_decode.cpp:60-93)",
            ),
            (Feature.WINDOW, call.window != (-1, -1), "no window in flash_mla_decode"),
            (Feature.SOFTCAP, call.softcap > 0, "no softcap in flash_mla_decode"),
            (Feature.NON_CAUSAL, not call.causal, "no non-causal in flash_mla_decode"),
        )
        r += [f"MLA: {why}" for feat, on, why in wanted if on and feat not in lim.features]
        return r

    def layer_reasons(self, has_sinks: bool, has_alibi: bool) -> list[str]:
        """Why a layer's sinks or ALiBi slopes cannot be passed (FP8 descales go with the FP8 latent it refuses)."""
        wanted = ((Feature.SINKS, has_sinks, "sinks"), (Feature.ALIBI, has_alibi, "ALiBi"))
        return [
            f"MLA: no {what} in flash_mla_decode"
            for feat, on, what in wanted
            if on and feat not in self.limits.features
        ]

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        # the declarations are the limit table's; its own reasons say more than the generic ones (the source line)
        r = []
        why = self.unavailable_reason()
        if why:
            r.append(why)
        if req.device_type not in self.devices:
            r.append(f"device {req.device_type!r} not in {sorted(self.devices)}")
        if not req.mla:
            return r + [NOT_MLA]
        call = LayerConsts(
            num_q_heads=req.num_q_heads,
            num_kv_heads=req.num_kv_heads,
            head_dim=req.head_dim,
            v_head_dim=req.v_head_dim or req.head_dim,
            softmax_scale=1.0,
            causal=req.causal,
            window=req.window,
            softcap=req.softcap,
            return_lse=req.return_lse,
            batch_invariant=req.batch_invariant,
            mla=True,
        )
        return (
            r
            + self.dtype_reasons(req.dtype, req.kv_dtype)
            + self.call_reasons(call, req.page_size, Phase(req.phase))
            + self.layer_reasons(req.has_sinks, req.has_alibi)
        )

    # ---- per step: the padded table, int32 lengths, the provider's workspace -----------------------
    def workspace(self, device: torch.device, nbytes: int) -> torch.Tensor:
        """A uint8 workspace of >= nbytes on ``device``, owned here and reused (grown by doubling)."""
        buf = self._ws.get(device)
        if buf is None or buf.numel() < nbytes:
            if buf is not None:
                self._retired.append(buf)
            size = max(nbytes, 2 * buf.numel()) if buf is not None and nbytes else nbytes
            buf = self._ws[device] = torch.empty(size, dtype=torch.uint8, device=device)
        return buf

    def _launch(self, step: PagedStep, call: LayerConsts, **options) -> PagedLaunch:
        if options:
            raise TypeError(f"provider {self.name!r} takes no launch options, got {sorted(options)}")
        phase = Phase.DECODE if int(step.max_seqlen_q) <= self.limits.max_seqlen_q else Phase.PREFILL
        bad = self.call_reasons(call, step.page_size, phase)
        if bad:
            raise ValueError(
                "sgl_kernel flash_mla_decode cannot run this call (the registry should not have "
                "chosen it): " + "; ".join(bad)
            )
        step = int32_contiguous(step)
        table = step.page_table
        batch, width = table.shape
        page = step.page_size
        mult = self.limits.table_tile // page
        padded = max(-(-width // mult), 1) * mult  # att:100-101: > 0 and a multiple of table_tile / page
        if padded != width:  # on the device, no host sync: zero page ids are never read (kern:266, 545)
            wide = table.new_zeros(batch, padded)
            wide[:, :width] = table
            table = wide
        step = PagedStep(step.cu_seqlens_q, step.cache_seqlens, table, step.max_seqlen_q, padded * page, page)
        workspace = None
        if batch:
            # host ints only; the same (B, H, page * width, page) the kernel derives its split count from
            # (mla_decode.cpp:168-172 vs :194-201), so the size is exact for the split count it picks
            nbytes = int(
                self._module().flash_mla_get_workspace_size(
                    padded * page, batch, call.num_q_heads, page, self.num_kv_splits
                )
            )
            workspace = self.workspace(table.device, nbytes)
        return SglMlaLaunch(self, step, call, workspace, self.num_kv_splits)

    # ---- per layer -------------------------------------------------------------------------------
    def _run_mla(
        self,
        launch: SglMlaLaunch,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        layer: LayerTensors,
    ) -> torch.Tensor:
        step, call, lim = launch.step, launch.call, self.limits
        bad = self.layer_reasons(layer.sinks is not None, layer.alibi_slopes is not None)
        bad += self.dtype_reasons(q.dtype, k_cache.dtype)
        if layer.has_descale:  # the kernel reads a 16-bit latent: a bound descale would be dropped
            bad.append("MLA: FP8 descales given, but flash_mla_decode reads a 16-bit latent cache")
        if bad:
            raise ValueError("sgl_kernel flash_mla_decode: " + "; ".join(bad))
        if v_cache.data_ptr() != k_cache.data_ptr() or v_cache.shape[-1] != lim.kv_lora_rank:
            raise ValueError(
                f"sgl_kernel flash_mla_decode: v_cache must be the first {lim.kv_lora_rank} columns of "
                "the latent cache k_cache (one cache; the kernel reads V from it, "
                "mla_decode_types.hpp:281-285)"
            )
        if not k_cache.is_contiguous():
            raise ValueError(
                "sgl_kernel flash_mla_decode needs the whole contiguous latent cache [pages, page, 1, "
                f"{lim.head_dim}] (CHECK_INPUT, mla_decode.cpp:148); got a strided one"
            )
        total_q, batch = q.shape[0], step.page_table.shape[0]
        if total_q == 0 or batch == 0:
            return out
        if total_q != batch:
            raise ValueError(
                f"sgl_kernel flash_mla_decode: one query per request, got {total_q} queries for "
                f"{batch} requests (attention.py:97-99)"
            )
        q_nope = q[..., : lim.kv_lora_rank].contiguous()
        q_pe = q[..., lim.kv_lora_rank :].contiguous()
        kv = k_cache.view(-1, step.page_size, lim.head_dim)  # [pages, page, 576] (attention.py:75)
        o = self._module().flash_mla_decode(
            q_nope,
            q_pe,
            kv,
            step.cache_seqlens,
            step.page_table,
            launch.workspace,
            float(call.softmax_scale),
            launch.num_kv_splits,
        )
        out.copy_(o)  # no out= in the vendor API (attention.py:115-119): the one copy, here
        return out

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):
        raise ValueError("sgl_kernel_mla runs through the launch arm_paged() returns")

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        # sgl-kernel has no cache-write op: SGLang's pools write with torch indexing; so do we
        write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)
