"""transformers' continuous batching adapter (``generate_batch``, ``transformers serve``): see backend.py."""

from .backend import NAME, register
from .compat import cb_config

__all__ = ["NAME", "cb_config", "register"]
