"""The smoke check CI runs on the oldest supported SGLang (ci/test.sh, suite ``oldest``; the full SGLang suite runs
it on the newest release too): this package installed from its wheel, its plugin found through SGLang's entry
points and registered, and one tiny model (Qwen3, tests/support/families.py) generating through ``--attention-backend
xpu_attn``, greedy ids identical to transformers' eager attention."""

import importlib.metadata as md
import json
import os
import sys

import sglang
from conftest import run_sglang
from families import PROMPTS, build_all

import vllm_xpu_attn
from vllm_xpu_attn import versions


def test_plugin_discovered_and_a_tiny_model_generates_through_the_backend(tmp_path):
    if os.environ.get("VXA_EXPECT_WHEEL") == "1":  # CI's oldest-release run: the installed wheel, not the sources
        assert "site-packages" in vllm_xpu_attn.__file__, vllm_xpu_attn.__file__
    assert versions.unsupported_reason("sglang", sglang.__version__) is None, sglang.__version__
    ours = {
        ep.value
        for ep in md.entry_points(group="sglang.srt.plugins")
        if ep.name == "xpu_attn" and ep.dist and ep.dist.name == "vllm-xpu-attn"
    }
    assert ours == {"sglang_compat.plugin:register"}, ours
    fam = build_all(tmp_path / "models", sys.executable, families=("qwen3",))["qwen3"]
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    res = run_sglang(fam["path"], tmp_path, "xpu_attn", args=["--max-tokens", "32", "--prompts-json", prompts])
    assert "xpu_attn (SGLang): providers" in res["log"]
    assert "served its first decoder attention call" in res["log"]  # the layers really called this backend
    got = [o["token_ids"] for o in res["outputs"]]
    assert got == fam["hf"], f"SGLang {sglang.__version__}: greedy ids differ from transformers' eager attention"
    print(f"SGLang {sglang.__version__}: {len(got)}/{len(got)} prompts identical to transformers")
