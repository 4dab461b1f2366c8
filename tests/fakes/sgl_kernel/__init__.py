"""Fake sgl_kernel (XPU build): merge_state_v2 with lse [T, H]."""
import torch


def merge_state_v2(v_a, s_a, v_b, s_b):
    from vllm_xpu_attn.kernels import get_provider

    assert s_a.dim() == 2 and s_a.shape == (v_a.shape[0], v_a.shape[1]), "merge_state_v2 takes lse as [T, H]"
    assert s_a.dtype == torch.float32
    o, lse = get_provider("reference").merge_state(v_a, s_a.T, v_b, s_b.T)
    return o, lse.T.contiguous()
