"""transformers' continuous batching adapter (``generate_batch``, ``transformers serve``): see backend.py."""

from .backend import NAME, register

__all__ = ["NAME", "register"]
