"""Stand-in for vLLM (tests/gpu/vllm_stub): just enough of its Python API for
``import vllm_xpu_attn.vllm.backend`` without the real package. See README.md there."""

from ._release import RELEASE  # the release regen.py copied the verbatim parts from

__version__ = f"{RELEASE}+stub"
__version_tuple__ = (*map(int, RELEASE.split(".")[:3]), "stub")
IS_VLLM_STUB = True
