"""Strict fake of Intel Extension for PyTorch 2.8.10+xpu (only what the ipex provider uses)."""
from . import llm  # noqa: F401
from . import _C  # noqa: F401

__version__ = "2.8.10+xpu"  # docker/build.sh:17 (IPEX_VERSION=2.8.10+xpu), setup.py:413


def has_xpu() -> bool:  # utils/utils.py:9-10 -> core._has_xpu()
    return _C._has_xpu()
