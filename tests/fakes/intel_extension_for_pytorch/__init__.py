"""Fake intel_extension_for_pytorch: only llm.modules.PagedAttention."""
from . import llm  # noqa: F401
