"""The per-layer run: pick the sub-plan a layer needs and call its provider.

A ``LayerRunner`` is built once per layer at configuration time (it selects providers
then, so a configuration nothing can serve fails at start-up, not mid-step), and run
per step with the step's ``StepPlan``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Optional

import torch

from .. import env
from ..kernels.api import (
    KernelProvider,
    KernelRequest,
    LayerConsts,
    LayerTensors,
    PagedLaunch,
    Phase,
    call_id,
    fp8_descale,
    select_provider,
)
from .kv_write import write_kv
from .types import AttentionKind, LayerSpec, PagedStep, StepPlan

logger = logging.getLogger("vllm_xpu_attn")

# layer calls this process served, by attention kind (eager calls; a replayed graph adds none)
_served: collections.Counter = collections.Counter()


def served() -> dict[str, int]:
    """Layer calls served so far in this process by attention kind, e.g. {"decoder": 64, "cross": 64}
    (``LayerRunner.forward`` / ``forward_mla`` / ``forward_varlen`` outside graph replay). Each kind's first call is
    also logged
    once at INFO: "vllm-xpu-attn served its first <kind> attention call (...)"."""
    return dict(_served)


def _count(kind: str, provider: str) -> None:
    if not _served[kind]:
        logger.info("vllm-xpu-attn served its first %s attention call (provider %s)", kind, provider)
    _served[kind] += 1


def kernel_request(
    spec: LayerSpec, device_type: str, page_size: int, phase: Phase, return_lse: bool = False
) -> KernelRequest:
    return KernelRequest(
        device_type=device_type,
        dtype=spec.dtype,
        kv_dtype=spec.kv_dtype,
        head_dim=spec.head_dim,
        num_q_heads=spec.num_q_heads,
        num_kv_heads=spec.num_kv_heads,
        page_size=page_size,
        v_head_dim=spec.v_head_dim,
        causal=spec.causal,
        window=spec.window,
        softcap=spec.softcap,
        has_sinks=spec.has_sinks,
        has_alibi=spec.alibi_slopes is not None,
        return_lse=return_lse,
        phase=phase,
        batch_invariant=spec.batch_invariant,
        mla=spec.mla is not None,
        kv_layout=spec.kv_layout,
    )


def mha_request(spec: LayerSpec, device_type: str) -> KernelRequest:
    """An MLA layer's un-absorbed prefill: per-head q/k of qk_head_dim, v of v_head_dim, contiguous K/V."""
    m = spec.mla
    return KernelRequest(
        device_type=device_type,
        dtype=spec.dtype,
        kv_dtype=spec.dtype,
        head_dim=m.qk_head_dim,
        num_q_heads=spec.num_q_heads,
        num_kv_heads=spec.num_q_heads,
        page_size=1,
        v_head_dim=m.v_head_dim,
        causal=True,
        return_lse=True,
        phase=Phase.PREFILL,
        batch_invariant=spec.batch_invariant,
    )


def _accelerators() -> list[str]:
    """This host's devices as torch sees them, e.g. ["cpu", "cuda:0", "cuda:1"]."""
    found = ["cpu"]
    for kind in ("cuda", "xpu"):
        mod = getattr(torch, kind, None)
        if mod is not None and mod.is_available():
            found += [f"{kind}:{i}" for i in range(mod.device_count())]
    return found


def missing_device_reason(device: torch.device) -> Optional[str]:
    """None when this host has ``device`` (any index of its type when it names none), else why not."""
    if device.type == "cpu":
        return None
    here = _accelerators()
    if device.type in ("cuda", "xpu"):
        mod = getattr(torch, device.type, None)
        if mod is None or not mod.is_available():
            return (
                f"this host has no {device.type.upper()} device (torch {torch.__version__}: "
                f"torch.{device.type}.is_available() is False); it has {', '.join(here)}"
            )
        if device.index is not None and device.index >= mod.device_count():
            return f"this host has {mod.device_count()} {device.type.upper()} device(s): {', '.join(here)}"
        return None
    return f"vllm-xpu-attn runs on cpu, cuda or xpu; this host has {', '.join(here)}"


