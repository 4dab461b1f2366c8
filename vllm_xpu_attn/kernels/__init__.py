"""Kernel providers. Imports torch only; optional libraries load inside their providers."""

from .base import ENV_BATCH_INVARIANT, Feature, KernelProvider, KernelRequest, PagedLaunch, Phase, batch_invariant_requested
from .contract import AttnPlan, PagedCall, fp8_descale
from .registry import (
    ENV_OVERRIDE,
    PRIORITY,
    NoProviderError,
    chosen_providers,
    reload_provider,
    default_page_size,
    explain,
    get_provider,
    provider_names,
    register_provider,
    select_provider,
    unregister_provider,
)

__all__ = [
    "AttnPlan", "ENV_BATCH_INVARIANT", "fp8_descale", "ENV_OVERRIDE", "Feature", "PagedCall", "PagedLaunch", "Phase", "batch_invariant_requested", "PRIORITY", "KernelProvider", "KernelRequest", "NoProviderError", "default_page_size", "explain",
    "chosen_providers", "get_provider", "provider_names", "reload_provider", "register_provider", "select_provider", "unregister_provider",
]
