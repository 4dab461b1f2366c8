"""The smoke check CI runs on the oldest supported vLLM (ci/test.sh, suite ``oldest``; the full vLLM suite runs it
on the newest release too): this package installed from its wheel, its plugins found through vLLM's entry points,
and one tiny model (Qwen3, tests/support/families.py) generating through this backend, greedy ids identical to
transformers' eager attention."""

import importlib.metadata as md
import json
import os
import sys

import vllm
from conftest import run_vllm
from families import PROMPTS, build_all

import vllm_xpu_attn
from vllm_xpu_attn import versions
from vllm_xpu_attn.kernels.api import get_provider


def test_plugins_discovered_and_a_tiny_model_generates_through_the_backend(tmp_path):
    if os.environ.get("VXA_EXPECT_WHEEL") == "1":  # CI's oldest-release run: the installed wheel, not the sources
        assert "site-packages" in vllm_xpu_attn.__file__, vllm_xpu_attn.__file__
    assert versions.unsupported_reason("vllm", vllm.__version__) is None, vllm.__version__
    ours = {
        group: ep.value
        for group in ("vllm.platform_plugins", "vllm.general_plugins")
        for ep in md.entry_points(group=group)
        if ep.name == "xpu_attn" and ep.dist.name == "vllm-xpu-attn"
    }
    assert ours.get("vllm.platform_plugins") == "vllm_xpu_attn.vllm.plugin:platform_plugin", ours
    assert ours.get("vllm.general_plugins") == "vllm_xpu_attn.vllm.plugin:general_plugin", ours
    fam = build_all(tmp_path / "models", sys.executable, families=("qwen3",))["qwen3"]
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    res = run_vllm(fam["path"], tmp_path, ours=True, args=["--max-tokens", "32", "--prompts-json", prompts])
    # vLLM's own CPU kernels where this release's ops have the signatures the vllm_cpu provider calls, else torch's
    why = get_provider("vllm_cpu").unavailable_reason()
    print(f"vLLM {vllm.__version__}: vllm_cpu provider {'available' if why is None else 'refused: ' + why}")
    want = ["vllm_cpu"] if why is None else ["torch_sdpa"]
    assert res["platform"] == "XpuAttnCpuPlatform" and res["providers"] == want, (res["platform"], res["providers"])
    assert res["served"].get("decoder", 0) > 0, res["served"]  # the layers really called this backend
    got = [o["token_ids"] for o in res["outputs"]]
    assert got == fam["hf"], f"vLLM {vllm.__version__}: greedy ids differ from transformers' eager attention"
    print(f"vLLM {vllm.__version__}: {len(got)}/{len(got)} prompts identical to transformers, served {res['served']}")
