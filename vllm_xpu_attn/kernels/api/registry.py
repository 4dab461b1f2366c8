"""Provider registry: priority per device, env override, one explanatory error, logged choice.

Nothing falls back silently: each choice is logged once with the reasons the providers
ahead of it were refused.
"""

from __future__ import annotations

import importlib
import logging
from typing import Callable, Optional

from ... import env
from .base import KernelProvider, KernelRequest

logger = logging.getLogger("vllm_xpu_attn")

ENV_OVERRIDE = env.KERNEL

# name -> "module:Class", imported lazily so that optional libraries stay optional.
_PROVIDER_PATHS: dict[str, str] = {
    "sgl_kernel": "vllm_xpu_attn.kernels.providers.xpu_libs.sgl_kernel:SglKernelProvider",
    "sgl_kernel_mla": "vllm_xpu_attn.kernels.providers.xpu_libs.sgl_kernel_mla:SglKernelMlaProvider",
    "vllm_xpu_kernels": "vllm_xpu_attn.kernels.providers.xpu_libs.vllm_xpu_kernels:VllmXpuKernelsProvider",
    "ipex": "vllm_xpu_attn.kernels.providers.xpu_libs.ipex:IpexProvider",
    "triton": "vllm_xpu_attn.kernels.providers.triton.provider:TritonProvider",
    "vllm_cpu": "vllm_xpu_attn.kernels.providers.vllm_cpu:VllmCpuProvider",
    "torch_sdpa": "vllm_xpu_attn.kernels.providers.cpu_sdpa:TorchSdpaProvider",
    "reference": "vllm_xpu_attn.kernels.providers.reference:ReferenceProvider",
}

# The order each device prefers: vendor libraries first where present. CPU: vLLM's own CPU kernels (vllm_cpu:
# where vLLM's CPU build is installed and the engine allocates head-major pages, i.e. in vLLM), then torch's fused
# flash-attention CPU kernel (torch_sdpa), then the reference for what they refuse (batch-invariant); triton on CPU
# runs only through its interpreter (tests), never by default. sgl_kernel (FA3 API) and sgl_kernel_mla (MLA decode)
# are two operators of one library, each refusing the other's layers, so their order between themselves does not
# matter.
PRIORITY: dict[str, list[str]] = {
    "xpu": ["sgl_kernel", "sgl_kernel_mla", "vllm_xpu_kernels", "ipex", "triton", "reference"],
    "cuda": ["triton", "reference"],  # sgl-kernel's wrappers here are for its XPU build (they declare xpu only)
    "cpu": ["vllm_cpu", "torch_sdpa", "reference"],
}

# Page size to use when the engine leaves it to the backend: one every provider of the device can
# serve. XPU: sgl-kernel-xpu's paged decode takes 64 or 128 only, vllm-xpu-kernels' paged path
# blocks of 64 (see the vendor wrappers); triton and reference take any. Elsewhere: the engine's own.
DEFAULT_PAGE_SIZE: dict[str, Optional[int]] = {"xpu": 64}


def default_page_size(device_type: str) -> Optional[int]:
    """The page size this backend asks for on ``device_type`` when the user chose none (None: the engine's)."""
    return DEFAULT_PAGE_SIZE.get(device_type)


_instances: dict[str, KernelProvider] = {}
_logged: set[tuple] = set()


class NoProviderError(ValueError):
    """No provider can serve a request; the message lists every provider's reasons."""


def provider_names() -> list[str]:
    return list(_PROVIDER_PATHS)


def register_provider(
    name: str, path_or_factory: str | Callable[[], KernelProvider], *, devices: Optional[dict[str, int]] = None
) -> None:
    """Add a provider (e.g. a test fake). ``devices`` maps device type -> position in its priority."""
    if callable(path_or_factory):
        _instances[name] = path_or_factory()
        _PROVIDER_PATHS[name] = f"<instance {name}>"
    else:
        _PROVIDER_PATHS[name] = path_or_factory
        _instances.pop(name, None)
    for dev, pos in (devices or {}).items():
        order = PRIORITY.setdefault(dev, [])
        if name in order:
            order.remove(name)
        order.insert(pos, name)


def unregister_provider(name: str) -> None:
    _PROVIDER_PATHS.pop(name, None)
    _instances.pop(name, None)
    for order in PRIORITY.values():
        if name in order:
            order.remove(name)


def chosen_providers() -> list[str]:
    """Names of the providers this process has selected so far (sorted), e.g. for a run's record."""
    return sorted({name for name, _ in _logged})


def reload_provider(name: str) -> None:
    """Forget the cached instance of ``name``: the next get_provider() builds it anew (after its
    library changed, or to reset its probes)."""
    if not _PROVIDER_PATHS.get(name, "").startswith("<instance"):
        _instances.pop(name, None)


def get_provider(name: str) -> KernelProvider:
    """The provider instance called ``name`` (it may still be unavailable: see unavailable_reason)."""
    if name in _instances:
        return _instances[name]
    if name not in _PROVIDER_PATHS:
        raise ValueError(f"unknown kernel provider {name!r}; known: {', '.join(_PROVIDER_PATHS)}")
    module, cls = _PROVIDER_PATHS[name].split(":")
    try:
        inst = getattr(importlib.import_module(module), cls)()
    except ImportError as e:  # the provider's own module needs something absent
        inst = _Missing(name, f"provider module {module} failed to import: {e}")
    _instances[name] = inst
    return inst


class _Missing(KernelProvider):
    def __init__(self, name: str, why: str):
        self.name = name  # type: ignore[misc]
        self._why = why

    def unavailable_reason(self) -> Optional[str]:
        return self._why

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        return [self._why]


def explain(req: KernelRequest) -> list[tuple[str, list[str]]]:
    """Every provider for req.device_type in priority order, with its refusal reasons ([] = fits)."""
    order = PRIORITY.get(req.device_type)
    if order is None:
        raise NoProviderError(f"device type {req.device_type!r} has no provider list; known: {sorted(PRIORITY)}")
    return [(n, get_provider(n).not_supported_reasons(req)) for n in order]


def select_provider(req: KernelRequest, override: Optional[str] = None) -> KernelProvider:
    """The first provider that can serve ``req`` (or the forced one), logged once.

    ``override`` (or $XPU_ATTN_KERNEL) forces a provider; if it cannot serve the
    request that is an error, not a silent fallback.
    """
    forced = override or env.text(env.KERNEL)
    if forced:
        prov = get_provider(forced)
        reasons = prov.not_supported_reasons(req)
        if reasons:
            raise NoProviderError(
                f"kernel provider {forced!r} was forced ({ENV_OVERRIDE}) but cannot serve [{req.describe()}]: "
                + "; ".join(reasons)
            )
        _log_once(prov.name, req, f"forced by {ENV_OVERRIDE}")
        return prov
    refused: list[str] = []
    for name, reasons in explain(req):
        if not reasons:
            why = (
                "first in priority for this device"
                if not refused
                else "preferred providers refused: " + " | ".join(refused)
            )
            _log_once(name, req, why)
            return get_provider(name)
        refused.append(f"{name}: {'; '.join(reasons)}")
    raise NoProviderError(f"no kernel provider can serve [{req.describe()}]:\n  " + "\n  ".join(refused))


def _log_once(name: str, req: KernelRequest, why: str) -> None:
    key = (name, req)
    if key in _logged:
        return
    _logged.add(key)
    logger.info("vllm_xpu_attn: kernel provider %r serves [%s] (%s)", name, req.describe(), why)
