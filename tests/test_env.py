"""Environment variables (vllm_xpu_attn/env.py): one parser, a bad value named at configuration time,
never at import or at a later launch."""

import subprocess
import sys

import pytest
import torch

from vllm_xpu_attn import core, env


def test_flag_values(monkeypatch):
    for raw, want in (("1", True), ("ON", True), (" yes ", True), ("0", False), ("off", False), ("", False)):
        monkeypatch.setenv(env.BATCH_INVARIANT, raw)
        assert env.on(env.BATCH_INVARIANT) is want, raw
    monkeypatch.delenv(env.FAST_LAUNCH, raising=False)
    assert env.flag(env.FAST_LAUNCH) is True  # its documented default
    monkeypatch.delenv(env.ENABLE, raising=False)
    assert env.flag(env.ENABLE) is None  # unset: the plugin decides by device


@pytest.mark.parametrize("name", [env.SYNC_CHECKS, env.BATCH_INVARIANT, env.FAST_LAUNCH, env.LOG_LEVEL])
def test_bad_value_is_named_when_a_layer_is_configured(monkeypatch, name):
    monkeypatch.setenv(name, "maybe")
    spec = core.LayerSpec(
        num_q_heads=2, num_kv_heads=1, head_dim=16, scale=0.25, dtype=torch.float32, kv_dtype=torch.float32
    )
    with pytest.raises(ValueError, match=f"{name}='maybe'"):
        core.LayerRunner(spec, "cpu", 16)


def test_bad_value_does_not_break_import():
    """Importing the package (an engine loads it while discovering plugins) reads no variable's value."""
    code = "import vllm_xpu_attn.kernels, vllm_xpu_attn.core; print('ok')"
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, env.SYNC_CHECKS: "maybe", env.BATCH_INVARIANT: "maybe"},
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_all_bad_values_in_one_error(monkeypatch):
    monkeypatch.setenv(env.SYNC_CHECKS, "2")
    monkeypatch.setenv(env.AS_INTEL_XPU, "sure")
    with pytest.raises(ValueError) as e:
        env.validate()
    assert env.SYNC_CHECKS in str(e.value) and env.AS_INTEL_XPU in str(e.value)


def test_old_vllm_prefixed_names_still_read_with_one_deprecation_line(monkeypatch, caplog):
    """One prefix (XPU_ATTN_); the first spellings (VLLM_XPU_ATTN_*) are read when the new name is unset, logged
    once as deprecated; the new name wins when both are set; a bad old value is named by configuration."""
    monkeypatch.delenv(env.KERNEL, raising=False)
    monkeypatch.setenv("VLLM_" + env.KERNEL, "reference")
    with caplog.at_level("WARNING", logger="vllm_xpu_attn"):
        assert env.text(env.KERNEL) == "reference"
        assert env.text(env.KERNEL) == "reference"
    lines = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert lines == [f"VLLM_{env.KERNEL} is deprecated: set {env.KERNEL} instead (read for now)"], lines
    monkeypatch.setenv(env.KERNEL, "torch_sdpa")
    assert env.text(env.KERNEL) == "torch_sdpa"
    monkeypatch.delenv(env.BATCH_INVARIANT, raising=False)
    monkeypatch.setenv("VLLM_" + env.BATCH_INVARIANT, "maybe")
    with pytest.raises(ValueError, match=env.BATCH_INVARIANT):
        env.validate()
    assert all(v.name.startswith("XPU_ATTN_") for v in env.VARIABLES)
