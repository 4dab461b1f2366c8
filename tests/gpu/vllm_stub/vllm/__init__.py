"""Stand-in for vLLM 0.32.0 (tests/gpu/vllm_stub): just enough of its Python API for
``import vllm_xpu_attn.vllm.backend`` without the real package. See README.md there."""

__version__ = "0.32.0+stub"
__version_tuple__ = (0, 32, 0, "stub")
IS_VLLM_STUB = True
