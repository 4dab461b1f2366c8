"""Provider selection: priority, reasons, override, one error listing every refusal."""

import dataclasses
import logging

import pytest
import torch

from vllm_xpu_attn.kernels import KernelProvider, KernelRequest, NoProviderError, explain, register_provider, select_provider
from vllm_xpu_attn.kernels import registry as reg


def req(**kw):
    base = dict(device_type="cpu", dtype=torch.bfloat16, kv_dtype=torch.bfloat16, head_dim=64,
                num_q_heads=8, num_kv_heads=2, page_size=16)
    base.update(kw)
    return KernelRequest(**base)


def test_cpu_picks_reference_for_batch_invariance_and_logs_once(caplog):
    caplog.set_level(logging.INFO, logger="vllm_xpu_attn")
    r = req(softcap=30.0, has_sinks=True, has_alibi=True, kv_dtype=torch.float8_e4m3fn, dtype=torch.float32,
            batch_invariant=True)
    assert select_provider(r).name == "reference"
    assert select_provider(r).name == "reference"
    msgs = [m for m in caplog.messages if "serves" in m]
    assert len(msgs) == 1 and "reference" in msgs[0] and "torch_sdpa: no batch-invariant support" in msgs[0]
    r = dataclasses.replace(r, batch_invariant=False)
    assert select_provider(r).name == "torch_sdpa"


def test_unknown_device_and_provider():
    with pytest.raises(NoProviderError, match="device type 'tpu'"):
        select_provider(req(device_type="tpu"))
    with pytest.raises(ValueError, match="unknown kernel provider 'nope'"):
        select_provider(req(), override="nope")


class _Narrow(KernelProvider):
    name = "narrow"
    devices = frozenset({"cpu"})
    head_dims = frozenset({128})
    features = frozenset()


def test_priority_reasons_and_fallback(monkeypatch):
    register_provider("narrow", _Narrow, devices={"cpu": 0})
    try:
        # narrow can't: falls to the next (torch_sdpa), explain() says why narrow refused
        rows = dict(explain(req(head_dim=64, softcap=30.0)))
        assert rows["narrow"] == ["head dim 64 not in [128]", "no softcap support"]
        assert rows["torch_sdpa"] == [] and rows["reference"] == []
        assert select_provider(req(head_dim=64)).name == "torch_sdpa"
        assert select_provider(req(head_dim=128)).name == "narrow"
        monkeypatch.setenv("VLLM_XPU_ATTN_KERNEL", "narrow")
        with pytest.raises(NoProviderError, match="forced .* head dim 64 not in"):
            select_provider(req(head_dim=64))
        monkeypatch.setenv("VLLM_XPU_ATTN_KERNEL", "reference")
        assert select_provider(req(head_dim=128)).name == "reference"
    finally:
        reg.unregister_provider("narrow")


def test_impossible_configuration_lists_every_provider():
    with pytest.raises(NoProviderError) as e:
        select_provider(req(device_type="cpu", dtype=torch.float64))
    assert "reference: dtype float64 not in" in str(e.value)
