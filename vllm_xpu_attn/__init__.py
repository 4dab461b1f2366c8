"""vllm-xpu-attn: one paged-attention backend (Intel XPU first) for vLLM and SGLang.

Layers: ``core`` (engine-neutral planning and per-layer run), ``kernels`` (providers:
vendor XPU libraries, Triton, pure-torch reference), and the adapters ``vllm_xpu_attn.vllm``
and ``sglang_compat``. Importing this package imports torch only.
"""

__version__ = "0.1.0"
