"""Strict fake of sgl-kernel-xpu ``python/sgl_kernel/attention.py`` (main 9cf16bf9): the MLA decode wrappers.

``att:L`` = python/sgl_kernel/attention.py@9cf16bf9. These are plain Python in every build (exported
by ``__init__.py:16-22``); the ops they call exist only in a USE_MLA build (``common_ops``). The
asserts are the vendor's own Python ``assert``s (AssertionError, same messages), in the same order.
The fake's device stands for "xpu" (att:70 ``device_type``), so the XPU branches are the ones taken.
"""
import torch

from sgl_kernel import common_ops


def _device_type(t: torch.Tensor) -> str:
    return "xpu" if t.device.type == common_ops.DEVICE else t.device.type


def flash_mla_decode(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_c_and_k_pe_cache: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    workspace: torch.Tensor,
    sm_scale: float,
    num_kv_splits: int = 1,
) -> torch.Tensor:
    # signature: att:54-63 (no out=: the wrapper allocates the output, att:115-119)
    assert q_nope.ndim == 3, f"q_nope must be a 3D tensor, but got {q_nope.ndim}"  # att:64
    assert q_pe.ndim == 3, f"q_pe must be a 3D tensor, but got {q_pe.ndim}"  # att:65
    assert (
        kv_c_and_k_pe_cache.ndim == 3
    ), f"kv_c_and_k_pe_cache must be a 3D tensor, but got {kv_c_and_k_pe_cache.ndim}"  # att:66-68

    device_type = _device_type(q_nope)  # att:70
    B_q, H, D_q_nope = q_nope.shape  # att:71
    B_q_2, H_2, D_q_pe = q_pe.shape  # att:72
    assert (B_q == B_q_2) and (H == H_2)  # att:73

    _, PAGE_SIZE, D_ckv = kv_c_and_k_pe_cache.shape  # att:75

    D_latent = 512  # att:77
    D_rope = 64  # att:78
    assert D_q_nope == D_latent  # att:79
    assert D_q_pe == D_rope  # att:80
    assert D_ckv == D_latent + D_rope  # att:81

    MAX_HEADS = 128  # att:83
    assert H <= MAX_HEADS, f"H must be <= {MAX_HEADS}, but got {H}"  # att:84
    if H < MAX_HEADS and device_type != "xpu":  # att:85-92: the non-XPU path pads heads (not taken here)
        q_nope_padded = q_nope.new_empty((B_q, MAX_HEADS, D_q_nope))
        q_nope_padded[:, :H] = q_nope
        q_nope = q_nope_padded
        q_pe_padded = q_pe.new_empty((B_q, MAX_HEADS, D_q_pe))
        q_pe_padded[:, :H] = q_pe
        q_pe = q_pe_padded
    elif device_type == "xpu":  # att:93-95
        q_nope = q_nope.contiguous()
        q_pe = q_pe.contiguous()

    assert len(page_table.shape) == 2  # att:97
    B_block_table, block_num = page_table.shape  # att:98
    assert B_block_table == B_q  # att:99: one query row per page-table row (one query token per request)
    assert block_num > 0, f"block num must be greater than 0, got {block_num}"  # att:100
    assert block_num % (128 / PAGE_SIZE) == 0  # att:101: table width a multiple of 128 / page size

    assert q_nope.dtype in (
        torch.float16,
        torch.bfloat16,
    ), f"q_nope.dtype needs to be fp16 or bf16 but got {q_nope.dtype}."  # att:103-106
    assert q_nope.dtype == q_pe.dtype == kv_c_and_k_pe_cache.dtype  # att:107 (so no FP8 cache)
    assert (
        seq_lens.dtype == torch.int32
    ), f"seq_lens.dtype needs to be int32 but got {seq_lens.dtype}."  # att:108-110
    assert (
        page_table.dtype == torch.int32
    ), f"page_table.dtype needs to be int32 but got {page_table.dtype}."  # att:111-113

    out = (
        q_nope.new_empty((B_q, H, D_latent))
        if device_type == "xpu"
        else q_nope.new_empty((B_q, MAX_HEADS, D_latent))
    )  # att:115-119

    torch.ops.sgl_kernel.flash_mla_decode.default(
        out,
        q_nope,
        q_pe,
        kv_c_and_k_pe_cache,
        seq_lens,
        page_table,
        workspace,
        sm_scale,
        num_kv_splits,
    )  # att:121-131 (AttributeError in a build without USE_MLA: no such op)
    return out if device_type == "xpu" else out[:, :H].contiguous()  # att:132


def flash_mla_get_workspace_size(
    max_seq_len: int,
    num_batches: int,
    num_heads: int = 0,
    page_size: int = 0,
    num_kv_splits: int = -1,
) -> int:
    # att:135-146
    assert max_seq_len > 0, f"max_seq_len must be greater than 0, got {max_seq_len}"  # att:142
    assert num_batches > 0, f"num_batches must be greater than 0, got {num_batches}"  # att:143
    return torch.ops.sgl_kernel.flash_mla_get_workspace_size.default(
        max_seq_len, num_batches, num_heads, page_size, num_kv_splits
    )  # att:144-146
