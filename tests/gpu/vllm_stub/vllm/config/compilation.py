"""Stand-in for vllm.config.compilation: CUDAGraphMode (verbatim, see _cudagraph_mode.py) and a
plain CompilationConfig with the fields attention builders read."""

from __future__ import annotations

import dataclasses
from typing import Optional

from ._cudagraph_mode import CUDAGraphMode

__all__ = ["CUDAGraphMode", "CompilationConfig"]


@dataclasses.dataclass
class CompilationConfig:
    cudagraph_mode: CUDAGraphMode = CUDAGraphMode.FULL_AND_PIECEWISE  # 0.32's default (config/vllm.py:303)
    cudagraph_capture_sizes: list[int] = dataclasses.field(
        default_factory=lambda: [1, 2, 4] + list(range(8, 257, 8)))
    max_cudagraph_capture_size: Optional[int] = None

    def __post_init__(self) -> None:
        if self.max_cudagraph_capture_size is None and self.cudagraph_capture_sizes:
            self.max_cudagraph_capture_size = max(self.cudagraph_capture_sizes)
