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


def _families_dir(tmp_path, family):
    import families

    return families.make(str(tmp_path / family), family, 0)


def test_model_checks_accept_xpu_attn_where_they_accept_intel_xpu(tmp_path):
    """SGLang asserts GPT-OSS onto listed backend names (intel_xpu among them, xpu_attn not): with the
    plugin's resolution hook the check passes and the backend stays xpu_attn; without it, it fails."""
    model = _families_dir(tmp_path, "gpt-oss")
    code = f"""
from sglang.srt.plugins import load_plugins
load_plugins()
import sys
from sglang.srt.server_args import ServerArgs
from sglang.srt.arg_groups.model_override_base import resolved_view
sa = ServerArgs(model_path={model!r}, attention_backend="xpu_attn", device="cpu")
sa.resolve_once()
v = resolved_view(sa)
print("ours", v.attention_backend, v.prefill_attention_backend, v.decode_attention_backend)
from sglang.srt.arg_groups import resolution_hooks
resolution_hooks._HOOKS.clear()  # the same resolution without this plugin's hook
try:
    ServerArgs(model_path={model!r}, attention_backend="xpu_attn", device="cpu").resolve_once()
    print("without hook: accepted")
except AssertionError as e:
    print("without hook:", str(e).splitlines()[0])
"""
    out = _py(code).splitlines()
    assert out[-2] == "ours xpu_attn None None"
    assert out[-1].startswith("without hook: GptOssForCausalLM requires one of")


def test_page_size_is_chosen_for_the_device_when_the_user_gave_none(tmp_path):
    """On XPU the plugin asks for a page size every XPU provider serves (64). Here (CPU) the same hook
    runs with the CPU entry of that table patched to 64, against a user-given page size and another backend."""
    model = _families_dir(tmp_path, "qwen3")
    code = f"""
from vllm_xpu_attn.kernels.api import registry
assert registry.default_page_size("xpu") == 64 and registry.default_page_size("cpu") is None
registry.DEFAULT_PAGE_SIZE["cpu"] = 64
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
from sglang.srt.arg_groups.model_override_base import resolved_view
def page(**kw):
    sa = ServerArgs(model_path={model!r}, device="cpu", **kw); sa.resolve_once(); return resolved_view(sa).page_size
print(page(attention_backend="xpu_attn"), page(attention_backend="xpu_attn", page_size=16),
      page(attention_backend="torch_native"))
"""
    assert _py(code).splitlines()[-1] == "64 16 1"


def test_eagle_draft_passes_are_built_on_this_backend():
    code = """
from sglang.srt.plugins import load_plugins
load_plugins()
from types import SimpleNamespace
import torch
from sglang.srt.server_args import DRAFT_ATTENTION_BACKEND_CHOICES
from sglang.srt.speculative import draft_utils
from sglang.srt.speculative.draft_utils import DraftBackendFactory
draft_utils.attention_backends = lambda: ("xpu_attn", "xpu_attn")  # the published config, outside an engine
import sglang_compat.backend as b
made = []
class Fake(b.XpuAttnSGLangBackend):
    def __init__(self, runner, skip_prefill=False, speculative_step_id=0, topk=0, speculative_num_steps=0):
        made.append((skip_prefill, speculative_step_id, topk, speculative_num_steps))
b.XpuAttnSGLangBackend = Fake
runner = SimpleNamespace(draft_attention_backend="xpu_attn",
                         model_config=SimpleNamespace(hf_config=None, hf_text_config=None))
f = DraftBackendFactory(runner, topk=1, speculative_num_steps=3)
dec = f._create_backend("decode_attention_backend", {}, "EAGLE is not supported in {backend_type}",
                        stamps_children=True)
ext = f._create_backend("prefill_attention_backend", {}, "EAGLE is not supported in {backend_type}")
print("xpu_attn" in DRAFT_ATTENTION_BACKEND_CHOICES, type(dec).__name__, len(dec.attn_backends), type(ext).__name__)
print(made)
"""
    out = _py(code).splitlines()
    assert out[-2] == "True XpuAttnMultiStepDraftBackend 2 Fake"
    assert out[-1] == "[(True, 0, 1, 3), (True, 1, 1, 3), (False, 0, 0, 0)]"


def test_deterministic_inference_keeps_xpu_attn_and_the_radix_cache(tmp_path):
    model = _families_dir(tmp_path, "qwen3")
    code = f"""
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import ServerArgs
from sglang.srt.arg_groups.model_override_base import resolved_view
sa = ServerArgs(model_path={model!r}, attention_backend="xpu_attn", device="cpu", enable_deterministic_inference=True)
sa.resolve_once()
v = resolved_view(sa)
print(v.attention_backend, v.disable_radix_cache)
"""
    assert _py(code).splitlines()[-1] == "xpu_attn False"


def test_unsupported_sglang_logs_one_line_and_refuses_only_when_chosen():
    """An SGLang release outside the range: one log line, SGLang unchanged; choosing xpu_attn fails at start-up
    (backend creation) with that line, not with 'invalid choice' or a traceback from inside the adapter."""
    code = """
import sglang
sglang.__version__ = "0.5.20"  # as if that release were installed
from sglang.srt.plugins import load_plugins
load_plugins()
load_plugins()
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from vllm_xpu_attn.versions import UnsupportedEngine
try:
    ATTENTION_BACKENDS["xpu_attn"](None)  # what SGLang's model runner does with --attention-backend xpu_attn
except UnsupportedEngine as e:
    print("REFUSED", e)
"""
    env = sglang_env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    line = "vllm-xpu-attn supports sglang 0.5.22 to 0.5.23; installed: sglang 0.5.20"
    assert (out.stdout + out.stderr).count(line) == 2, out.stderr[-3000:]  # the log line once + the refusal
    assert out.stdout.startswith("REFUSED " + line) and "forced (--attention-backend xpu_attn)" in out.stdout


def test_supported_sglang_missing_a_symbol_is_named_at_plugin_load():
    code = """
import sglang.srt.mem_cache.memory_pool as mp
del mp.KVWriteLoc  # as if this SGLang build lacked it
from sglang_compat import plugin
print(plugin.engine_problem())
"""
    import sglang

    out = _py(code)
    assert f"sglang {sglang.__version__} lacks sglang.srt.mem_cache.memory_pool.KVWriteLoc" in out, out


def test_installed_sglang_is_supported():
    from sglang_compat import plugin

    assert plugin.engine_problem() is None
