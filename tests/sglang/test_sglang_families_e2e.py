"""Model families end to end in SGLang (CPU) under ``xpu_attn``, against transformers' eager attention.

Qwen3, Gemma-3 (hybrid sliding/global, window 8) and GPT-OSS (sinks, alternating window 16, MoE):
greedy 32 tokens on 12 prompts, 12/12 equal to transformers. SGLang's own CPU backend (torch_native)
is run beside it; for GPT-OSS SGLang refuses it (no sinks), which is recorded as such. Llama-4 cannot
run in SGLang on the CPU with any backend (its CPU MoE raises NotImplementedError for
router-weight-on-input); its attention is covered with SGLang's objects in test_sglang_families.py.
"""

import json
import sys

import pytest
from conftest import run_sglang_batch
from families import PROMPTS, agreement, build_all

ARGS = {"gpt-oss": ["--page-size", "64", "--moe-runner-backend", "triton"]}


FAMS = ["qwen3", "gemma3", "gpt-oss"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every family in one SGLang process (each run its own Engine); SGLang's refusal of GPT-OSS under
    torch_native last, since a refused engine may end the process."""
    root = tmp_path_factory.mktemp("families")
    fams = build_all(root / "models", sys.executable, families=tuple(FAMS))
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    args = {f: ["--max-tokens", "32", "--prompts-json", prompts, *ARGS.get(f, [])] for f in FAMS}
    jobs = {f"{f}/ours": (fams[f]["path"], "xpu_attn", args[f]) for f in FAMS}
    jobs.update({f"{f}/own": (fams[f]["path"], "torch_native", args[f]) for f in FAMS})  # gpt-oss last
    return {"fams": fams, "runs": run_sglang_batch(jobs, root, name="families")}


@pytest.mark.parametrize("family", FAMS)
def test_family_matches_transformers(runs, family):
    f = runs["fams"][family]
    ours = runs["runs"][f"{family}/ours"]
    assert "xpu_attn (SGLang): providers" in ours["log"]
    got = [o["token_ids"] for o in ours["outputs"]]
    if family == "gpt-oss":
        with pytest.raises(AssertionError, match="GptOssForCausalLM requires one of"):
            runs["runs"][f"{family}/own"]
        own = "refused by SGLang"
        assert "sinks" in ours["log"]  # the sinks were found at start-up (the provider choice logs them)
    else:
        base = runs["runs"][f"{family}/own"]
        own = f"{agreement(f['hf'], [o['token_ids'] for o in base['outputs']])}/12"
    print(f"{family}: SGLang + xpu_attn {agreement(f['hf'], got)}/12, SGLang torch_native {own} vs transformers")
    if f["hf_ablated"] is not None:
        assert agreement(f["hf"], f["hf_ablated"]) < 12, f"{family}: the prompts do not exercise its attention feature"
    assert got == f["hf"], f"{family}: {agreement(f['hf'], got)}/12 greedy continuations equal transformers'"
