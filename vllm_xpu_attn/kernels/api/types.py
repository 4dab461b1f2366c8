"""The engine-neutral vocabulary of the kernel layer, one type per concept from core to kernel.

``PagedStep``: one paged call's step tensors and bounds, shared by every layer of a step.
``LayerConsts``: a layer's non-tensor constants (heads, dims, scale, mask, flags), fixed at set-up.
``LayerTensors``: a layer's bound tensors (sinks, ALiBi slopes, FP8 descales), validated once.
``KernelRequest``: a layer configuration plus its phase, what a provider must be able to run.
``Phase`` and ``Feature``: the words providers declare their support in.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Optional, Sequence

import torch

from .checks import (
    _fail,
    check_descale,
    check_dims,
    check_heads,
    check_per_head,
    check_scale,
    check_softcap,
    check_window,
    same_device,
)
from .dtypes import dtype_name, is_fp8


@dataclasses.dataclass
class PagedStep:
    """The step tensors of one paged call, shared by every layer of the step (one name from core to kernel).

    cu_seqlens_q int32 [B+1], cache_seqlens int32 [B] (prefix + new keys), page_table int32
    [B, max_pages] of page ids; max_seqlen_q/k are host ints (upper bounds are fine).
    """

    cu_seqlens_q: torch.Tensor
    cache_seqlens: torch.Tensor
    page_table: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int
    page_size: int

    @property
    def batch_size(self) -> int:
        return int(self.cache_seqlens.shape[0])

    def int32_rows(self) -> "PagedStep":
        """The index tensors int32 and contiguous, as compiled vendor kernels read them (row index x width); the
        same step when they already are."""

        def fix(t: torch.Tensor) -> torch.Tensor:
            return t if t.dtype == torch.int32 and t.is_contiguous() else t.to(torch.int32).contiguous()

        if all(
            t.dtype == torch.int32 and t.is_contiguous()
            for t in (self.cu_seqlens_q, self.cache_seqlens, self.page_table)
        ):
            return self
        return dataclasses.replace(
            self,
            cu_seqlens_q=fix(self.cu_seqlens_q),
            cache_seqlens=fix(self.cache_seqlens),
            page_table=fix(self.page_table),
        )


@dataclasses.dataclass(frozen=True)
class LayerConsts:
    """The non-tensor part of a paged call that is the same for every step of a layer.

    Shapes: q [*, num_q_heads, head_dim], caches [*, page, num_kv_heads, head_dim / v_head_dim].
    ``window`` is FlashAttention's (left, right), validated; ``softcap`` 0 = off.
    """

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    softmax_scale: float
    causal: bool = True
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0
    return_lse: bool = False
    batch_invariant: bool = False
    mla: bool = False  # latent attention: V is the first v_head_dim columns of K (one cache)

    @staticmethod
    def make(
        num_q_heads: int,
        num_kv_heads: int,
        head_dim: int,
        v_head_dim: Optional[int] = None,
        *,
        softmax_scale: Optional[float] = None,
        causal: bool = True,
        window: Sequence[int] = (-1, -1),
        softcap: float = 0.0,
        return_lse: bool = False,
        batch_invariant: bool = False,
        mla: bool = False,
    ) -> "LayerConsts":
        """Validated constructor (defaults resolved: scale 1/sqrt(D), Dv = D)."""
        check_heads(num_q_heads, num_kv_heads)
        check_dims(head_dim, v_head_dim)
        softcap = check_softcap(softcap)
        scale = check_scale(softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim))
        return LayerConsts(
            num_q_heads,
            num_kv_heads,
            head_dim,
            v_head_dim or head_dim,
            scale,
            bool(causal),
            check_window(window, causal),
            softcap,
            bool(return_lse),
            bool(batch_invariant),
            bool(mla),
        )


_CALL_IDS: dict[LayerConsts, int] = {}


def call_id(call: LayerConsts) -> int:
    """A small int per distinct LayerConsts, memoised on the instance (a frozen dataclass rehashes its
    eleven fields on every hash; per-step and per-layer lookups key by this instead)."""
    cid = call.__dict__.get("_vxa_id")
    if cid is None:
        cid = _CALL_IDS.setdefault(call, len(_CALL_IDS))
        object.__setattr__(call, "_vxa_id", cid)
    return cid


@dataclasses.dataclass(frozen=True, eq=False)
class LayerTensors:
    """A layer's per-layer tensors, validated once when bound and passed to every ``run`` by reference.

    sinks [Hq] float (one extra logit per head), alibi_slopes [Hq] float, k_descale / v_descale float32
    scalar, [1] or FA3's [batch, Hkv] (FP8 caches only). ``key`` is what a compiled launch specialises on
    (presence, dtype, 16-byte alignment, per-head descale stride); ``tensors`` the present ones in the
    kernels' parameter order (sinks, alibi, k_descale, v_descale). Build with ``LayerTensors.make``.
    """

    sinks: Optional[torch.Tensor] = None
    alibi_slopes: Optional[torch.Tensor] = None
    k_descale: Optional[torch.Tensor] = None
    v_descale: Optional[torch.Tensor] = None
    key: tuple = (None, None, None, None)
    tensors: tuple = ()
    descale_batch: int = 0  # > 0: the batch a [batch, Hkv] descale was made for (checked against each step)

    @property
    def has_descale(self) -> bool:
        return self.k_descale is not None or self.v_descale is not None

    @staticmethod
    def make(
        call: "LayerConsts",
        *,
        device: torch.device,
        kv_dtype: torch.dtype,
        sinks: Optional[torch.Tensor] = None,
        alibi_slopes: Optional[torch.Tensor] = None,
        k_descale: Optional[torch.Tensor] = None,
        v_descale: Optional[torch.Tensor] = None,
        batch: Optional[int] = None,
    ) -> "LayerTensors":
        """Validate a layer's tensors against its call, device and cache dtype once (ValueError/TypeError
        naming the argument), and fix what the kernels specialise on. ``batch``: the one step a direct
        call runs (its [batch, Hkv] descales are checked against it here)."""
        device = torch.device(device)
        check_per_head("sinks", sinks, call.num_q_heads, device)
        check_per_head("alibi_slopes", alibi_slopes, call.num_q_heads, device)
        if (k_descale is not None or v_descale is not None) and not is_fp8(kv_dtype):
            _fail(ValueError, f"k_descale/v_descale given but the KV cache is {kv_dtype}, not FP8")
        rows = 0
        for name, t in (("k_descale", k_descale), ("v_descale", v_descale)):
            if t is None:
                continue
            check_descale(
                name, t, batch if batch is not None else (t.shape[0] if t.dim() == 2 else 1), call.num_kv_heads
            )
            if not same_device(t.device, device):
                _fail(ValueError, f"{name} is on {t.device} but q is on {device}")
            if t.numel() != 1:
                if rows and t.shape[0] != rows:
                    _fail(
                        ValueError,
                        f"k_descale and v_descale must have the same shape, got {list(k_descale.shape)} "
                        f"and {list(v_descale.shape)}",
                    )
                rows = t.shape[0]
        if (k_descale is None) != (v_descale is None) and rows:
            _fail(ValueError, "per-head descales ([batch, num_kv_heads]) need both k_descale and v_descale")

        def spec(t):
            if t is None:
                return None
            return (t.dtype, (t.data_ptr() & 15) == 0, t.numel() != 1, t.stride(0) if t.numel() != 1 else 0)

        four = (sinks, alibi_slopes, k_descale, v_descale)
        return LayerTensors(
            sinks,
            alibi_slopes,
            k_descale,
            v_descale,
            tuple(spec(t) for t in four),
            tuple(t for t in four if t is not None),
            rows,
        )

    def without_sinks(self) -> "LayerTensors":
        """The same layer's arguments with the sinks left out (the parts of a cascade: the merge adds them)."""
        if self.sinks is None:
            return self
        return dataclasses.replace(self, sinks=None, key=(None,) + self.key[1:], tensors=self.tensors[1:])


