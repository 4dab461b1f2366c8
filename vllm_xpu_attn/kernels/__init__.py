"""Kernel providers. Imports torch only; optional libraries load inside their providers."""

from .base import KernelProvider, KernelRequest
from .registry import (
    ENV_OVERRIDE,
    PRIORITY,
    NoProviderError,
    default_page_size,
    explain,
    get_provider,
    provider_names,
    register_provider,
    select_provider,
    unregister_provider,
)

__all__ = [
    "ENV_OVERRIDE", "PRIORITY", "KernelProvider", "KernelRequest", "NoProviderError", "default_page_size", "explain",
    "get_provider", "provider_names", "register_provider", "select_provider", "unregister_provider",
]
