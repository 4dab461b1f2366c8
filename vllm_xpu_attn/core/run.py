"""The per-layer run: pick the sub-plan a layer needs and call its provider.

A ``LayerRunner`` is built once per layer at configuration time (it selects providers
then, so a configuration nothing can serve fails at start-up, not mid-step), and run
per step with the step's ``StepPlan``.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..kernels import KernelProvider, KernelRequest, select_provider
from .types import AttnPlan, AttentionKind, LayerSpec, StepPlan


def kernel_request(spec: LayerSpec, device_type: str, page_size: int, phase: str, return_lse: bool = False) -> KernelRequest:
    return KernelRequest(
        device_type=device_type, dtype=spec.dtype, kv_dtype=spec.kv_dtype, head_dim=spec.head_dim,
        num_q_heads=spec.num_q_heads, num_kv_heads=spec.num_kv_heads, page_size=page_size,
        v_head_dim=spec.v_head_dim, causal=spec.causal, window=spec.window, softcap=spec.logit_softcap > 0,
        sinks=spec.has_sinks, alibi=spec.alibi_slopes is not None, return_lse=return_lse, phase=phase,
        batch_invariant=spec.batch_invariant,
    )


class LayerRunner:
    """Runs one layer's attention for any step. Providers are chosen per phase at construction."""

    def __init__(self, spec: LayerSpec, device: torch.device | str, page_size: int, *, override: Optional[str] = None,
                 with_spec_decode: bool = False):
        if with_spec_decode and spec.kind is not AttentionKind.CROSS and (spec.window_left >= 0 or spec.local_attention):
            # The top-k > 1 cascade runs the drafts non-causally over the whole prefix; a window or
            # a chunk would need per-draft key ranges that plan does not carry. Refuse now, not mid-step.
            feature = "a sliding window" if spec.window_left >= 0 else "local (chunked) attention"
            raise ValueError(
                f"vllm-xpu-attn: a layer with {feature} cannot run speculative decoding with top-k > 1 "
                "(EAGLE trees); use top-k 1 (--speculative-eagle-topk 1) or n-gram speculation")
        self.spec = spec
        self.device = torch.device(device)
        self.page_size = page_size
        dev = self.device.type
        self.prefill_provider = select_provider(kernel_request(spec, dev, page_size, "prefill", with_spec_decode), override)
        self.decode_provider = select_provider(kernel_request(spec, dev, page_size, "decode", with_spec_decode), override)
        self.spec_provider = (
            select_provider(kernel_request(spec, dev, 1, "decode", True), override) if with_spec_decode else None
        )
        self._alibi = (
            torch.tensor(spec.alibi_slopes, dtype=torch.float32, device=self.device) if spec.alibi_slopes else None
        )
        # only providers that declare batch invariance are selected for such a layer; they take the switch
        self._extra = {"batch_invariant": True} if spec.batch_invariant else {}

    def providers_used(self) -> dict[str, str]:
        return {"prefill": self.prefill_provider.name, "decode": self.decode_provider.name}

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None) -> None:
        from .kv_write import write_kv

        write_kv(self.decode_provider, k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)

    def forward_varlen(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor,
                       max_seqlen: int, out: torch.Tensor, sinks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Encoder / encoder-only self-attention straight on q/k/v (no cache): [T, H, D] each.

        Only the first cu_seqlens[-1] rows are real; they are written into ``out``.
        """
        res = self.prefill_provider.flash_attn_varlen_func(
            q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale=self.spec.scale,
            causal=self.spec.causal, window_size=self.spec.window, softcap=self.spec.logit_softcap, sinks=sinks,
            alibi_slopes=self._alibi, out=out,
        )
        if res.data_ptr() != out.data_ptr():
            out.copy_(res)
        return out

    def _call(self, provider: KernelProvider, plan: AttnPlan, page_table: torch.Tensor, q, k_cache, v_cache, *,
              causal: bool, window: tuple[int, int], sinks, k_descale, v_descale, return_lse: bool, out):
        return provider.flash_attn_with_kvcache(
            q, k_cache, v_cache, page_table, plan.cache_seqlens, plan.cu_seqlens_q, plan.max_seqlen_q,
            softmax_scale=self.spec.scale, causal=causal, window_size=window, softcap=self.spec.logit_softcap,
            sinks=sinks, alibi_slopes=self._alibi, k_descale=k_descale, v_descale=v_descale,
            return_softmax_lse=return_lse, out=out, **self._extra,
        )

    def forward(
        self,
        plan: StepPlan,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: Optional[torch.Tensor] = None,
        *,
        sinks: Optional[torch.Tensor] = None,
        k_descale: Optional[torch.Tensor] = None,
        v_descale: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """q [num_tokens, Hq, D] -> out [num_tokens, Hq, Dv] (written into ``out`` when given).

        Only the first plan.num_tokens rows of q/out are real; padding rows are left alone.
        """
        spec = self.spec
        n = plan.num_tokens
        if out is None:
            out = torch.empty(q.shape[0], spec.num_q_heads, spec.v_head_dim or spec.head_dim, dtype=q.dtype, device=q.device)
        q_real, out_real = q[:n], out[:n]
        provider = self.decode_provider if plan.mode.is_decode else self.prefill_provider
        causal, window = spec.causal, spec.window

        if spec.kind is AttentionKind.CROSS:
            if plan.encoder is None:
                raise ValueError("cross-attention layer run on a step plan without an encoder sub-plan")
            sub, table = plan.encoder, plan.encoder.page_table
        elif spec.local_attention:
            if plan.local is None:  # never fall back to full attention: that is silently wrong output
                raise ValueError(f"local-attention layer run on a {plan.mode.value} step plan without a local sub-plan")
            sub, table = plan.local, plan.local.page_table
            if spec.uses_swa_pool:
                if plan.local_swa_page_table is None:
                    raise ValueError("local-attention layer in the SWA pool run without a translated local page table")
                table = plan.local_swa_page_table
        else:
            sub = plan.main
            table = plan.swa_page_table if (spec.uses_swa_pool and plan.swa_page_table is not None) else sub.page_table

        if plan.spec_expand is None or spec.kind is AttentionKind.CROSS:
            res = self._call(provider, sub, table, q_real, k_cache, v_cache, causal=causal, window=window, sinks=sinks,
                             k_descale=k_descale, v_descale=v_descale, return_lse=False, out=out_real)
            if res.data_ptr() != out_real.data_ptr():
                out_real.copy_(res)
            return out

        # top-k > 1 speculative step: prefix part (drafts see the whole prefix) + tree part, merged.
        # (Window and local layers are refused with top-k > 1 at construction.)
        o_a, lse_a = self._call(provider, sub, table, q_real, k_cache, v_cache, causal=False, window=(-1, -1),
                                sinks=None, k_descale=k_descale, v_descale=v_descale, return_lse=True, out=None)
        exp = plan.spec_expand
        kc = k_cache.view(-1, 1, *k_cache.shape[2:])  # page size 1 view: expand tables hold slots
        vc = v_cache.view(-1, 1, *v_cache.shape[2:])
        o_b, lse_b = self._call(self.spec_provider or provider, exp, exp.page_table, q_real, kc, vc, causal=False,
                                window=(-1, -1), sinks=None, k_descale=k_descale, v_descale=v_descale,
                                return_lse=True, out=None)
        merged, _ = provider.merge_state(o_a, lse_a, o_b, lse_b, sinks=sinks)  # the sink joins once, there
        out_real.copy_(merged)
        return out