NO_LAYER_TENSORS = LayerTensors()


class Phase(str, enum.Enum):
    """Which calls of a layer a provider is chosen for (a str enum: compares equal to its value)."""

    PREFILL = "prefill"  # rows with several queries: prefill, extend, mixed, verify
    DECODE = "decode"  # one query per row
    ANY = "any"


class KVLayout(str, enum.Enum):
    """How a cache page is laid out in memory (a str enum). Every provider takes the caches as
    [num_pages, page_size, Hkv, D] tensors; the layout says which of those views' strides the engine's
    allocation gives, and so which kernels can read the pages in place.

    NHD: token-major pages, a token's heads side by side (FlashAttention's; the default).
    HND: head-major pages, each (page, KV head) one contiguous [page_size, D] block (vLLM's CPU layout).
    """

    NHD = "NHD"
    HND = "HND"

    @staticmethod
    def of(k_cache: torch.Tensor) -> "KVLayout":
        """The layout a [P, page, Hkv, D] cache view has: HND when a page's rows of one head are adjacent (row
        stride D) and the heads are not (with one KV head and page 1 the two coincide: NHD)."""
        d = k_cache.shape[3]
        return KVLayout.HND if k_cache.stride(1) == d and k_cache.stride(2) != d else KVLayout.NHD


