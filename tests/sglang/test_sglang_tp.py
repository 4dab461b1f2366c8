"""Tensor parallelism 2 in the real SGLang 0.5.23 (its CUDA wheel, on the CPU): two scheduler ranks.

The CPU recipe (found in SGLang's source, nothing patched):
- ``SGLANG_NCCL_SO_PATH`` pointing at no library. The CUDA wheel ships libnccl, so every
  GroupCoordinator builds a PyNcclCommunicator (``use_pynccl`` is only off for NPU/XPU/mooncake,
  parallel_state.py:2185), which then enters ``torch.cuda.device(cpu)`` and dies with
  ``ValueError: Expected a cuda device, but got: cpu`` (pynccl.py:116). When the library does not
  load, pynccl disables itself (pynccl.py:73-79), as on a CPU-only torch; the TP all-reduce of CPU
  tensors then goes through torch.distributed on the gloo group (parallel_state.py:695-699).
- ``SGLANG_CPU_OMP_THREADS_BIND="0|1"``: one core per rank; ``disable_custom_all_reduce``.

The tiny Llama has 4 query / 2 KV heads, so each rank's RadixAttention layers carry 2 / 1 (SGLang
shards QKV by heads); this backend logs ``layer L Hq=.. Hkv=.. D=.. tp_rank=R/W`` per layer and
rank. Greedy tokens at TP=2 must equal TP=1 (and torch_native at TP=2), logprobs within the fp32
parity tolerance.
"""

import json
import re
from collections import defaultdict
from pathlib import Path

from conftest import assert_parity, run_sglang_batch

LAYER_LINE = re.compile(r"xpu_attn \(SGLang\): layer (\d+) Hq=(\d+) Hkv=(\d+) D=(\d+) tp_rank=(\d+)/(\d+)")
TP_ARGS = ["--max-tokens", "32", "--tp", "2"]


def layer_specs(log: str) -> dict[tuple[int, int], dict[int, tuple[int, int, int]]]:
    """{(tp_rank, tp_size): {layer id: (Hq, Hkv, D)}} from this backend's log lines."""
    specs = defaultdict(dict)
    for layer, hq, hkv, d, rank, size in LAYER_LINE.findall(log):
        specs[(int(rank), int(size))][int(layer)] = (int(hq), int(hkv), int(d))
    return dict(specs)


def test_tp2_matches_tp1_and_torch_native(models, tmp_path):
    cfg = json.loads((Path(models["llama"]) / "config.json").read_text())
    hq, hkv, d, n_layers = (
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["head_dim"],
        cfg["num_hidden_layers"],
    )
    assert hq % 2 == 0 and hkv % 2 == 0, "the TP=2 model must split its heads evenly"

    tp_env = {"SGLANG_NCCL_SO_PATH": str(tmp_path / "no-nccl-on-the-cpu.so"), "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
    runs = run_sglang_batch(
        {
            "tp1": (models["llama"], "xpu_attn", ["--max-tokens", "32"]),
            "tp2": (models["llama"], "xpu_attn", TP_ARGS, None, tp_env),
            "tp2-base": (models["llama"], "torch_native", TP_ARGS, None, tp_env),
        },
        tmp_path,
        name="tp",
    )
    tp1, tp2, tp2_base = runs["tp1"], runs["tp2"], runs["tp2-base"]

    for rank in (0, 1):  # really two ranks, pynccl off
        assert f"TP{rank}] Init parallel ends" in tp2["log"]
    assert "Failed to load NCCL library from" in tp2["log"]
    assert "xpu_attn (SGLang)" not in tp2_base["log"]

    layers = range(n_layers)
    assert layer_specs(tp1["log"]) == {(0, 1): {i: (hq, hkv, d) for i in layers}}
    assert layer_specs(tp2["log"]) == {(r, 2): {i: (hq // 2, hkv // 2, d) for i in layers} for r in (0, 1)}

    d_tp = assert_parity(tp1, tp2)  # greedy tokens identical, logprobs within LOGPROB_TOL
    d_base = assert_parity(tp2_base, tp2)
    print(f"TP=2 vs TP=1 (ours): max logprob diff {d_tp:.2e}; TP=2 ours vs TP=2 torch_native: {d_base:.2e}")