class LayerRunner:
    """Runs one layer's attention for any step. Providers are chosen per phase at construction."""

    def __init__(
        self,
        spec: LayerSpec,
        device: torch.device | str,
        page_size: int,
        *,
        override: Optional[str] = None,
        with_spec_decode: bool = False,
    ):
        env.validate()  # configuration time: a bad variable is named here, not at a later launch
        if (
            with_spec_decode
            and spec.kind is not AttentionKind.CROSS
            and (spec.window_left >= 0 or spec.local_attention)
        ):
            # The top-k > 1 cascade runs the drafts non-causally over the whole prefix; a window or
            # a chunk would need per-draft key ranges that plan does not carry. Refuse now, not mid-step.
            feature = "a sliding window" if spec.window_left >= 0 else "local (chunked) attention"
            raise ValueError(
                f"vllm-xpu-attn: a layer with {feature} cannot run speculative decoding with top-k > 1 "
                "(EAGLE trees); use top-k 1 (--speculative-eagle-topk 1) or n-gram speculation"
            )
        self.spec = spec
        self.device = torch.device(device)
        why = missing_device_reason(self.device)
        if why:  # refused now: its providers would be chosen for a device no tensor here can be on
            raise ValueError(f"vllm-xpu-attn: LayerRunner(device={str(device)!r}): {why}")
        self.page_size = page_size
        dev = self.device.type
        self.prefill_provider = select_provider(
            kernel_request(spec, dev, page_size, Phase.PREFILL, with_spec_decode), override
        )
        self.decode_provider = select_provider(
            kernel_request(spec, dev, page_size, Phase.DECODE, with_spec_decode), override
        )
        self.spec_provider = (
            select_provider(kernel_request(spec, dev, 1, Phase.DECODE, True), override) if with_spec_decode else None
        )
        self._check_cache_format()
        self._alibi = (
            torch.tensor(spec.alibi_slopes, dtype=torch.float32, device=self.device) if spec.alibi_slopes else None
        )
        # the non-tensor part of every call this layer makes, fixed once (one name/type to the kernel)
        self._call = LayerConsts.make(
            spec.num_q_heads,
            spec.num_kv_heads,
            spec.head_dim,
            spec.v_head_dim,
            softmax_scale=spec.scale,
            causal=spec.causal,
            window=spec.window,
            softcap=spec.softcap,
            batch_invariant=spec.batch_invariant,
            mla=spec.mla is not None,
        )
        # top-k > 1 cascade: both parts non-causal over their keys, with LSE for the merge
        self._cascade_call = dataclasses.replace(self._call, causal=False, window=(-1, -1), return_lse=True)
        # MLA layers: the un-absorbed prefill (engines run new tokens as plain MHA over decompressed K/V)
        self.mha_provider = select_provider(mha_request(spec, dev), override) if spec.mla is not None else None
        # the layer's tensors (ALiBi from the spec; sinks and FP8 descales from bind()), bound once
        self._unbound_sinks = spec.has_sinks
        self._bound_from: Optional[tuple] = None  # (source, sinks, k_scale, v_scale) of ensure_bound's last bind
        self._bind(sinks=None, k_descale=None, v_descale=None)

    def bind(
        self,
        *,
        sinks: Optional[torch.Tensor] = None,
        k_descale: Optional[torch.Tensor] = None,
        v_descale: Optional[torch.Tensor] = None,
    ) -> None:
        """Bind the layer's own tensors once (the engine's parameters, updated in place by weight loading):
        sinks [Hq] float; k_descale / v_descale float32 scalar or [1] (FP8 caches only; None = 1.0).
        Checked here, against the layer's spec, and never again per call."""
        if sinks is not None and not self.spec.has_sinks:
            raise ValueError(
                "sinks bound on a layer whose LayerSpec has has_sinks=False (declare them at start-up, "
                "so the provider chosen can serve them)"
            )
        if sinks is None and self.spec.has_sinks:
            raise ValueError(
                "a layer declared with sinks (LayerSpec.has_sinks=True) must be bound with its sinks "
                "tensor: LayerRunner.bind(sinks=...)"
            )
        self._bind(sinks=sinks, k_descale=k_descale, v_descale=v_descale)
        self._unbound_sinks = False

    def ensure_bound(
        self,
        source: object,
        *,
        sinks: Optional[torch.Tensor] = None,
        k_scale: Optional[torch.Tensor] = None,
        v_scale: Optional[torch.Tensor] = None,
    ) -> None:
        """Bind the layer's tensors from the engine's layer object ``source``, unless bound from it already.

        sinks [Hq] float; k_scale / v_scale: the engine's per-tensor KV scales (fp32 scalar or [1]), used as
        the descales of an FP8 cache and ignored otherwise. Engines update these tensors in place (weight
        loading), so one bind per source is enough; another source object, or other tensor objects, bind
        again. Per call: four identity compares. Every adapter binds through this one method."""
        bound = self._bound_from
        if (
            bound is not None
            and bound[0] is source
            and bound[1] is sinks
            and bound[2] is k_scale
            and bound[3] is v_scale
        ):
            return
        kv = self.spec.kv_dtype
        self.bind(sinks=sinks, k_descale=fp8_descale(kv, k_scale), v_descale=fp8_descale(kv, v_scale))
        self._bound_from = (source, sinks, k_scale, v_scale)

    def _bind(self, *, sinks, k_descale, v_descale) -> None:
        self._args = LayerTensors.make(
            self._call,
            device=self.device,
            kv_dtype=self.spec.kv_dtype,
            sinks=sinks,
            alibi_slopes=self._alibi,
            k_descale=k_descale,
            v_descale=v_descale,
        )
        self._cascade_args = self._args.without_sinks()  # the merge adds the sinks once

    def _check_cache_format(self) -> None:
        """A provider whose write_kv stores a format only it reads must serve every call of the layer (the
        decode provider writes the cache every phase reads)."""
        provs = {p.name: p for p in (self.prefill_provider, self.decode_provider, self.spec_provider) if p is not None}
        owner = [n for n, p in provs.items() if p.owns_cache_format]
        if owner and len(provs) > 1:
            raise ValueError(
                f"vllm-xpu-attn: kernel provider {owner[0]!r} writes its own cache format, so it must serve every "
                f"phase of a layer, but this layer would also run {sorted(set(provs) - {owner[0]})} "
                f"[{kernel_request(self.spec, self.device.type, self.page_size, Phase.ANY).describe()}]"
            )

    def graph_capture_reason(self, *, mha_prefill: bool = True) -> Optional[str]:
        """None when every provider this layer may run can be captured in a graph, else why not
        (``mha_prefill=False``: MLA's un-absorbed MHA prefill provider not counted; see core/graphs.py)."""
        provs = {self.prefill_provider, self.decode_provider, self.spec_provider} - {None}
        if mha_prefill and self.mha_provider is not None:
            provs.add(self.mha_provider)
        why = [
            f"{p.name}: {p.graph_capture_reason}" for p in sorted(provs, key=lambda p: p.name) if p.graph_capture_reason
        ]
        return "; ".join(why) or None

    def providers_used(self) -> dict[str, str]:
        used = {"prefill": self.prefill_provider.name, "decode": self.decode_provider.name}
        if self.mha_provider is not None:
            used["mla_prefill_mha"] = self.mha_provider.name
        return used

    # ---- MLA (DeepSeek-V2/V3): absorbed attention over the latent cache ------------------
    def forward_mla(
        self, plan: StepPlan, q: torch.Tensor, latent_cache: torch.Tensor, out: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """Absorbed MLA for any step: q [T, H, latent_dim] = [q_nope W_UK | q_rope], latent_cache
        [P, page, 1, latent_dim] -> out [T, H, kv_lora_rank] (the engine applies W_UV).

        MQA over one latent row per token, the values being the row's first kv_lora_rank columns
        (a view, no copy); every mode the step plan has (decode, extend, verify, mixed) runs so. An FP8
        latent cache's descale is bound once: ``bind(k_descale=s, v_descale=s)``.
        """
        m = self.spec.mla
        if m is None:
            raise ValueError("forward_mla on a layer configured without MLA dims (LayerSpec.for_mla)")
        if latent_cache.dim() != 4 or latent_cache.shape[2] != 1 or latent_cache.shape[3] != m.latent_dim:
            raise ValueError(
                f"MLA latent cache must be [pages, page, 1, {m.latent_dim}], got {list(latent_cache.shape)}"
            )
        return self.forward(plan, q, latent_cache, latent_cache[..., : m.kv_lora_rank], out)

    def write_latent(
        self,
        c_kv: torch.Tensor,
        k_rope: torch.Tensor,
        latent_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
        scale=None,
    ) -> None:
        """Store each new token's latent row: c_kv [T, kv_lora_rank] and k_rope [T, qk_rope_head_dim] (post-RoPE)
        at slot_mapping [T] (< 0 skipped) of latent_cache [P, page, 1, latent_dim]; FP8 caches quantise by scale."""
        latent = torch.cat([c_kv.reshape(c_kv.shape[0], -1), k_rope.reshape(k_rope.shape[0], -1)], dim=-1)
        write_kv(
            self.decode_provider,
            latent.unsqueeze(1),
            None,
            latent_cache,
            None,
            slot_mapping,
            scale,
            None,
            latent=True,
            kv_dtype=self.spec.kv_dtype,
        )

    def forward_mla_mha(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        out: Optional[torch.Tensor] = None,
        return_lse: bool = False,
    ):
        """An MLA layer's un-absorbed prefill: q/k [T, H, qk_head_dim], v [Tk, H, v_head_dim], causal with the
        queries at the end of each sequence's keys -> out [T, H, v_head_dim] (, lse [H, T])."""
        if self.mha_provider is None:
            raise ValueError("forward_mla_mha on a layer configured without MLA dims")
        return self.mha_provider.flash_attn_varlen_func(
            q,
            k,
            v,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            softmax_scale=self.spec.scale,
            causal=True,
            return_softmax_lse=return_lse,
            out=out,
        )

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
        write_kv(
            self.decode_provider, k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale, kv_dtype=self.spec.kv_dtype
        )

    def forward_varlen(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens: torch.Tensor,
        max_seqlen: int,
        out: torch.Tensor,
    ) -> torch.Tensor:
        """Encoder / encoder-only self-attention straight on q/k/v (no cache): [T, H, D] each.

        Only the first cu_seqlens[-1] rows are real; they are written into ``out``.
        """
        _count(self.spec.kind.value, self.prefill_provider.name)
        self.prefill_provider.flash_attn_varlen_func(
            q,
            k,
            v,
            cu_seqlens,
            cu_seqlens,
            max_seqlen,
            max_seqlen,
            softmax_scale=self.spec.scale,
            causal=self.spec.causal,
            window_size=self.spec.window,
            softcap=self.spec.softcap,
            sinks=self._args.sinks,
            alibi_slopes=self._alibi,
            out=out,
        )
        return out

    def _launch(self, plan: StepPlan, which: str, provider: KernelProvider, call: LayerConsts) -> PagedLaunch:
        """The step's launch for sub-plan ``which`` and this layer's call, planned by the first layer asking."""
        # keyed by the call's interned id: hashing the dataclass per layer costs more than the lookup
        key = (which, provider.name, call_id(call))
        launch = plan.launches.get(key)
        if launch is None:
            launch = plan.launches[key] = provider.arm_paged(self._sub_plan(plan, which), call)
        return launch

    def _which(self, plan: StepPlan) -> str:
        """Which of the step's sub-plans this layer reads (decided per layer kind, never by fallback)."""
        spec = self.spec
        if spec.kind is AttentionKind.CROSS:
            if plan.encoder is None:
                raise ValueError("cross-attention layer run on a step plan without an encoder sub-plan")
            return "encoder"
        if spec.local_attention:
            if plan.local is None:  # never fall back to full attention: that is silently wrong output
                raise ValueError(f"local-attention layer run on a {plan.mode.value} step plan without a local sub-plan")
            if spec.uses_swa_pool:
                if plan.local_swa_page_table is None:
                    raise ValueError("local-attention layer in the SWA pool run without a translated local page table")
                return "local_swa"
            return "local"
        return "main_swa" if (spec.uses_swa_pool and plan.swa_page_table is not None) else "main"

    @staticmethod
    def _page_size(plan: StepPlan, which: str) -> int:
        """The page size of sub-plan ``which`` (no copy of the plan: this runs per layer call)."""
        if which == "encoder":
            return plan.encoder.page_size
        if which.startswith("local"):
            return plan.local.page_size
        return plan.spec_expand.page_size if which == "spec" else plan.main.page_size

    @staticmethod
    def _sub_plan(plan: StepPlan, which: str) -> PagedStep:
        if which == "encoder":
            return plan.encoder
        if which == "local":
            return plan.local
        if which == "local_swa":
            return dataclasses.replace(plan.local, page_table=plan.local_swa_page_table)
        if which == "main_swa":
            return dataclasses.replace(plan.main, page_table=plan.swa_page_table)
        if which == "spec":
            return plan.spec_expand
        return plan.main

    def forward(
        self,
        plan: StepPlan,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """q [num_tokens, Hq, D] -> out [num_tokens, Hq, Dv] (written into ``out`` when given), with the
        layer's bound tensors (``bind``).

        Only the first plan.num_tokens rows of q/out are real; padding rows are left alone.
        """
        if self._unbound_sinks:
            raise ValueError(
                "a layer declared with sinks (LayerSpec.has_sinks=True) ran before its sinks were "
                "bound: LayerRunner.bind(sinks=...)"
            )
        n = plan.num_tokens
        if out is None:
            out = torch.empty(q.shape[0], self.spec.num_q_heads, self._call.v_head_dim, dtype=q.dtype, device=q.device)
        # rows past num_tokens are the engine's padding (graphs): slice only when there are some
        q_real, out_real = (q, out) if q.shape[0] == n and out.shape[0] == n else (q[:n], out[:n])
        provider = self.decode_provider if plan.mode.is_decode else self.prefill_provider
        which = self._which(plan)
        _count(self.spec.kind.value, provider.name)

        page = self._page_size(plan, which)
        if page != self.page_size and page != 1:  # page 1: a token-level sub-plan over the same pool (below)
            raise ValueError(
                f"the step plan's {which} sub-plan has page size {page}, but this LayerRunner was "
                f"built for page size {self.page_size} (its providers were chosen for it): plan "
                f"with StepInputs(page_size={self.page_size}) or build the runner for {page}"
            )
        if k_cache.shape[1] != page:
            if page != 1:  # the plan and the cache disagree: reading on would address the wrong slots
                raise ValueError(
                    f"the step plan's {which} sub-plan has page size {page}, the KV cache pages of {k_cache.shape[1]}"
                )
            # a token-level sub-plan (an encoder-decoder's decoder rows): the same pool viewed at page size 1
            k_cache = k_cache.view(-1, 1, *k_cache.shape[2:])
            v_cache = v_cache.view(-1, 1, *v_cache.shape[2:])
        if plan.spec_expand is None or which == "encoder":
            self._launch(plan, which, provider, self._call).run(q_real, k_cache, v_cache, out_real, layer=self._args)
            return out

        # top-k > 1 speculative step: prefix part (drafts see the whole prefix) + tree part, merged.
        # (Window and local layers are refused with top-k > 1 at construction.)
        o_a, o_b = torch.empty_like(out_real), torch.empty_like(out_real)
        _, lse_a = self._launch(plan, which, provider, self._cascade_call).run(
            q_real, k_cache, v_cache, o_a, layer=self._cascade_args
        )
        kc = k_cache.view(-1, 1, *k_cache.shape[2:])  # page size 1 view: expand tables hold slots
        vc = v_cache.view(-1, 1, *v_cache.shape[2:])
        spec_provider = self.spec_provider or provider
        _, lse_b = self._launch(plan, "spec", spec_provider, self._cascade_call).run(
            q_real, kc, vc, o_b, layer=self._cascade_args
        )
        merged, _ = provider.merge_state(o_a, lse_a, o_b, lse_b, sinks=self._args.sinks)  # the sink joins once
        out_real.copy_(merged)
        return out
