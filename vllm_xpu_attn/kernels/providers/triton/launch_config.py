"""What a paged launch fixes for every step of one shape: tiles, split count, grid and constexprs.

``LaunchConfig(step, call, num_splits, tensor_descriptors=...)`` is built by the provider once per step shape
and kept across steps; ``TritonLaunch`` (step_launch.py) arms compiled launchers and per-layer closures in it.
"""

from __future__ import annotations

from typing import Optional

import torch

from ...api import PagedStep, LayerConsts
from .descriptors import step_takes_descriptors
from .tiles import (ALIBI_AS_DOT, TUNING, cdiv, compute_units, device_family, head_dim_phase, mla_latent_tiles,
                    paged_d_tiles, pow2, tile_config)


def mla_kernel_fits(call: LayerConsts) -> bool:
    """Absorbed MLA the dedicated kernel serves: one latent cache (Hkv 1), power-of-two latent and RoPE
    widths (512 + 64 for DeepSeek), causal, no window or softcap."""
    d_rope = call.head_dim - call.v_head_dim
    return (call.mla and call.num_kv_heads == 1 and call.causal and call.window == (-1, -1) and call.softcap == 0
            and call.v_head_dim >= 16 and pow2(call.v_head_dim, 1) == call.v_head_dim and d_rope >= 16
            and pow2(d_rope, 1) == d_rope)


def split_count(device: torch.device, batch: int, hkv: int, max_seqlen_q: int, max_keys: int) -> int:
    """Flash-decoding: split long contexts when batch x heads cannot fill the device. Host-only math."""
    if max_seqlen_q > 1 or max_keys < 1024:
        return 1
    if device.type in ("cuda", "xpu"):
        sms = compute_units(device.type, device.index)
    else:
        return 2 if max_keys >= 2048 else 1
    splits = 1
    while batch * hkv * splits < 2 * sms and splits < 32 and max_keys // (splits * 2) >= 512:
        splits *= 2
    return splits


