"""Fake vllm_xpu_kernels package: W:vllm_xpu_kernels/__init__.py:1-3 has only this import (no __version__;
the version is the distribution's, vllm_xpu_kernels-0.1.16.2.dist-info beside this folder)."""
from .flash_attn_interface import flash_attn_varlen_func  # noqa: F401
