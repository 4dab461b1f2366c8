"""Model families end to end in vLLM (CPU) with this backend, against transformers' eager attention.

One tiny seeded model per family (tests/support/families.py: windows of 8/16 and chunks of 32 crossed by the
prompts), greedy 32 tokens on 12 prompts. Ours must match transformers on 12/12; vLLM's own CPU
backend is run beside it for the record. Each family's feature is shown to matter: transformers with
the feature turned off (no window / chunk / sinks) disagrees with the model on some prompts.
"""

import json
import sys

import pytest
from conftest import run_vllm_batch
from families import FAMILIES, agreement, build_all

EXTRA = {"llama4": ["--block-size", "32"]}  # vLLM: attention_chunk_size must divide by the block size
RESULTS = {}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every family in two vLLM processes (ours, vLLM's own): {side: {family: result}}, plus the families."""
    from families import PROMPTS

    root = tmp_path_factory.mktemp("families")
    fams = build_all(root / "models", sys.executable)
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    jobs = {
        fam: (fams[fam]["path"], ["--max-tokens", "32", "--prompts-json", prompts, *EXTRA.get(fam, [])])
        for fam in FAMILIES
    }
    return {
        "fams": fams,
        "ours": run_vllm_batch(jobs, root, ours=True, name="families"),
        "own": run_vllm_batch(jobs, root, ours=False, name="families"),
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_family_matches_transformers(runs, family):
    f = runs["fams"][family]
    ours, own = runs["ours"][family], runs["own"][family]
    assert ours["platform"] == "XpuAttnCpuPlatform" and ours["providers"] == ["vllm_cpu"]
    n_layers = json.load(open(f"{f['path']}/config.json"))["num_hidden_layers"]
    assert ours["log"].count("vllm-xpu-attn: layer ") == n_layers, "this backend must serve every attention layer"
    got = [o["token_ids"] for o in ours["outputs"]]
    RESULTS[family] = (agreement(f["hf"], got), agreement(f["hf"], [o["token_ids"] for o in own["outputs"]]))
    print(
        f"{family}: vLLM + vllm-xpu-attn {RESULTS[family][0]}/12, vLLM CPU_ATTN {RESULTS[family][1]}/12 "
        "vs transformers eager"
    )
    if f["hf_ablated"] is not None:
        assert agreement(f["hf"], f["hf_ablated"]) < 12, f"{family}: the prompts do not exercise its attention feature"
    assert got == f["hf"], f"{family}: {RESULTS[family][0]}/12 greedy continuations equal transformers'"
