"""transformers' continuous batching adapter (``generate_batch``): see backend.py."""

from .backend import NAME, register
from .compat import cb_config

__all__ = ["NAME", "cb_config", "register"]
