"""The kernel call contract shared by every provider, and its input checks.

The contract is FlashAttention-3's ``flash_attn_with_kvcache`` with a paged KV cache. One check path,
in three parts, each run once where its inputs are fixed: ``check_paged_step`` per step (the step's
index tensors), ``LayerTensors.make`` per layer (sinks, ALiBi slopes, FP8 descales: bound once), and
``check_paged_layer`` per distinct layer signature (q, caches, out). Checks come in two tiers:

* structural checks (shapes, dtypes, devices): free, run by every provider;
* value checks (cu_seqlens monotone, page table long enough, page ids in range):
  need the values on the host, so only the reference provider (the oracle) and
  callers that ask for them (``check_values=True``) run them.  Fast providers skip them
  on the decode path because they would force a device-to-host synchronisation.
"""

from __future__ import annotations

import math
import threading
from typing import TYPE_CHECKING, Optional, Sequence

import torch

from .dtypes import FLOAT_DTYPES, INDEX_DTYPES, KV_DTYPES, is_fp8

if TYPE_CHECKING:
    from .types import LayerConsts, PagedStep


def _fail(cls: type, msg: str) -> None:
    raise cls(msg)


# Larger scales overflow fp32 logits for ordinary activations (|q.k| ~ 1e34 is already inf at 1e4 x
# 1e34); no model uses a scale above a few units. A documented bound gives an error instead of NaN/zeros.
MAX_SOFTMAX_SCALE = 1e4


def check_scale(scale) -> float:
    """softmax_scale: a finite number in (0, MAX_SOFTMAX_SCALE]. The kernels take a row's max before
    scaling, which needs scale > 0."""
    try:
        s = float(scale)
    except (TypeError, ValueError):
        _fail(TypeError, f"softmax_scale must be a number, got {type(scale).__name__}")
    if not (0.0 < s <= MAX_SOFTMAX_SCALE):
        _fail(ValueError, f"softmax_scale must be a finite number in (0, {MAX_SOFTMAX_SCALE:g}], got {scale}")
    return s


def check_softcap(softcap) -> float:
    """softcap: 0 (off) or a finite number > 0 (tanh capping at +-softcap)."""
    try:
        c = float(softcap)
    except (TypeError, ValueError):
        _fail(TypeError, f"softcap must be a number, got {type(softcap).__name__}")
    if not (0.0 <= c < math.inf):
        _fail(ValueError, f"softcap must be 0 (off) or a finite number > 0, got {softcap}")
    return c


