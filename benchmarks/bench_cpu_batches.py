"""Model-level time per token in vLLM on the CPU at several batch sizes: this backend (torch_sdpa) vs vLLM's own
CPU_ATTN, processes alternating (own, ours, own, ours, ...), medians over the rounds.

    python benchmarks/bench_cpu_batches.py --out docs/cpu/cpu_batches.json [--batches 1 8 32] [--rounds 3]
        [--max-tokens 32] [--real-model .venvs/smollm2-135m-instruct] [--vllm-python .venvs/vllm/bin/python]

The prompts are the main job's questions with the chat template (bench_cpu_provider.py's), cycled to the batch
size (28-50 tokens each; contexts stay short: the long-context cost is bench_cpu_attention.py's job). Per round
and backend one vLLM process (SmolLM2-135M-Instruct, fp32, eager, no prefix cache) warms up, then per batch size
times ``generate`` with max_tokens=1 (prefill: ms per prompt token) and with max_tokens=N (decode: (t_N - t_1) /
(batch x (N - 1)) ms per output token). Reported: medians over the rounds, ours / own, and whether the greedy
tokens are identical. Measures, never asserts. Writes the JSON and a PNG beside it (where matplotlib imports).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def worker(a) -> int:
    """One vLLM process: every batch size of ``a.batches``, once each after a warm-up."""
    os.environ["XPU_ATTN_ENABLE"] = "0" if a.backend == "own" else "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import real_model as rm
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tok = AutoTokenizer.from_pretrained(a.model)
    base = [rm.chat_ids(tok, q) for q in rm.DEMO_QUESTIONS]
    llm = LLM(
        model=a.model, dtype="float32", seed=0, max_model_len=1024, enforce_eager=True, enable_prefix_caching=False
    )
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    full = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True)
    res = {}
    for n in a.batches:
        prompts = [{"prompt_token_ids": base[i % len(base)]} for i in range(n)]
        llm.generate(prompts, full, use_tqdm=False)  # warm-up at this batch size
        t0 = time.perf_counter()
        llm.generate(prompts, one, use_tqdm=False)
        t1 = time.perf_counter()
        outs = llm.generate(prompts, full, use_tqdm=False)
        t2 = time.perf_counter()
        res[str(n)] = {
            "t1": t1 - t0,
            "tn": t2 - t1,
            "prompt_tokens": sum(len(p["prompt_token_ids"]) for p in prompts),
            "token_ids": [list(o.outputs[0].token_ids) for o in outs],
        }
    if a.backend == "ours":
        from vllm_xpu_attn.kernels.api import chosen_providers

        res["providers"] = chosen_providers()
    Path(a.out).write_text(json.dumps(res))
    return 0


def main() -> int:
    venvs = ROOT / ".venvs"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", choices=["own", "ours"])
    ap.add_argument("--model", default=str(venvs / "smollm2-135m-instruct"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--vllm-python", default=str(venvs / "vllm" / "bin" / "python"))
    ap.add_argument("--out", default=str(ROOT / "docs" / "cpu" / "cpu_batches.json"))
    ap.add_argument("--replot", metavar="JSON", help="only draw the PNG of an earlier run's JSON (beside it)")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.replot:
        plot(json.loads(Path(a.replot).read_text()), Path(a.replot).with_suffix(".png"))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="bench_cpu_batches-"))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("XPU_ATTN_KERNEL", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    raw: dict = {"own": [], "ours": []}
    for r in range(a.rounds):
        for backend in ("own", "ours"):
            out = tmp / f"{backend}-{r}.json"
            cmd = [
                a.vllm_python,
                str(Path(__file__).resolve()),
                "--worker",
                "--backend",
                backend,
                "--model",
                a.model,
                "--max-tokens",
                str(a.max_tokens),
                "--out",
                str(out),
                "--batches",
                *map(str, a.batches),
            ]
            t0 = time.time()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
            if proc.returncode != 0 or not out.exists():
                raise SystemExit(
                    f"{backend} round {r} failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}"
                )
            raw[backend].append(json.loads(out.read_text()))
            print(f"[bench] round {r} {backend}: {time.time() - t0:.0f} s", flush=True)
    rows = []
    for n in a.batches:
        row = {"batch": n}
        for backend in ("own", "ours"):
            runs = [x[str(n)] for x in raw[backend]]
            pre = [x["t1"] / x["prompt_tokens"] * 1e3 for x in runs]
            dec = [(x["tn"] - x["t1"]) / (n * (a.max_tokens - 1)) * 1e3 for x in runs]
            row[backend] = {
                "prefill_ms_per_prompt_token": statistics.median(pre),
                "prefill_runs": pre,
                "decode_ms_per_output_token": statistics.median(dec),
                "decode_runs": dec,
                "prompt_tokens": runs[0]["prompt_tokens"],
            }
        row["ratio_prefill"] = row["ours"]["prefill_ms_per_prompt_token"] / row["own"]["prefill_ms_per_prompt_token"]
        row["ratio_decode"] = row["ours"]["decode_ms_per_output_token"] / row["own"]["decode_ms_per_output_token"]
        own_ids, our_ids = raw["own"][0][str(n)]["token_ids"], raw["ours"][0][str(n)]["token_ids"]
        row["identical_to_own"] = f"{sum(x == y for x, y in zip(own_ids, our_ids))}/{n}"
        rows.append(row)
        print(
            f"batch {n:3}: prefill {row['ours']['prefill_ms_per_prompt_token']:.3f} vs "
            f"{row['own']['prefill_ms_per_prompt_token']:.3f} ms/token (x{row['ratio_prefill']:.2f}), decode "
            f"{row['ours']['decode_ms_per_output_token']:.3f} vs {row['own']['decode_ms_per_output_token']:.3f} "
            f"ms/token (x{row['ratio_decode']:.2f}), identical {row['identical_to_own']}",
            flush=True,
        )
    import platform

    import_torch = subprocess.run(
        [a.vllm_python, "-c", "import torch, vllm; print(torch.__version__, vllm.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    report = {
        "what": "vLLM, SmolLM2-135M-Instruct fp32: ms per token, medians of alternating rounds (one process "
        "each); ratio = torch_sdpa (this backend) / CPU_ATTN (vLLM's own)",
        "max_tokens": a.max_tokens,
        "rounds": a.rounds,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "torch": import_torch[0] if import_torch else None,
        "vllm": import_torch[1] if len(import_torch) > 1 else None,
        "providers": raw["ours"][0].get("providers"),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "rows": rows,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"[bench] wrote {out}")
    try:
        plot(report, out.with_suffix(".png"))
        print(f"[bench] wrote {out.with_suffix('.png')}")
    except ImportError:
        print("[bench] matplotlib not importable here: no PNG (then --replot JSON where it is)")
    return 0


def plot(report: dict, path: Path) -> None:
    """Bars: ours / own per batch size, prefill and decode side by side, with the 1.0 target line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    w = 0.38
    for i, (key, rk, label) in enumerate(
        (
            ("prefill_ms_per_prompt_token", "ratio_prefill", "prefill"),
            ("decode_ms_per_output_token", "ratio_decode", "decode"),
        )
    ):
        bars = ax.bar([x + i * w for x in range(len(rows))], [r[rk] for r in rows], w, label=label)
        for bar, r in zip(bars, rows):
            ax.annotate(
                f"x{r[rk]:.2f}\n{r['ours'][key]:.3g} vs {r['own'][key]:.3g} ms",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
    ax.axhline(1.0, color="#aa0000", lw=1, ls="--", label="target: 1.0x CPU_ATTN")
    ax.set_xticks([x + w / 2 for x in range(len(rows))], [f"batch {r['batch']}" for r in rows])
    ax.set_ylabel("torch_sdpa / CPU_ATTN (time per token)")
    ax.set_ylim(0, max(max(r["ratio_prefill"], r["ratio_decode"]) for r in rows) * 1.3)
    ax.legend(fontsize=8)
    ax.set_title(
        f"vLLM {report.get('vllm')}, SmolLM2-135M fp32, {report['cpu_count']} cores, "
        f"median of {report['rounds']} alternating rounds",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