class LaunchConfig:
    """What a paged launch fixes for every step of one shape: tiles, split count, grid, constexprs, and
    the compiled launchers and per-layer closures armed for it (kept across steps by the provider).

    ``grid``: (batch, row tiles, Hkv x splits x output-column programs (tiles.PAGED_D_TILES)), or (batch, head
    tiles, splits x latent column programs) for absorbed MLA (tiles.MLA_LATENT_TILES);
    ``static``: the kernel's constexprs fixed by the step; ``bd`` / ``bdv``: head-dim tile widths;
    ``desc``: prefill K/V by tensor descriptor (``tensor_descriptors`` forces it on/off, None: by device).
    """

    __slots__ = ("phase", "block_m", "block_n", "warps", "stages", "num_splits", "grid", "static", "bd", "bdv",
                 "group", "invariant", "fast", "mla_decode", "options", "hot", "desc")

    def __init__(self, step: PagedStep, call: LayerConsts, num_splits: Optional[int] = None, *,
                 tensor_descriptors: Optional[bool] = None):
        # the per-layer hot path: layer signature -> closures over every argument but q/k/v/out and the
        # step's addresses
        self.hot: dict[tuple, tuple] = {}
        device = step.cache_seqlens.device
        hkv, d, dv = call.num_kv_heads, call.head_dim, call.v_head_dim
        self.group = group = call.num_q_heads // hkv
        batch = step.page_table.shape[0]
        max_q = int(step.max_seqlen_q)
        self.invariant = invariant = call.batch_invariant
        self.phase = phase = "decode" if max_q <= 1 and not invariant else "prefill"
        # batch-invariant mode: no split-K (each row's keys reduced in one fixed order)
        if invariant and num_splits not in (None, 1):
            raise ValueError(f"batch-invariant mode runs without split-K; got num_splits={num_splits}")
        if num_splits is not None and (num_splits < 1 or num_splits & (num_splits - 1)):
            raise ValueError(f"num_splits must be a power of two >= 1 (the merge reduces them as one block), "
                             f"got {num_splits}")
        family = device_family(device)
        max_keys = step.page_table.shape[1] * step.page_size
        # a layer's cache strides are checked per layer (descriptors.desc_layer_ok)
        self.desc = step_takes_descriptors(
            tensor_descriptors, device, family, prefill=phase == "prefill", invariant=invariant, mla=call.mla,
            page_size=step.page_size, head_dim=d, v_head_dim=dv, batch=batch, rows_per_seq=max(max_q, 1) * group,
            kv_heads=hkv)
        which = phase if self.desc or "prefill_ptr" not in TUNING[family] or phase != "prefill" else "prefill_ptr"
        block_m, self.block_n, self.warps, self.stages, self.options = tile_config(
            family, head_dim_phase(family, which, d))
        self.block_m = block_m = max(block_m, pow2(group)) if phase == "decode" else block_m
        # absorbed MLA: its own kernel (latent rows loaded once for scores and values) for every absorbed
        # step (decode, extend, verify); batch-invariant MLA runs the general kernel over the same views
        self.mla_decode = mla_kernel_fits(call) and not invariant
        if self.mla_decode:
            mla_phase = "mla_wide" if call.num_q_heads >= 64 else "mla_decode"
            block_m, self.block_n, self.warps, self.stages, self.options = tile_config(family, mla_phase)
            block_dc, block_dv = mla_latent_tiles(family, mla_phase, dv)
            self.block_m = block_m
            tiles = cdiv(max(max_q, 1) * call.num_q_heads, block_m)
            self.num_splits = num_splits or split_count(device, batch, tiles, max_q, max_keys)
            # axis 2: the key splits x the output-column programs (tiles.MLA_LATENT_TILES)
            self.grid = (batch, tiles, self.num_splits * (dv // block_dv))
            self.bd, self.bdv = d, dv
            self.static = dict(PAGE=step.page_size, D_C=dv, D_R=d - dv, BLOCK_H=block_m, BLOCK_N=self.block_n,
                               BLOCK_DC=block_dc, BLOCK_DV=block_dv, NUM_SPLITS=self.num_splits,
                               WRITE_LSE=call.return_lse)
            self.fast: dict[tuple, tuple] = {}
            return
        self.num_splits = 1 if invariant else num_splits or split_count(device, batch, hkv, max_q, max_keys)
        # aligned tiles (batch-invariant mode) may start up to block_m - 1 rows before the first query
        tiles = cdiv(max(max_q, 1) * group + (block_m - 1 if invariant else 0), block_m)
        self.bd, self.bdv = pow2(d), pow2(dv)
        chunk_d, chunk_dv = paged_d_tiles(family, which, self.bd, self.bdv)
        if self.desc and (chunk_d, chunk_dv) != (self.bd, self.bdv):
            raise ValueError(f"PAGED_D_TILES[{family!r}][{which}_d{self.bd}] chunks the head dim, which tensor "
                             "descriptors cannot load: give this family's chunked phases pointer loads")
        # axis 2: KV heads x key splits x output-column programs (tiles.PAGED_D_TILES)
        self.grid = (batch, tiles, hkv * self.num_splits * (self.bdv // chunk_dv))
        left, right = call.window
        self.static = dict(
            WIN_LEFT=left, WIN_RIGHT=right, PAGE=step.page_size, GROUP=group, D=d, DV=dv, BLOCK_D=self.bd,
            BLOCK_DV=self.bdv, CHUNK_D=chunk_d, CHUNK_DV=chunk_dv, BLOCK_M=block_m, BLOCK_N=self.block_n,
            NUM_SPLITS=self.num_splits, CAUSAL=call.causal,
            HAS_SOFTCAP=call.softcap > 0, ALIBI_DOT=ALIBI_AS_DOT.get(family, False), WRITE_LSE=call.return_lse,
            ALIGN_ROWS=invariant,
            # unmasked fully-visible key blocks in prefill only; decode and batch-invariant mode keep one masked
            # loop (invariant mode must not round a row differently by where its chunk's tile starts)
            SPLIT_MASK=phase == "prefill" and not invariant,
        )
        # compiled-kernel launchers, one per variant (tokens, sinks/ALiBi/FP8/dtype) the layers use: the
        # first call of a variant binds through Triton's JIT, the rest launch directly
        self.fast = {}
