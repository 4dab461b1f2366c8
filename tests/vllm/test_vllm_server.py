"""vLLM's real OpenAI server (`python -m vllm.entrypoints.openai.api_server`) under a bounded load of
192 seeded requests, 64 in flight (benchmarks/load_servers.py: random prompt/output lengths, shared
prefixes, streaming and not, 10 streams closed mid-way), once with vLLM's CPU_ATTN and once with this
backend (XPU_ATTN_ENABLE=1): identical greedy tokens for every completed request, nothing lost or
errored, clean SIGINT shutdown. Then the same load on a 20-block KV pool: preemptions happen in both
and the tokens are still those of the unpressured CPU_ATTN run."""

import pytest
from server_load import check_identical, check_load, serve_compare


@pytest.fixture(scope="module")
def unpressured(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve") / "load-vllm.json"
    rep = serve_compare("vllm", models["llama"], out)
    rep["_path"] = out
    return rep


def test_server_load_identical(unpressured):
    rep = unpressured
    check_load(rep, "vllm_cpu")
    check_identical(rep)
    for b in ("own", "ours"):  # the shared prefixes were served from vLLM's prefix cache
        assert rep["backends"][b]["server"]["metrics_after_load"].get("vllm:prefix_cache_hits", 0) > 0
    assert rep["passed"] and rep["_rc"] == 0


def test_server_load_under_preemption(models, unpressured, tmp_path):
    rep = serve_compare(
        "vllm", models["llama"], tmp_path / "load-vllm-pressure.json", pressure=True, reference=unpressured["_path"]
    )
    check_load(rep, "vllm_cpu")
    check_identical(rep)
    for b in ("own", "ours"):
        srv = rep["backends"][b]["server"]
        assert srv["metrics_after_load"].get("vllm:num_preemptions", 0) > 0, (b, srv["metrics_after_load"])
        assert "--num-gpu-blocks-override" in srv["cmd"]
        vs = rep["vs_unpressured_own"][b]  # pressure changed no token
        assert vs["n_mismatches"] == 0 and vs["identical"] == vs["completed_by_both"] > 0, vs["mismatches"][:3]
    assert rep["passed"] and rep["_rc"] == 0
