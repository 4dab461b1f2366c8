"""Registration through the installed distribution's entry points, and SGLang's own arg parsing."""

import importlib.metadata as md
import subprocess
import sys

from conftest import sglang_env


def test_entry_point_discovered():
    eps = [ep for ep in md.entry_points(group="sglang.srt.plugins") if ep.dist and ep.dist.name == "vllm-xpu-attn"]
    assert [ep.value for ep in eps] == ["sglang_compat.plugin:register"]


def _py(code: str, **env_over) -> str:
    env = sglang_env()
    env.update(env_over)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip()


def test_sglang_loads_plugin_and_parser_accepts_xpu_attn():
    code = """
from sglang.srt.plugins import load_plugins
load_plugins()
import argparse
from sglang.srt.server_args import ServerArgs, ATTENTION_BACKEND_CHOICES
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
a = p.parse_args(["--model-path", "x", "--attention-backend", "xpu_attn"])
print(a.attention_backend, "xpu_attn" in ATTENTION_BACKEND_CHOICES, ATTENTION_BACKENDS["xpu_attn"].__module__)
"""
    assert _py(code).splitlines()[-1] == "xpu_attn True sglang_compat.plugin"


def test_intel_xpu_alias_is_opt_in():
    code = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
print(ATTENTION_BACKENDS["intel_xpu"].__module__)
"""
    assert _py(code).splitlines()[-1] != "sglang_compat.plugin"
    assert _py(code, XPU_ATTN_AS_INTEL_XPU="1").splitlines()[-1] == "sglang_compat.plugin"


def test_register_is_reentrant():
    from sglang_compat import plugin

    plugin.register()
    plugin.register()
    from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES

    assert ATTENTION_BACKEND_CHOICES.count("xpu_attn") == 1