def check_count(name: str, value) -> int:
    """A count (heads, a page's slots): an int >= 1, named as the caller's argument is."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(ValueError, f"{name} must be an int >= 1, got {value!r}")
    return value


def check_heads(num_q_heads, num_kv_heads) -> None:
    """Head counts: ints >= 1, num_q_heads a multiple of num_kv_heads (GQA/MQA)."""
    check_count("num_q_heads", num_q_heads)
    check_count("num_kv_heads", num_kv_heads)
    if num_q_heads % num_kv_heads:
        _fail(
            ValueError,
            f"num_q_heads ({num_q_heads}) must be a positive multiple of num_kv_heads ({num_kv_heads}) for GQA/MQA",
        )


def check_dims(head_dim, v_head_dim=None) -> None:
    """head_dim an int >= 1; v_head_dim None (= head_dim) or an int >= 1 (0 is not a synonym for None)."""
    for name, v in (("head_dim", head_dim), ("v_head_dim", v_head_dim)):
        if v is None and name == "v_head_dim":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            _fail(
                ValueError,
                f"{name} must be an int >= 1{' or None (= head_dim)' if name == 'v_head_dim' else ''}, got {v!r}",
            )


def check_window(window_size: Sequence[int], causal: bool) -> tuple[int, int]:
    """Validate a FlashAttention window ``(left, right)``; -1 means unbounded."""
    if len(window_size) != 2:
        _fail(ValueError, f"window_size must be a (left, right) pair, got {tuple(window_size)!r}")
    left, right = int(window_size[0]), int(window_size[1])
    if left < -1 or right < -1:
        _fail(ValueError, f"window_size entries must be >= -1 (-1 = unbounded), got ({left}, {right})")
    if causal and right > 0:
        _fail(
            ValueError,
            f"window_size right={right} with causal=True is contradictory: a causal mask already "
            "hides every key to the right; pass right=0 or -1, or causal=False",
        )
    return left, right


def check_per_head(name: str, t: Optional[torch.Tensor], num_heads: int, device: torch.device) -> None:
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        _fail(TypeError, f"{name} must be a torch.Tensor of shape [{num_heads}], got {type(t).__name__}")
    if t.shape != (num_heads,):
        _fail(ValueError, f"{name} must have shape [num_q_heads]=[{num_heads}], got {list(t.shape)}")
    if not t.is_floating_point():
        _fail(TypeError, f"{name} must be a floating tensor, got {t.dtype}")
    if not same_device(t.device, device):
        _fail(ValueError, f"{name} is on {t.device} but q is on {device}")


def check_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    *,
    window_size: Sequence[int],
    causal: bool,
    sinks: Optional[torch.Tensor],
    alibi_slopes: Optional[torch.Tensor],
) -> tuple[list[int], list[int]]:
    """Non-paged varlen arguments: q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv] (one float
    dtype), cu_seqlens_q/k int [B+1]. Returns the two offset lists, read on the host (the varlen path's
    callers plan on the host anyway)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if not isinstance(t, torch.Tensor):
            _fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        _fail(
            ValueError, f"q/k/v must be 3-D [tokens, heads, dim], got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    if q.dtype not in FLOAT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        _fail(
            TypeError, f"q/k/v dtypes must match and be float32/float16/bfloat16, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if q.shape[-1] != k.shape[-1]:
        _fail(ValueError, f"head_dim of q ({q.shape[-1]}) differs from head_dim of k ({k.shape[-1]})")
    if k.shape[:2] != v.shape[:2] or q.shape[1] % k.shape[1]:
        _fail(
            ValueError,
            f"k/v token/head counts must match and Hq must be a multiple of Hkv: {list(k.shape)}, "
            f"{list(v.shape)}, Hq={q.shape[1]}",
        )
    check_window(window_size, causal)
    check_per_head("sinks", sinks, q.shape[1], q.device)
    check_per_head("alibi_slopes", alibi_slopes, q.shape[1], q.device)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    if len(cq) != len(ck):
        _fail(ValueError, f"cu_seqlens_q has {len(cq)} entries but cu_seqlens_k has {len(ck)}")
    for name, cu, total in (("cu_seqlens_q", cq, q.shape[0]), ("cu_seqlens_k", ck, k.shape[0])):
        if cu[0] != 0 or any(b < a for a, b in zip(cu[:-1], cu[1:])) or cu[-1] != total:
            _fail(ValueError, f"{name} must start at 0, be non-decreasing and end at {total}, got {cu}")
    return cq, ck


def same_device(a: torch.device, b: torch.device) -> bool:
    """One device, where an index left out (``cuda``) matches any index of that type."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def check_descale(name: str, t: Optional[torch.Tensor], batch: int, num_kv_heads: int) -> None:
    """FP8 descales: a scalar, [1], or FA3's [batch, num_kv_heads], float32."""
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        _fail(TypeError, f"{name} must be a float32 tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        _fail(TypeError, f"{name} must be float32, got {t.dtype}")
    if t.numel() != 1 and tuple(t.shape) != (batch, num_kv_heads):
        _fail(
            ValueError,
            f"{name} must be a scalar, [1] or [batch, num_kv_heads]=[{batch}, {num_kv_heads}], got {list(t.shape)}",
        )


def check_write_kv(name: str, new: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """One of write_kv's k/v: new [T, Hkv, D] against cache [P, page, Hkv, D], slot_mapping [T];
    the dtypes must match unless the cache is FP8 (then the write quantises)."""
    if new.dim() != 3 or tuple(new.shape[1:]) != tuple(cache.shape[2:]):
        _fail(
            ValueError,
            f"{name} must be [tokens, {cache.shape[2]}, {cache.shape[3]}] to match the cache, got {list(new.shape)}",
        )
    if slot_mapping.shape != (new.shape[0],):
        _fail(ValueError, f"slot_mapping must be [{new.shape[0]}] (one slot per token), got {list(slot_mapping.shape)}")
    if not is_fp8(cache.dtype) and new.dtype != cache.dtype:
        _fail(TypeError, f"{name} dtype {new.dtype} does not match KV cache dtype {cache.dtype}")


def check_write_kv_all(
    k: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    k_cache: torch.Tensor,
    v_cache: Optional[torch.Tensor],
    slot_mapping: torch.Tensor,
) -> None:
    """Everything ``write_kv`` can check without reading values, for K and V both, before either is written
    (a failed check never leaves a half-written cache). v / v_cache None: an MLA latent write.

    The layers of a step mostly repeat one signature (what these checks read: types, shapes, dtypes, devices and
    the last strides): a call with the signature of this thread's last passing call is one tuple compare (~2 us a
    layer instead of ~5)."""
    sig = _write_sig(k, v, k_cache, v_cache, slot_mapping)
    if sig is not None and sig == getattr(_WRITE_SIG, "last", None):
        return
    if not isinstance(slot_mapping, torch.Tensor) or slot_mapping.dtype not in INDEX_DTYPES or slot_mapping.dim() != 1:
        _fail(
            TypeError,
            "slot_mapping must be an int32/int64 tensor [tokens], got "
            f"{getattr(slot_mapping, 'dtype', type(slot_mapping).__name__)} "
            f"{list(getattr(slot_mapping, 'shape', []))}",
        )
    for name, new, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if new is None and cache is None:
            continue
        if not isinstance(new, torch.Tensor) or not isinstance(cache, torch.Tensor):
            _fail(TypeError, f"{name} and {name}_cache must both be tensors (or both None for v in a latent write)")
        if cache.dim() != 4:
            _fail(
                ValueError,
                f"{name}_cache must be [num_pages, page_size, num_kv_heads, head_dim], got {list(cache.shape)}",
            )
        check_write_kv(name, new, cache, slot_mapping)
        if new.device != cache.device or slot_mapping.device != cache.device:
            _fail(
                ValueError,
                f"{name} ({new.device}), {name}_cache ({cache.device}) and slot_mapping "
                f"({slot_mapping.device}) must share a device",
            )
        if new.stride(-1) != 1 or cache.stride(-1) != 1:
            _fail(ValueError, f"write_kv: the head_dim dimension of {name} and {name}_cache must be contiguous")
    if v_cache is not None and k_cache.shape[:2] != v_cache.shape[:2]:
        _fail(ValueError, f"v_cache {list(v_cache.shape)} and k_cache {list(k_cache.shape)} differ in pages/page size")
    _WRITE_SIG.last = sig


# this thread's last signature that passed check_write_kv_all (None: not memoised)
_WRITE_SIG = threading.local()


def _write_sig(k, v, k_cache, v_cache, slot_mapping) -> Optional[tuple]:
    """Everything check_write_kv_all reads, for plain tensors (anything else: None, checked in full)."""
    t = torch.Tensor
    if not (type(k) is t and type(v) is t and type(k_cache) is t and type(v_cache) is t and type(slot_mapping) is t):
        return None
    try:
        return _sig_of(k, v, k_cache, v_cache, slot_mapping)
    except (IndexError, RuntimeError):  # a 0-d tensor has no last stride: the full checks name what is wrong
        return None


def _sig_of(k, v, k_cache, v_cache, slot_mapping) -> tuple:
    return (
        slot_mapping.dtype,
        slot_mapping.shape,
        slot_mapping.device,
        k.shape,
        k.dtype,
        k.device,
        k.stride(-1),
        v.shape,
        v.dtype,
        v.device,
        v.stride(-1),
        k_cache.shape,
        k_cache.dtype,
        k_cache.device,
        k_cache.stride(-1),
        v_cache.shape,
        v_cache.dtype,
        v_cache.device,
        v_cache.stride(-1),
    )


def check_write_kv_slots(slot_mapping: torch.Tensor, num_slots: int) -> None:
    """Host-side value check of the slots (synchronising: the reference, CPU tensors): < 0 = skip, else
    below num_slots."""
    if slot_mapping.numel() and int(slot_mapping.max()) >= num_slots:
        bad = int(torch.nonzero(slot_mapping >= num_slots)[0, 0])
        _fail(
            ValueError,
            f"slot_mapping[{bad}]={int(slot_mapping[bad])} is outside the KV cache's {num_slots} slots "
            "(num_pages x page_size)",
        )


def check_paged_step(step: PagedStep) -> None:
    """The step tensors, once per step: index dtypes, shapes, one device. No host sync."""
    for name in ("page_table", "cache_seqlens", "cu_seqlens_q"):
        t = getattr(step, name)
        if not isinstance(t, torch.Tensor):
            _fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in INDEX_DTYPES:
            _fail(TypeError, f"{name} must be int32 (or int64), got {t.dtype}")
        if t.device != step.cache_seqlens.device:
            _fail(ValueError, f"{name} is on {t.device} but cache_seqlens is on {step.cache_seqlens.device}")
        if t.dim() >= 1 and t.shape[-1] > 1 and t.stride(-1) != 1:  # kernels index rows with unit stride
            _fail(ValueError, f"{name} must have a contiguous last dimension, got strides {list(t.stride())}")
    if step.page_table.dim() != 2:
        _fail(ValueError, f"page_table must be [batch, max_pages], got shape {list(step.page_table.shape)}")
    batch = step.page_table.shape[0]
    if step.cache_seqlens.shape != (batch,):
        _fail(
            ValueError,
            f"cache_seqlens must be [batch]=[{batch}] (page_table rows), got {list(step.cache_seqlens.shape)}",
        )
    if step.cu_seqlens_q.shape != (batch + 1,):
        _fail(ValueError, f"cu_seqlens_q must be [batch + 1]=[{batch + 1}], got {list(step.cu_seqlens_q.shape)}")
    if int(step.max_seqlen_q) < 0:
        _fail(ValueError, f"max_seqlen_q must be >= 0, got {step.max_seqlen_q}")
    if step.page_size < 1:
        _fail(ValueError, f"page size must be >= 1, got {step.page_size}")


def check_paged_layer(
    step: PagedStep,
    call: LayerConsts,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: Optional[torch.Tensor],
) -> None:
    """One layer's tensors against its step and call (O(1); callers run it once per distinct signature).
    ``out`` None: the caller allocates it after this check."""
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)) + (
        (("out", out),) if out is not None else ()
    ):
        if not isinstance(t, torch.Tensor):
            _fail(TypeError, f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 3:
        _fail(ValueError, f"q must be [total_q, num_q_heads, head_dim], got shape {list(q.shape)}")
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        _fail(
            ValueError,
            "k_cache/v_cache must be [num_pages, page_size, num_kv_heads, head_dim] (NHD pages), got "
            f"{list(k_cache.shape)} and {list(v_cache.shape)}",
        )
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("out", out)):
        if t is not None and t.shape[-1] > 1 and t.stride(-1) != 1:  # FlashAttention's rule; kernels load rows
            _fail(
                ValueError, f"{name} must have a contiguous last (head_dim) dimension, got strides {list(t.stride())}"
            )
    if q.dtype not in FLOAT_DTYPES:
        _fail(TypeError, f"q dtype {q.dtype} unsupported: use one of float32, float16, bfloat16")
    if k_cache.dtype != v_cache.dtype:
        _fail(TypeError, f"k_cache dtype {k_cache.dtype} != v_cache dtype {v_cache.dtype}")
    if k_cache.dtype not in KV_DTYPES:
        _fail(TypeError, f"KV cache dtype {k_cache.dtype} unsupported: use q's dtype or float8_e4m3fn/float8_e5m2")
    if not is_fp8(k_cache.dtype) and k_cache.dtype != q.dtype:
        _fail(TypeError, f"q dtype {q.dtype} and KV cache dtype {k_cache.dtype} differ (only FP8 caches may differ)")
    if q.shape[1] != call.num_q_heads:
        _fail(ValueError, f"q has {q.shape[1]} heads but the layer has num_q_heads={call.num_q_heads}")
    if q.shape[2] != call.head_dim:
        _fail(ValueError, f"head_dim of q ({q.shape[2]}) differs from the layer's head_dim ({call.head_dim})")
    if v_cache.shape[:3] != k_cache.shape[:3]:
        _fail(
            ValueError,
            f"v_cache shape {list(v_cache.shape)} does not match k_cache {list(k_cache.shape)} in "
            "pages/page size/heads",
        )
    if k_cache.shape[1] != step.page_size:
        _fail(ValueError, f"k_cache pages hold {k_cache.shape[1]} slots but the step's page_size is {step.page_size}")
    if k_cache.shape[2] != call.num_kv_heads:
        _fail(ValueError, f"k_cache has {k_cache.shape[2]} KV heads but the layer has num_kv_heads={call.num_kv_heads}")
    if k_cache.shape[3] != call.head_dim:
        _fail(ValueError, f"head_dim of q ({call.head_dim}) differs from head_dim of k_cache ({k_cache.shape[3]})")
    if v_cache.shape[3] != call.v_head_dim:
        _fail(ValueError, f"v_cache head dim {v_cache.shape[3]} differs from the layer's v_head_dim {call.v_head_dim}")
    if not (
        same_device(q.device, step.cache_seqlens.device) and k_cache.device == q.device and v_cache.device == q.device
    ):
        _fail(
            ValueError,
            f"q ({q.device}), k/v caches ({k_cache.device}, {v_cache.device}) and the step's "
            f"tensors ({step.cache_seqlens.device}) must share a device",
        )
    if out is not None and out.device != q.device:
        _fail(ValueError, f"out is on {out.device} but q is on {q.device}")
    if out is not None and (out.shape != (q.shape[0], call.num_q_heads, call.v_head_dim) or out.dtype != q.dtype):
        _fail(
            ValueError,
            f"out must be [{q.shape[0]}, {call.num_q_heads}, {call.v_head_dim}] {q.dtype}, "
            f"got {list(out.shape)} {out.dtype}",
        )


def check_paged_values(
    page_table: torch.Tensor,
    cache_seqlens: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    max_seqlen_q: int,
    total_q: int,
    page_size: int,
    num_pages: int,
) -> None:
    """Host-side value checks (synchronising). Used by the reference and in debug mode.

    A row with more queries than keys is legal (FlashAttention's convention): its first queries see no
    key and get out = 0, LSE = -inf (the sink's logit with sinks); decode padding rows are (1 query, 0 keys).
    """
    cu = cu_seqlens_q.tolist()
    lens = cache_seqlens.tolist()
    if cu and cu[0] != 0:
        _fail(ValueError, f"cu_seqlens_q must start at 0, got {cu[0]}")
    q_lens = [b - a for a, b in zip(cu[:-1], cu[1:])]
    if any(n < 0 for n in q_lens):
        _fail(ValueError, f"cu_seqlens_q must be non-decreasing, got {cu}")
    if cu and cu[-1] > total_q:  # rows after cu[-1] are padding (graph replays): left alone
        _fail(ValueError, f"cu_seqlens_q[-1]={cu[-1]} but q has only {total_q} tokens")
    if q_lens and max(q_lens) > int(max_seqlen_q):
        _fail(ValueError, f"max_seqlen_q={max_seqlen_q} is smaller than the longest query ({max(q_lens)})")
    if any(n < 0 for n in lens):
        b = next(b for b, n in enumerate(lens) if n < 0)
        _fail(ValueError, f"cache_seqlens must be >= 0 (keys per sequence), got cache_seqlens[{b}]={lens[b]}")
    max_pages = page_table.shape[1]
    for b, kl in enumerate(lens):
        need = -(-kl // page_size)
        if need > max_pages:
            _fail(
                ValueError,
                f"page_table too short: sequence {b} has {kl} keys = {need} pages of {page_size}, "
                f"table has {max_pages} columns",
            )
        if need:
            used = page_table[b, :need]
            lo, hi = int(used.min()), int(used.max())
            if lo < 0 or hi >= num_pages:
                _fail(
                    ValueError, f"page_table row {b} references page {lo if lo < 0 else hi}, outside [0, {num_pages})"
                )
