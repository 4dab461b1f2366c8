"""Strict fake of sgl-kernel-xpu's ``sgl_kernel`` package: ``merge_state_v2``, ``__version__`` and the MLA
decode entry points ``flash_mla_decode`` / ``flash_mla_get_workspace_size`` (attention.py, common_ops.py).

Cites python/sgl_kernel/attention.py (``att:L``) and src/sycl/merge_states.cpp (``ms:L``) at main 9cf16bf9.
"""
import torch

from _common import check, record, reference
from sgl_kernel import common_ops  # noqa: F401  __init__.py:14: the native extension registers torch.ops.sgl_kernel
from sgl_kernel.attention import flash_mla_decode, flash_mla_get_workspace_size  # noqa: F401  __init__.py:16-22

__version__ = "0.1.8"  # python/sgl_kernel/version.py:1@9cf16bf9


def merge_state_v2(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None):
    # att:31-51: casts the LSEs to fp32, allocates outputs with empty_like
    s_a, s_b = s_a.to(torch.float32), s_b.to(torch.float32)  # att:39-40
    for name, t in (("v_a", v_a), ("s_a", s_a), ("v_b", v_b), ("s_b", s_b)):
        check(t.is_contiguous(), f"{name} must be contiguous", "ms:340-345 CHECK_INPUT")
    check(v_a.dim() == 3 and s_a.dim() == 2, "v must be [T, H, D] and s [T, H]", "ms:347-350 CHECK_DIM")
    check(v_a.shape == v_b.shape and s_a.shape == s_b.shape, "CHECK_SAME_SHAPE", "ms:352-353")
    check(v_a.size(0) == s_a.size(0) and v_a.size(1) == s_b.size(1), "s must be [T, H] (token-major)", "ms:354-355")
    check(v_a.shape[-1] % (16 // v_a.element_size()) == 0, "head_size must be multiple of pack_size", "ms:322")
    record("sgl_kernel", "merge_state_v2")
    # ms:92-93: p_lse = prefix_lse[token_idx * num_heads + head_idx] (natural log, ms:102-130)
    o, lse = reference().merge_state(v_a, s_a.T, v_b, s_b.T)
    return o, lse.T.contiguous()
