"""What a paged launch fixes for every step of one shape: tiles, split count, grid and constexprs.

``LaunchConfig(step, call, num_splits, tensor_descriptors=...)`` is built by the provider once per step signature
(signature.step_signature) and kept across steps; the decisions are variants.step_variant's, the device's part
(family, compute units, descriptors) is read here. ``TritonLaunch`` (step_launch.py) arms the compiled launchers
and per-layer closures of each layer signature in ``layers``.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from ...api import LayerConsts, PagedStep
from .descriptors import step_takes_descriptors
from .tiles import compute_units, device_family
from .tuning import MIN_SPLIT_KEYS, MLA_MIN_SPLIT_KEYS, max_splits, paged_d_tiles, split_count_for, split_fill
from .variants import mla_kernel_fits, step_variant

__all__ = ["LaunchConfig", "cache_width", "mla_kernel_fits", "split_count", "device_units"]


def device_units(device: torch.device) -> Optional[int]:
    """The compute units the split-K policy sizes against (None on the CPU: the interpreter's policy)."""
    return compute_units(device.type, device.index) if device.type in ("cuda", "xpu") else None


def split_count(
    device: torch.device,
    batch: int,
    units: int,
    max_seqlen_q: int,
    max_keys: int,
    mla: bool = False,
    kv_bytes: int = 2,
) -> int:
    """Flash-decoding: split long contexts when batch x units cannot fill the device (tuning.split_count_for at
    the fill of the device's family, the layer kind and its cache element width ``kv_bytes``: tuning.split_fill; an
    MLA split's minimum keys by bytes and its cap, tuning.MLA_MIN_SPLIT_KEYS / max_splits)."""
    fill = split_fill(device_family(device), mla, kv_bytes)
    min_keys = MLA_MIN_SPLIT_KEYS if mla else MIN_SPLIT_KEYS
    return split_count_for(device_units(device), batch, units, max_seqlen_q, max_keys, fill, min_keys, max_splits(mla))


def cache_width(kv_dtype: torch.dtype) -> int:
    """The split policy's view of a cache dtype: 1 for 1-byte (FP8) elements, else 2."""
    return 1 if kv_dtype.itemsize == 1 else 2


class LaunchConfig:
    """What a paged launch fixes for every step of one shape: tiles, split count, grid, constexprs, and
    the compiled launchers and per-layer closures armed for it (kept across steps by the provider).

    ``grid``: (batch, row tiles, Hkv x splits x output-column programs (tuning.PAGED_D_TILES)), or (batch, head
    tiles, splits x latent column programs) for absorbed MLA (tuning.MLA_LATENT_TILES);
    ``static``: the kernel's constexprs fixed by the step; ``bd`` / ``bdv``: head-dim tile widths;
    ``desc``: prefill K/V by tensor descriptor (``tensor_descriptors`` forces it on/off, None: by device);
    ``variant``: the variants.StepVariant these come from; ``replay``: layers may take the per-layer hot path;
    ``step_spec``: what Triton specialises on in the
    step's own arguments (signature.step_specialisation); ``layers``: layer signature -> armed launch
    (step_launch.Armed), the second level of the cache whose first is the provider's configurations;
    ``kv_bytes``: the cache element width the split count and head-dim tiles were chosen for (cache_width;
    ``for_cache`` gives the configuration of a layer over a cache of the other width).
    """

    __slots__ = (
        "phase",
        "block_m",
        "block_n",
        "warps",
        "stages",
        "num_splits",
        "grid",
        "static",
        "bd",
        "bdv",
        "group",
        "invariant",
        "mla_decode",
        "options",
        "desc",
        "variant",
        "step_spec",
        "layers",
        "family",
        "replay",
        "kv_bytes",
        "forced",
        "tensor_descriptors",
        "other",
    )

    def __init__(
        self,
        step: PagedStep,
        call: LayerConsts,
        num_splits: Optional[int] = None,
        *,
        tensor_descriptors: Optional[bool] = None,
        kv_bytes: int = 2,
    ):
        from .signature import step_specialisation

        self.layers: dict[tuple, Any] = {}
        self.kv_bytes, self.forced, self.tensor_descriptors = kv_bytes, num_splits is not None, tensor_descriptors
        self.other: Optional[LaunchConfig] = None
        device = step.cache_seqlens.device
        hkv = call.num_kv_heads
        self.group = group = call.num_q_heads // hkv
        batch = step.page_table.shape[0]
        max_q = int(step.max_seqlen_q)
        self.invariant = invariant = call.batch_invariant
        phase = "decode" if max_q <= 1 and not invariant else "prefill"
        # batch-invariant mode: no split-K (each row's keys reduced in one fixed order)
        if invariant and num_splits not in (None, 1):
            raise ValueError(f"batch-invariant mode runs without split-K; got num_splits={num_splits}")
        if num_splits is not None and (num_splits < 1 or num_splits & (num_splits - 1)):
            raise ValueError(
                f"num_splits must be a power of two >= 1 (the merge reduces them as one block), got {num_splits}"
            )
        self.family = family = device_family(device)
        max_keys = step.page_table.shape[1] * step.page_size
        # a layer's cache strides are checked per layer (descriptors.desc_layer_ok)
        desc = step_takes_descriptors(
            tensor_descriptors,
            device,
            family,
            prefill=phase == "prefill",
            invariant=invariant,
            mla=call.mla,
            page_size=step.page_size,
            head_dim=call.head_dim,
            v_head_dim=call.v_head_dim,
            batch=batch,
            rows_per_seq=max(max_q, 1) * group,
            kv_heads=hkv,
        )
        sv = step_variant(
            family,
            call,
            page_size=step.page_size,
            max_seqlen_q=max_q,
            splits=num_splits
            or (lambda units: split_count(device, batch, units, max_q, max_keys, mla_kernel_fits(call), kv_bytes)),
            desc=desc,
            kv_bytes=kv_bytes,
        )
        self.variant = sv
        self.phase, self.mla_decode, self.desc = sv.phase, sv.mla, sv.desc
        self.block_m, self.block_n, self.warps, self.stages, self.options = (
            sv.block_m,
            sv.block_n,
            sv.warps,
            sv.stages,
            sv.options,
        )
        self.num_splits, self.static, self.bd, self.bdv = sv.num_splits, sv.static, sv.bd, sv.bdv
        self.grid = (batch, sv.row_tiles, sv.grid_cols)
        # whether a layer's launch may be replayed by the hot path (the call is part of the step signature): not
        # with an LSE output (allocated per call) nor on the MLA kernel (checked every call)
        self.replay = not call.return_lse and not sv.mla
        self.step_spec = step_specialisation(step)

    def for_cache(self, step: PagedStep, call: LayerConsts, kv_dtype: torch.dtype) -> "LaunchConfig":
        """The configuration a layer over a ``kv_dtype`` cache launches: this one, or where that cache width's
        decode differs (tuning.SPLIT_FILL: FP8 decode wants more programs than 16-bit decode, unless the split
        count was given; tuning.PAGED_D_TILES "decode_fp8_d<D>": its own output-column programs), a sibling
        built once for ``step`` (this configuration's step shape) that shares ``layers`` (a layer signature
        holds the cache dtype, so the two never meet there)."""
        width = cache_width(kv_dtype)
        if width == self.kv_bytes or self.phase != "decode":
            return self
        other = self.other
        if other is None:
            family, mla = self.family, mla_kernel_fits(call)
            same_fill = self.forced or split_fill(family, mla, width) == split_fill(family, mla, self.kv_bytes)
            same_tiles = mla or paged_d_tiles(family, self.variant.which, self.bd, self.bdv, None, width) == (
                self.static["CHUNK_D"],
                self.static["CHUNK_DV"],
            )
            if same_fill and same_tiles:
                other = self
            else:
                splits = self.num_splits if self.forced else None
                other = LaunchConfig(step, call, splits, tensor_descriptors=self.tensor_descriptors, kv_bytes=width)
                other.layers = self.layers
            self.other = other
        return other
