"""Shared helpers of the Intel XPU library wrappers: lazy imports, FP8 scales, capability probes."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Callable, Optional

import torch

from ...api import FP8_DTYPES, KernelProvider, PagedLaunch, PagedStep


def try_import(module: str) -> tuple[Optional[object], Optional[str]]:
    """(module, None) or (None, why it is unavailable)."""
    try:
        return importlib.import_module(module), None
    except Exception as e:  # ImportError, or a library that fails to load its native part
        first = str(e).splitlines()[0][:120] if str(e) else ""
        return None, f"{module} not importable ({type(e).__name__}: {first})"


def require(module: str):
    """The imported module, or RuntimeError saying why it is unavailable."""
    mod, why = try_import(module)
    if why:
        raise RuntimeError(why)
    return mod


def module_version(module: str) -> Optional[str]:
    """``module.__version__`` when the module imports, else None."""
    mod, _ = try_import(module)
    return getattr(mod, "__version__", None) if mod is not None else None


def dist_version(dist: str) -> Optional[str]:
    """The installed distribution's version string, or None."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def next_pow2(x: int) -> int:
    return 1 << (max(x, 1) - 1).bit_length()


_ONES: dict[torch.device, torch.Tensor] = {}


def unit_scale(device: torch.device) -> torch.Tensor:
    """A persistent float32 [1] holding 1.0 on ``device`` (its own one-element storage)."""
    t = _ONES.get(device)
    if t is None:
        t = _ONES[device] = torch.ones(1, dtype=torch.float32, device=device)
    return t


def per_tensor_scale(name: str, t: Optional[torch.Tensor], device: torch.device) -> torch.Tensor:
    """A per-tensor FP8 descale as float32 [1]; 1.0 when the caller gave none.

    Both vendors need both descales for an FP8 cache (sgl-kernel-xpu flash_attention.cpp:566-568,
    vllm-xpu-kernels "FP8 KV cache requires both k_scale and v_scale"), while our contract lets the
    caller omit them (= 1.0). Per-head descales have no vendor equivalent: refused.
    """
    if t is None:
        return unit_scale(device)
    if t.numel() != 1:
        raise ValueError(
            f"{name}: this vendor kernel takes a per-tensor FP8 scale, got shape {list(t.shape)}; "
            "use the triton or reference provider for per-head descales"
        )
    return t.reshape(1).float()


def own_storage(t: torch.Tensor) -> torch.Tensor:
    """``t`` if its storage holds exactly its one element, else a copy that does.

    vllm-xpu-kernels asserts ``descale.untyped_storage().nbytes() == descale.element_size()``
    (flash_attn_interface.py:158-159 of the 0.1.16.2 wheel): a view into a larger scales tensor fails.
    """
    if t.untyped_storage().nbytes() == t.element_size():
        return t
    return t.reshape(1).clone()


def fa3_window(window_size, causal: bool) -> tuple[int, int]:
    left, right = int(window_size[0]), int(window_size[1])
    return (left, 0 if causal and right != -1 else right)


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_DTYPES


class Probes:
    """Capabilities that depend on the installed vendor build, found by running it once.

    Each probe runs the vendor on a tiny input on ``device`` and compares it with the reference
    provider there; any difference or error means "unsupported", with the reason kept. Results are
    cached per process; a probe costs a few kernel launches and one synchronisation at start-up.
    """

    def __init__(self) -> None:
        self._results: dict[str, Optional[str]] = {}

    def why_not(self, name: str, run: Callable[[], Optional[str]]) -> Optional[str]:
        """None if the probe passes, else the reason (cached)."""
        if name not in self._results:
            try:
                self._results[name] = run()
            except Exception as e:  # the vendor refusing the probe's call is an answer too
                self._results[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        return self._results[name]

    def results(self) -> dict[str, Optional[str]]:
        return dict(self._results)


def compare(got: torch.Tensor, want: torch.Tensor, what: str, atol: float = 3e-2) -> Optional[str]:
    """None when ``got`` matches ``want`` (bf16-level tolerance), else a short description."""
    if got.shape != want.shape:
        return f"{what}: shape {list(got.shape)} != {list(want.shape)}"
    err = (got.float().cpu() - want.float().cpu()).abs()
    bad = ~(err <= atol * (1 + want.float().cpu().abs()))
    if bool(bad.any()):
        return f"{what}: differs from the reference (max |diff| {float(err.nan_to_num(1e30).max()):.3g})"
    return None


def tiny_paged_case(
    device,
    page_size: int,
    q_lens: list[int],
    k_lens: list[int],
    head_dim: int = 64,
    dtype=torch.bfloat16,
    hq: int = 2,
    hkv: int = 1,
    seed: int = 0,
):
    """A small paged layout for probes: (q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_q)."""
    g = torch.Generator().manual_seed(seed)
    pages = [-(-k // page_size) for k in k_lens]
    n_pages = sum(pages) + 1
    width = max(pages)
    table = torch.zeros(len(k_lens), width, dtype=torch.int32)
    perm = torch.randperm(n_pages, generator=g)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[used : used + n].to(torch.int32)
        used += n
    q = (torch.randn(sum(q_lens), hq, head_dim, generator=g) * 3).to(dtype)
    kc = torch.randn(n_pages, page_size, hkv, head_dim, generator=g).to(dtype)
    vc = torch.randn(n_pages, page_size, hkv, head_dim, generator=g).to(dtype)
    cu = torch.tensor([0] + list(torch.cumsum(torch.tensor(q_lens), 0)), dtype=torch.int32)
    lens = torch.tensor(k_lens, dtype=torch.int32)
    mv = lambda t: t.to(device)  # noqa: E731
    return mv(q), mv(kc), mv(vc), mv(table), mv(lens), mv(cu), max(q_lens)


def empty_result(q: torch.Tensor, out: torch.Tensor, lse: bool):
    """The contract's result for zero queries: out (and lse [Hq, 0] fp32)."""
    return (out, torch.empty(q.shape[1], 0, dtype=torch.float32, device=q.device)) if lse else out


def int32_contiguous(step: PagedStep) -> PagedStep:
    """The step's index tensors as int32 and contiguous, as the vendor kernels read them (row index x width;
    sgl-kernel-xpu mainloop.hpp:278, vllm-xpu-kernels flash_attn_interface). No-ops when they are."""
    return step.int32_rows()


class XpuLibProvider(KernelProvider):
    """The per-step part every vendor wrapper shares: index tensors made int32 and contiguous once per step."""

    def _launch(self, step: PagedStep, call, **options) -> PagedLaunch:
        if options:
            raise TypeError(f"provider {self.name!r} takes no launch options, got {sorted(options)}")
        return PagedLaunch(self, int32_contiguous(step), call)
