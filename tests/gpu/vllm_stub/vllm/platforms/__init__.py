"""Stand-in for vllm.platforms: ``current_platform`` for the device torch sees (no plugins)."""

from __future__ import annotations

import torch


class _Platform:
    def __init__(self) -> None:
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            self.device_type, self.device_name = "xpu", "xpu"
        elif torch.cuda.is_available():
            self.device_type, self.device_name = "cuda", "cuda"
        else:
            self.device_type, self.device_name = "cpu", "cpu"

    def is_cuda(self) -> bool:
        return self.device_type == "cuda"

    def is_cuda_alike(self) -> bool:
        return self.device_type == "cuda"

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return self.device_type == "xpu"

    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    def is_device_capability(self, capability) -> bool:
        return self.is_cuda() and tuple(torch.cuda.get_device_capability()) == tuple(capability)

    def get_device_capability(self, device_id: int = 0):
        return torch.cuda.get_device_capability(device_id) if self.is_cuda() else None

    def fp8_dtype(self) -> torch.dtype:
        return torch.float8_e4m3fn

    def __repr__(self) -> str:
        return f"<vllm stub platform {self.device_type}>"


current_platform = _Platform()
