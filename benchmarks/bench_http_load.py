"""HTTP servers under load, ours against each engine's own CPU backend: medians of alternating runs (issue #48).

Runs ``serve_compare.py`` ``--rounds`` times per engine, the backends' order alternating (own, ours / ours, own /
...), each run in its engine's venv, and writes one JSON (every run's summaries, the medians, ours / own ratios)
and a plot beside it.

    python benchmarks/bench_http_load.py --model .venvs/smollm2-135m-instruct --pressure --rounds 3 \\
        --vllm-python .venvs/vllm/bin/python --sglang-python .venvs/sglang/bin/python --out docs/cpu/http_load.json

Ratios: requests/s ours / own (>= 0.95 is issue #48's target); time to first token p50 / p99 own / ours (the same
orientation: above 1 = ours faster): of the medians (``ratio``), and the median of each run's own ratio with its
range (``paired``: a run serves both backends minutes apart, so its ratio cancels the drift between runs). A run
that fails serve_compare's own checks (errors, lost requests, a greedy token differing, an unclean shutdown, no
preemption / retraction under ``--pressure``) is kept in the record with its exit status and left out of the
medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIELDS = ("requests_per_s", "ttft_p50_s", "ttft_p99_s", "latency_p50_s", "latency_p99_s")


def one_run(engine: str, python: str, model: str, order: str, pressure: bool, out: Path, summary: Path) -> dict:
    """One serve_compare.py run (both backends in ``order``; the full report to ``out``, the one without the
    per-request arrays to ``summary``); its summaries, comparison and exit status."""
    cmd = [python, str(HERE / "serve_compare.py"), "--engine", engine, "--model", model, "--backends", order]
    cmd += ["--out", str(out), "--summary-out", str(summary)]
    if pressure:
        cmd.append("--pressure")
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    row = {"engine": engine, "order": order, "rc": p.returncode, "wall_s": round(time.time() - t0, 1)}
    row["summary_report"] = os.path.relpath(summary, ROOT)
    row["started_utc"] = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0))
    if not out.exists():
        row["error"] = (p.stderr or p.stdout)[-1500:]
        return row
    rep = json.loads(out.read_text())
    for b, r in rep["backends"].items():
        s, srv = r["summary"], r["server"]
        row[b] = {k: s.get(k) for k in FIELDS + ("completed", "cancelled", "errors", "lost")}
        row[b]["pressure_events"] = srv.get("pressure_events")
        row[b]["ours_served"] = srv.get("ours_served")
        row[b]["providers"] = srv.get("providers")
    row["comparison"] = {k: rep.get("comparison", {}).get(k) for k in ("completed_by_both", "identical")}
    print(f"[http] {engine} {order}: rc {p.returncode}, own {row['own']['requests_per_s']} / ours "
          f"{row['ours']['requests_per_s']} req/s, identical {row['comparison']['identical']}/"
          f"{row['comparison']['completed_by_both']}", flush=True)  # fmt: skip
    return row


def medians(runs: list[dict]) -> dict:
    """Per backend, the median of each field over the runs that passed; ours / own ratios of the medians."""
    good = [r for r in runs if r["rc"] == 0]
    med = {}
    for b in ("own", "ours"):
        med[b] = {k: statistics.median(r[b][k] for r in good) if good else None for k in FIELDS}
    if not good:
        return {"runs_counted": 0, **med}
    ratio = {
        "requests_per_s": med["ours"]["requests_per_s"] / med["own"]["requests_per_s"],
        "ttft_p50": med["own"]["ttft_p50_s"] / med["ours"]["ttft_p50_s"],
        "ttft_p99": med["own"]["ttft_p99_s"] / med["ours"]["ttft_p99_s"],
    }
    # each run serves both backends back to back: its own ratio cancels the machine's drift between runs
    pairs = {
        "requests_per_s": [r["ours"]["requests_per_s"] / r["own"]["requests_per_s"] for r in good],
        "ttft_p50": [r["own"]["ttft_p50_s"] / r["ours"]["ttft_p50_s"] for r in good],
        "ttft_p99": [r["own"]["ttft_p99_s"] / r["ours"]["ttft_p99_s"] for r in good],
    }
    paired = {k: {"median": round(statistics.median(v), 3), "min": round(min(v), 3), "max": round(max(v), 3)}
              for k, v in pairs.items()}  # fmt: skip
    return {"runs_counted": len(good), **med, "ratio": {k: round(v, 3) for k, v in ratio.items()}, "paired": paired}


def plot(rec: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = [e for e in ("vllm", "sglang") if e in rec["engines"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (key, label) in zip(axes, (("requests_per_s", "requests/s"), ("ttft_p50_s", "TTFT p50 (s)"),
                                       ("ttft_p99_s", "TTFT p99 (s)"))):  # fmt: skip
        for i, e in enumerate(engines):
            runs = [r for r in rec["engines"][e]["runs"] if "own" in r]
            for j, b in enumerate(("own", "ours")):
                xs = [i * 3 + j] * len(runs)
                ax.scatter(xs, [r[b][key] for r in runs], color=f"C{j}", label=b if i == 0 else None)
                m = rec["engines"][e]["median"].get(b, {}).get(key)
                if m is not None:
                    ax.hlines(m, i * 3 + j - 0.3, i * 3 + j + 0.3, color=f"C{j}")
        ax.set_xticks([i * 3 + 0.5 for i in range(len(engines))], engines)
        ax.set_title(label)
        ax.legend()
    fig.suptitle(f"HTTP load, {rec['model_name']}, {'pressure, ' if rec['pressure'] else ''}runs and medians")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="the served model's directory (required unless --replot)")
    ap.add_argument("--pressure", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--vllm-python", default=None, help="the vLLM venv's python (leave out: no vLLM runs)")
    ap.add_argument("--sglang-python", default=None, help="the SGLang venv's python (leave out: no SGLang runs)")
    ap.add_argument("--out", required=True, help="the JSON record; the plot (.png) and the runs' summary reports "
                    "(<out stem>-runs/) go beside it")  # fmt: skip
    ap.add_argument("--work", default=str(HERE / "out" / "http_load-runs"), help="the runs' full reports and logs")
    ap.add_argument("--replot", action="store_true", help="only draw the PNG of the record at --out (beside it)")
    a = ap.parse_args()
    out = Path(a.out).resolve()
    if a.replot:
        return plot(json.loads(out.read_text()), out.with_suffix(".png"))
    if a.model is None:
        ap.error("--model is required")
    work, summaries = Path(a.work).resolve(), out.parent / (out.stem + "-runs")
    work.mkdir(parents=True, exist_ok=True)
    summaries.mkdir(parents=True, exist_ok=True)
    engines = {e: p for e, p in (("vllm", a.vllm_python), ("sglang", a.sglang_python)) if p}
    rec = {"model": a.model, "model_name": Path(a.model).name, "pressure": a.pressure, "rounds": a.rounds,
           "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
           "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "engines": {}}  # fmt: skip
    runs = {e: [] for e in engines}
    for i in range(a.rounds):  # engines interleaved too: a slow patch of the machine hits both
        for e, py in engines.items():
            order = "own,ours" if i % 2 == 0 else "ours,own"
            runs[e].append(
                one_run(e, py, a.model, order, a.pressure, work / f"{e}-{i}.full.json", summaries / f"{e}-{i}.json")
            )
            rec["engines"][e] = {"runs": runs[e], "median": medians(runs[e])}
            out.write_text(json.dumps(rec, indent=1) + "\n")
    plot(rec, out.with_suffix(".png"))
    for e, v in rec["engines"].items():
        print(f"[http] {e}: {v['median'].get('ratio')} over {v['median']['runs_counted']} runs", flush=True)
    sys.exit(0 if all(v["median"]["runs_counted"] == a.rounds for v in rec["engines"].values()) else 1)


if __name__ == "__main__":
    main()
