"""Fake vllm_xpu_kernels package."""
