"""Pooled paired ratios (ours / own) per cell over the records of one method and one backend code, beside the A/A
(the engine's own backend in both slots) of the same method and shape.

    python3 benchmarks/lab/cpu_pass12/pool.py > benchmarks/lab/cpu_pass12/pool.txt

A record's pairs are its per-repetition ratios (``pairs_prefill`` / ``pairs_decode``: "runs"); records of the same
cell pool only when the vLLM backend path (``vllm_cpu``, the KV write inside forward) was the same code for all.
"""

import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CPU = ROOT / "docs" / "cpu"
CELLS = {  # (engine, prompts, method): (ours-vs-own records, A/A records)
    ("vLLM", "questions", "side by side"): (["cpu_batches.json", "cpu_batches_pass12.json"], ["cpu_batches_aa.json"]),
    ("vLLM", "2,048 tokens", "a process per call"): (
        ["cpu_batches_2048_fresh.json", "cpu_batches_2048_fresh_pass12.json", "cpu_batches_2048_b32_fresh_2pairs.json",
         "cpu_batches_2048_b32_fresh.json", "cpu_batches_2048_b1_fresh.json", "cpu_batches_2048_b1_fresh_2.json"],
        ["cpu_batches_2048_aa_fresh.json", "cpu_batches_2048_b32_aa_fresh.json", "cpu_batches_2048_b1_aa_fresh.json"],
    ),
}


def pairs(files: list[str]) -> dict:
    got: dict = {}
    for f in files:
        for row in json.loads((CPU / f).read_text())["rows"]:
            for phase in ("prefill", "decode"):
                got.setdefault((row["batch"], phase), []).extend(row[f"pairs_{phase}"]["runs"])
    return got


def cell(x: list) -> str:
    return f"{statistics.median(x):.3f}x ({min(x):.2f}-{max(x):.2f}, {len(x)} pairs)" if x else "-"


def main() -> None:
    print("| engine, prompts, method | batch | phase | ours / own, pooled median (range, pairs) | A/A median (range, pairs) |")
    print("|---|---|---|---|---|")
    for (engine, prompts, method), (ab, aa) in CELLS.items():
        p, q = pairs(ab), pairs(aa)
        for key in sorted(p):
            print(f"| {engine}, {prompts}, {method} | {key[0]} | {key[1]} | {cell(p[key])} | {cell(q.get(key, []))} |")


if __name__ == "__main__":
    main()
