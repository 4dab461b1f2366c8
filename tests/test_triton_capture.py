"""The Triton provider asks "inside a graph capture?" through kernels.api.guard.capturing (CUDA and XPU), not
CUDA's query alone: a host-made FP8 scale constant first needed while capturing is refused on either device."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
from vllm_xpu_attn.kernels.providers.triton import provider as P  # noqa: E402


def test_const_scale_refused_while_capturing(monkeypatch):
    asked = []

    def capturing(device):
        asked.append(device)
        return True

    monkeypatch.setattr(P, "capturing", capturing)
    prov = P.TritonProvider()
    with pytest.raises(RuntimeError, match="graph capture"):
        prov._const_scale(torch.device("cpu"), 2.0)
    assert asked == [torch.device("cpu")]
    monkeypatch.setattr(P, "capturing", lambda device: False)
    t = prov._const_scale(torch.device("cpu"), 2.0)
    assert t.tolist() == [2.0] and prov._const_scale(torch.device("cpu"), 2.0) is t  # made once, then kept
