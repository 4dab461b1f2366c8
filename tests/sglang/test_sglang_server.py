"""SGLang's real HTTP server (`python -m sglang.launch_server --device cpu`) under a bounded load of 192
seeded requests, 64 in flight, through its OpenAI completions API (benchmarks/load_servers.py: random
prompt/output lengths, shared prefixes, streaming and not, 10 streams closed mid-way), once with
`--attention-backend torch_native` and once with `xpu_attn`: identical greedy tokens for every completed
request, nothing lost or errored, clean SIGTERM shutdown (SGLang's graceful drain). Then the same load on
a 1024-token KV pool with retraction (SGLang's SGLANG_TEST_RETRACT switch: this load never filled the
pool by itself, see benchmarks/serve_compare.py SGLANG_PRESSURE): requests retracted and prefilled again
in both, and the tokens are still those of the unpressured torch_native run."""

import pytest
from server_load import check_identical, check_load, serve_compare


@pytest.fixture(scope="module")
def unpressured(models, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve") / "load-sglang.json"
    rep = serve_compare("sglang", models["llama"], out)
    rep["_path"] = out
    return rep


def test_server_load_identical(unpressured):
    rep = unpressured
    check_load(rep, "torch_sdpa")
    check_identical(rep)
    for b in ("own", "ours"):  # the shared prefixes were served from the radix cache
        assert rep["backends"][b]["server"]["cached_tokens_logged"] > 0
    assert rep["passed"] and rep["_rc"] == 0


def test_server_load_under_retraction(models, unpressured, tmp_path):
    rep = serve_compare(
        "sglang", models["llama"], tmp_path / "load-sglang-pressure.json", pressure=True, reference=unpressured["_path"]
    )
    check_load(rep, "torch_sdpa")
    check_identical(rep)
    for b in ("own", "ours"):
        srv = rep["backends"][b]["server"]
        retracted = srv["retractions_logged"] + srv["forced_retractions_logged"]
        assert retracted > 0 and srv["metrics_after_load"].get("sglang:num_retracted_requests_total", 0) > 0, srv
        assert "--max-total-tokens" in srv["cmd"]
        vs = rep["vs_unpressured_own"][b]  # retraction changed no token
        assert vs["n_mismatches"] == 0 and vs["identical"] == vs["completed_by_both"] > 0, vs["mismatches"][:3]
    assert rep["passed"] and rep["_rc"] == 0
