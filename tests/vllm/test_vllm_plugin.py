"""Entry points, platform resolution (in-process and in the engine-core process), builder translation."""

import importlib.metadata as md
import os
import subprocess
import sys

import torch

from vllm_xpu_attn.vllm import plugin


def _eps(group):
    return {ep.name: ep for ep in md.entry_points(group=group) if ep.dist and ep.dist.name == "vllm-xpu-attn"}


def test_entry_points_installed_and_loadable():
    plat, gen = _eps("vllm.platform_plugins"), _eps("vllm.general_plugins")
    assert plat["xpu_attn"].value == "vllm_xpu_attn.vllm.plugin:platform_plugin"
    assert gen["xpu_attn"].value == "vllm_xpu_attn.vllm.plugin:general_plugin"
    assert plat["xpu_attn"].load() is plugin.platform_plugin
    sg = {ep.name: ep for ep in md.entry_points(group="sglang.srt.plugins") if ep.dist and ep.dist.name == "vllm-xpu-attn"}
    assert "xpu_attn" in sg


def test_platform_plugin_opt_in(monkeypatch):
    monkeypatch.delenv("XPU_ATTN_ENABLE", raising=False)
    assert plugin.platform_plugin() is None  # CPU, not opted in: vLLM unchanged
    monkeypatch.setenv("XPU_ATTN_ENABLE", "1")
    assert plugin.platform_plugin() == "vllm_xpu_attn.vllm.platform.XpuAttnCpuPlatform"
    monkeypatch.setenv("XPU_ATTN_ENABLE", "0")
    assert plugin.platform_plugin() is None


def test_current_platform_resolves_to_ours_when_opted_in():
    code = "from vllm.platforms import current_platform as p; print(type(p).__name__, type(p).__mro__[1].__name__)"
    env = dict(os.environ, XPU_ATTN_ENABLE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["XpuAttnCpuPlatform", "CpuPlatform"], out.stderr[-3000:]
    env["XPU_ATTN_ENABLE"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split()[0] == "CpuPlatform"


def test_general_plugin_registers_custom_and_is_reentrant():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    plugin.general_plugin()
    plugin.general_plugin()
    assert AttentionBackendEnum.CUSTOM.get_path() == "vllm_xpu_attn.vllm.backend.XpuAttnBackend"
    from vllm_xpu_attn.vllm.backend import XpuAttnBackend

    assert AttentionBackendEnum.CUSTOM.get_class() is XpuAttnBackend


def test_backend_declarations():
    from vllm.v1.kv_cache_interface import KVCacheLayout

    from vllm_xpu_attn.vllm.backend import XpuAttnBackend as B

    assert torch.float32 in B.supported_dtypes and "fp8_e5m2" in B.supported_kv_cache_dtypes
    assert B.supports_sink() and B.supports_sliding_window() and not B.is_mla()
    assert B.supported_kv_cache_layouts() == (KVCacheLayout.LBNHC,)
    assert B.forward_includes_kv_cache_update is False
    assert B.validate_configuration(head_size=64, dtype=torch.float32, kv_cache_dtype="fp8", block_size=16,
                                    use_mla=False, has_sink=True, use_sparse=False, use_mm_prefix=False,
                                    use_per_head_quant_scales=False, device_capability=None,
                                    attn_type="encoder_decoder") == []
    reasons = B.validate_configuration(head_size=64, dtype=torch.float32, kv_cache_dtype="auto", block_size=16,
                                       use_mla=True, has_sink=False, use_sparse=False, use_mm_prefix=False,
                                       use_per_head_quant_scales=False, device_capability=None, attn_type="decoder")
    assert "MLA not supported" in reasons
    assert "non-causal attention not supported" in B.validate_configuration(
        head_size=64, dtype=torch.float32, kv_cache_dtype="auto", block_size=16, use_mla=False, has_sink=False,
        use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False, device_capability=None,
        attn_type="decoder", use_non_causal=True)
    # VLLM_BATCH_INVARIANT=1 is served (the layers get batch-invariant kernels), not refused
    assert B.validate_configuration(head_size=64, dtype=torch.float32, kv_cache_dtype="auto", block_size=16,
                                    use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
                                    use_per_head_quant_scales=False, device_capability=None, attn_type="decoder",
                                    use_batch_invariant=True) == []


def test_vllm_batch_invariant_switch_reaches_the_layers(monkeypatch):
    from vllm_xpu_attn.vllm import compat

    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    assert compat.vllm_batch_invariant()
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
    assert not compat.vllm_batch_invariant()


def _cam(q_lens, k_lens, table, max_q, max_k, **kw):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=torch.tensor(k_lens, dtype=torch.int32),
        num_reqs=len(q_lens), num_actual_tokens=sum(q_lens), max_query_len=max_q, max_seq_len=max_k,
        block_table_tensor=torch.tensor(table, dtype=torch.int32), slot_mapping=torch.zeros(sum(q_lens), dtype=torch.int64),
        **kw)


def test_builder_plan_mixed_batch_hand_computed():
    from vllm_xpu_attn.core import Mode
    from vllm_xpu_attn.vllm.backend import plan_from_common

    # decode (1 query, 17 keys), extend on a 16-token prefix (4 new), prefill (5)
    cam = _cam([1, 4, 5], [17, 20, 5], [[3, 7], [1, 2], [9, 0]], 5, 20)
    plan = plan_from_common(cam, 16)
    assert plan.mode is Mode.MIXED and plan.num_tokens == 10
    assert plan.main.cu_seqlens_q.tolist() == [0, 1, 5, 10]
    assert plan.main.cache_seqlens.tolist() == [17, 20, 5]
    assert plan.main.page_table.tolist() == [[3, 7], [1, 2], [9, 0]]
    assert (plan.main.max_seqlen_q, plan.main.max_seqlen_k, plan.main.page_size) == (5, 20, 16)
    dec = plan_from_common(_cam([1, 1], [3, 40], [[4, 0, 0], [5, 6, 8]], 1, 40), 16)
    assert dec.mode is Mode.DECODE and dec.main.cu_seqlens_q.tolist() == [0, 1, 2]
    import numpy as np

    cross = plan_from_common(_cam([2], [2], [[5]], 2, 2, encoder_seq_lens=torch.tensor([7], dtype=torch.int32),
                                  encoder_seq_lens_cpu=np.array([7])), 16, is_cross=True)
    assert cross.encoder.cache_seqlens.tolist() == [7] and cross.encoder.max_seqlen_k == 7
