"""Provider selection: priority, reasons, override, one error listing every refusal."""

import dataclasses
import logging
import re
from pathlib import Path

import pytest
import torch

from vllm_xpu_attn.kernels.api import (
    KernelProvider,
    KernelRequest,
    NoProviderError,
    explain,
    get_provider,
    register_provider,
    select_provider,
)
from vllm_xpu_attn.kernels.api import registry as reg


def req(**kw):
    base = dict(
        device_type="cpu",
        dtype=torch.bfloat16,
        kv_dtype=torch.bfloat16,
        head_dim=64,
        num_q_heads=8,
        num_kv_heads=2,
        page_size=16,
    )
    base.update(kw)
    return KernelRequest(**base)


def test_cpu_picks_reference_for_batch_invariance_and_logs_once(caplog):
    caplog.set_level(logging.INFO, logger="vllm_xpu_attn")
    r = req(
        softcap=30.0,
        has_sinks=True,
        has_alibi=True,
        kv_dtype=torch.float8_e4m3fn,
        dtype=torch.float32,
        batch_invariant=True,
    )
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
        monkeypatch.setenv("XPU_ATTN_KERNEL", "narrow")
        with pytest.raises(NoProviderError, match="forced .* head dim 64 not in"):
            select_provider(req(head_dim=64))
        monkeypatch.setenv("XPU_ATTN_KERNEL", "reference")
        assert select_provider(req(head_dim=128)).name == "reference"
    finally:
        reg.unregister_provider("narrow")


def test_impossible_configuration_lists_every_provider():
    with pytest.raises(NoProviderError) as e:
        select_provider(req(device_type="cpu", dtype=torch.float64))
    assert "reference: dtype float64 not in" in str(e.value)


def test_priority_lists_and_the_usage_docs():
    """Each device's order, written out by hand; docs/usage.md's table says the same. sgl-kernel's two operators
    (FA3 API, MLA decode) sit together at the head of the XPU list, each refusing the other's layers."""
    assert reg.PRIORITY["xpu"] == ["sgl_kernel", "sgl_kernel_mla", "vllm_xpu_kernels", "ipex", "triton", "reference"]
    assert reg.PRIORITY["cuda"] == ["triton", "reference"]
    assert reg.PRIORITY["cpu"] == ["vllm_cpu", "torch_sdpa", "reference"]
    assert all(set(order) <= set(reg.provider_names()) for order in reg.PRIORITY.values())
    # a device lists only providers that declare it (an XPU-only wrapper first on CUDA would only ever refuse)
    wrong = [(dev, n) for dev, order in reg.PRIORITY.items() for n in order if dev not in get_provider(n).devices]
    assert not wrong, wrong
    usage = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    rows = dict(re.findall(r"^\| (Intel XPU|CUDA|CPU) \| ([^|]+) \|", usage, flags=re.M))
    for dev, label in (("xpu", "Intel XPU"), ("cuda", "CUDA"), ("cpu", "CPU")):
        assert re.findall(r"`(\w+)`", rows[label]) == reg.PRIORITY[dev], label


def test_mla_layers_without_vendor_libraries_go_to_triton_with_reasons():
    """On this machine (no sgl-kernel): an XPU MLA decode skips both sgl-kernel operators, each saying why."""
    r = req(
        device_type="xpu",
        head_dim=576,
        v_head_dim=512,
        num_q_heads=16,
        num_kv_heads=1,
        page_size=64,
        phase="decode",
        mla=True,
    )
    rows = dict(explain(r))
    assert any("not importable" in x for x in rows["sgl_kernel_mla"]), rows["sgl_kernel_mla"]
    assert any("sgl_kernel_mla serves" in x for x in rows["sgl_kernel"]), rows["sgl_kernel"]
    assert select_provider(r).name == "triton"


def test_a_provider_defining_a_renamed_method_is_refused_at_class_creation():
    """plan_paged became arm_paged: a third-party provider still overriding the old name is refused when its class
    is made (it would otherwise be silently skipped and the base launch used)."""
    from vllm_xpu_attn.kernels.api import KernelProvider

    with pytest.raises(TypeError, match="arm_paged"):

        class _Old(KernelProvider):  # noqa: F841
            def plan_paged(self, step, call, **options):
                return None