class Feature(str, enum.Enum):
    """Optional capabilities a provider declares in ``features`` (str enum: "window" == Feature.WINDOW)."""

    WINDOW = "window"
    SOFTCAP = "softcap"
    SINKS = "sinks"
    ALIBI = "alibi"
    LSE = "lse"
    NON_CAUSAL = "non_causal"
    DV = "dv"  # v head dim != qk head dim
    BATCH_INVARIANT = "batch_invariant"
    MLA = "mla"  # latent attention: V is the first Dv columns of K, one cache (DeepSeek MLA, absorbed)


@dataclasses.dataclass(frozen=True)
class KernelRequest:
    """A layer configuration plus the phase, i.e. what a provider must be able to run.

    Built once per layer (and phase) by the core; providers only read it.
    """

    device_type: str  # "cpu" | "cuda" | "xpu"
    dtype: torch.dtype  # q / output dtype
    kv_dtype: torch.dtype  # cache dtype (== dtype, or fp8)
    head_dim: int
    num_q_heads: int
    num_kv_heads: int
    page_size: int
    v_head_dim: Optional[int] = None
    causal: bool = True
    window: tuple[int, int] = (-1, -1)
    softcap: float = 0.0  # the layer's logit softcap (0 = off), the same value the kernel gets
    has_sinks: bool = False
    has_alibi: bool = False
    return_lse: bool = False
    phase: Phase = Phase.ANY
    batch_invariant: bool = False  # bitwise the same output whatever else is in the batch / however chunked
    mla: bool = False  # MLA latent attention: one cache, V = K[..., :v_head_dim] (see core.MLADims)
    kv_layout: KVLayout = KVLayout.NHD  # how the engine allocates the cache pages

    @property
    def gqa_group(self) -> int:
        return self.num_q_heads // max(self.num_kv_heads, 1)

    @property
    def has_window(self) -> bool:
        return self.window[0] >= 0 or self.window[1] >= 0

    def describe(self) -> str:
        parts = [
            f"{self.device_type}",
            f"q={dtype_name(self.dtype)}",
            f"kv={dtype_name(self.kv_dtype)}",
            f"D={self.head_dim}",
            f"Hq/Hkv={self.num_q_heads}/{self.num_kv_heads}",
            f"page={self.page_size}",
            f"phase={Phase(self.phase).value}",
        ]
        if self.kv_layout != KVLayout.NHD:
            parts.append(f"layout={KVLayout(self.kv_layout).value}")
        if self.v_head_dim not in (None, self.head_dim):
            parts.append(f"Dv={self.v_head_dim}")
        if self.has_window:
            parts.append(f"window={self.window}")
        parts += [
            n
            for n, on in (
                ("softcap", self.softcap > 0),
                ("sinks", self.has_sinks),
                ("alibi", self.has_alibi),
                ("lse", self.return_lse),
                ("non-causal", not self.causal),
                ("batch-invariant", self.batch_invariant),
                ("mla", self.mla),
            )
            if on
        ]
        return " ".join(parts)
