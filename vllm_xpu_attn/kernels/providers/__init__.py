"""Kernel providers, one module or package each: ``reference`` (the oracle served), ``cpu_sdpa`` (torch's fused
CPU kernel), ``triton`` (CUDA, XPU and the CPU interpreter), ``xpu_libs`` (Intel vendor libraries). Each imports
``kernels.api`` and nothing of another provider; the registry imports them lazily, by name."""
