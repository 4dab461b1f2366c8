"""Issue #51: which decode tile / split policy takes the engine path's two grid rows below 90 % of copy over it?

    PYTHONPATH=.:benchmarks python benchmarks/lab/grid_tune.py > $OUT/grid_tune.jsonl      # CUDA
    TRITON_INTERPRET=1 PYTHONPATH=.:benchmarks python benchmarks/lab/grid_tune.py --cpu    # dry run

The engine path of ``bench_decode_grid.py`` (plan_step once + LayerRunner.forward over 32 layers cycling 4 caches,
step time / 32) for a few candidates per row, each applied in-process (a TUNING entry, the split policy's fill
factor), the provider's launch configurations cleared between candidates, candidates alternating per round
(``--rounds``, median kept). Rows:

- "16 q / 2 KV heads" (64 x 4096): the policy splits while batch x KV heads x splits < FILL x SMs; shipped FILL 2 picks
  4 splits, FILL 1 picks 2; with the split tile (16, 128, 4, 2), (16, 64, 4, 2) or (16, 64, 4, 3).
- "window 1024" (64 x 4096, window_left 1023): the feature tile (16, 128, 4, 2) as shipped against (16, 64, 8, 2),
  (16, 64, 4, 3), (16, 64, 4, 2), (16, 128, 4, 3).
- the split-K shapes of splitk_sweep.py (8 x 32768, 2 x 65536, 16 x 16384, 1 x 131072): FILL 2 against FILL 1, so a
  policy change is seen at every shape it moves.

Each candidate's layer-0 output is compared with the shipped candidate's (max |diff|, should be ~1e-3 at most: the
split count changes the summation order). Prints one JSON line per (round, row, candidate), then one "summary" line
per row (median us, % of copy). Measures, never asserts. Expected reading: benchmarks/lab/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [_BENCH, os.path.dirname(_BENCH)]

import bench_attention as B  # noqa: E402
import bench_decode_grid as G  # noqa: E402
import torch  # noqa: E402

from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402
from vllm_xpu_attn.kernels.providers.triton import launch_config, tuning  # noqa: E402

_SHIPPED_SPLIT = tuning.split_count_for


def split_with_fill(fill: int):
    """tuning.split_count_for at the fill factor ``fill`` (whatever the shipped one; older trees: no fill argument)."""

    def f(compute_units, batch, units, max_seqlen_q, max_keys, *_shipped_fill):
        if compute_units is None:
            return _SHIPPED_SPLIT(compute_units, batch, units, max_seqlen_q, max_keys)
        return _SHIPPED_SPLIT(max(1, compute_units * fill // 2), batch, units, max_seqlen_q, max_keys, 2)

    return f


def candidates(row: str, stage: int) -> list[tuple[str, dict]]:
    """(name, overrides): overrides = {"fill": int, "<TUNING phase>": tile}; the first is the reference.
    Stage 1 (the first run): the fill factor (2, shipped) and split / window tiles. Stage 2: the split tile at every
    split shape at the shipped fill, window tiles again."""
    if stage == 1:
        if row == "kv2":
            return [
                ("fill2", {"fill": 2}),
                ("fill1", {"fill": 1}),
                ("fill1 split(16,64,4,2)", {"fill": 1, "decode_split": (16, 64, 4, 2)}),
                ("fill1 split(16,64,4,3)", {"fill": 1, "decode_split": (16, 64, 4, 3)}),
                ("fill2 split(16,64,4,3)", {"fill": 2, "decode_split": (16, 64, 4, 3)}),
            ]
        if row == "window":
            return [("shipped feature(16,128,4,2)", {})] + [
                (f"feature{t}", {"decode_feature": t})
                for t in [(16, 64, 8, 2), (16, 64, 4, 3), (16, 64, 4, 2), (16, 128, 4, 3)]
            ]
        return [("fill2", {"fill": 2}), ("fill1", {"fill": 1})]
    if row == "window":
        return [("shipped feature(16,128,4,2)", {})] + [
            (f"feature{t}", {"decode_feature": t}) for t in [(16, 64, 8, 2), (16, 64, 8, 3), (16, 128, 8, 2)]
        ]
    return [("shipped split(16,128,4,2)", {})] + [
        (f"split{t}", {"decode_split": t}) for t in [(16, 64, 4, 3), (16, 64, 4, 2), (16, 64, 8, 2)]
    ]


def rows(cpu: bool) -> list[tuple[str, G.Row]]:
    if cpu:
        return [
            ("kv2", G.Row("16 q / 2 KV heads", batch=2, ctx=64, hq=4, hkv=1, d=64)),
            ("window", G.Row("window 1024", batch=2, ctx=64, hq=4, hkv=2, d=64, window=15)),
            ("split", G.Row("1 x 512", batch=1, ctx=512, hq=4, hkv=2, d=64)),
        ]
    return [
        ("kv2", G.Row("16 q / 2 KV heads", hq=16, hkv=2)),
        ("window", G.Row("window 1024", window=1023)),
        ("split", G.Row("8 x 32768", batch=8, ctx=32768)),
        ("split", G.Row("2 x 65536", batch=2, ctx=65536)),
        ("split", G.Row("16 x 16384", batch=16, ctx=16384)),
        ("split", G.Row("1 x 131072", batch=1, ctx=131072)),
    ]


def apply(over: dict, family: str):
    """Patch the tables / policy for one candidate; returns the undo."""
    saved = dict(tuning.TUNING[family])
    for k, v in over.items():
        if k != "fill":
            tuning.TUNING[family][k] = v
    if "fill" in over:  # else the shipped policy (its fill per cache width, tuning.split_fill)
        launch_config.split_count_for = split_with_fill(over["fill"])
    get_provider("triton").clear_caches()

    def undo():
        tuning.TUNING[family].clear()
        tuning.TUNING[family].update(saved)
        launch_config.split_count_for = _SHIPPED_SPLIT
        get_provider("triton").clear_caches()

    return undo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", action="store_true", help="dry run in the Triton interpreter (tiny shapes)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stage", type=int, default=2, help="1: the first run's candidates; 2: split / window tiles")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds: later rounds are skipped past it")
    a = ap.parse_args()
    family = "cpu"
    if a.cpu:
        B.use_cpu()
        B.TIMERS.update(throughput=B._host_throughput, latency=B._host_latency)
        G.LAYERS = 2
        a.rounds = 1
    else:
        from vllm_xpu_attn.kernels.providers.triton.tiles import device_family

        family = device_family(torch.device("cuda"))
    copy = None if a.cpu else B.copy_tbps()
    print(json.dumps({"device": "cpu" if a.cpu else torch.cuda.get_device_name(), "family": family, "copy_tbps": copy}))
    gen = torch.Generator(device=B.DEVICE).manual_seed(0)
    t0 = time.time()
    times: dict[tuple[str, str], list[float]] = {}
    for key, r in rows(a.cpu):
        q, caches, pt, seq = G.inputs(r, gen)
        keys = r.ctx if r.window < 0 else min(r.ctx, r.window + 1)
        kv_bytes = 2 * r.batch * keys * r.hkv * r.d * caches[0][0].element_size()
        ref = None
        for rnd in range(a.rounds):
            if rnd and time.time() - t0 > a.budget:
                break
            for name, over in candidates(key, a.stage):
                undo = apply(over, family)
                try:
                    t, out, _ = G.ours(r, q, caches, pt, seq, gen)
                    cfg = next(iter(get_provider("triton")._configs.values()), None)
                    splits = getattr(cfg, "num_splits", None)
                except Exception as e:  # noqa: BLE001 - record, never hide
                    print(json.dumps({"row": r.name, "cand": name, "error": f"{type(e).__name__}: {str(e)[:300]}"}))
                    continue
                finally:
                    undo()
                if ref is None:
                    ref = out
                diff = float((out.float() - ref.float()).abs().max())
                times.setdefault((r.name, name), []).append(t["us"])
                pct = 100 * kv_bytes / (t["us"] * 1e-6) / 1e12 / copy if copy else None
                print(
                    json.dumps(
                        {
                            "round": rnd,
                            "row": r.name,
                            "cand": name,
                            "splits": splits,
                            **t,
                            "pct_copy": pct,
                            "max_abs_diff_vs_first": diff,
                            "t": round(time.time() - t0, 1),
                        }
                    ),
                    flush=True,
                )
        if copy:
            for name, _ in candidates(key, a.stage):
                ts = times.get((r.name, name))
                if ts:
                    med = statistics.median(ts)
                    print(
                        json.dumps(
                            {
                                "summary": r.name,
                                "cand": name,
                                "us": round(med, 2),
                                "n": len(ts),
                                "pct_copy": round(100 * kv_bytes / (med * 1e-6) / 1e12 / copy, 1),
                            }
                        ),
                        flush=True,
                    )
        del q, caches
        if not a.cpu:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
