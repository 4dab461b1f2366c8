"""Model-level time per token on the CPU at several batch sizes, in vLLM or SGLang: this backend vs the engine's
own CPU backend (vLLM CPU_ATTN, SGLang torch_native), processes alternating (own, ours, own, ours, ...), medians
over the rounds.

    python benchmarks/bench_cpu_batches.py --out docs/cpu/cpu_batches.json [--engine vllm|sglang]
        [--batches 1 8 32] [--rounds 3] [--max-tokens 32] [--context N]
        [--real-model .venvs/smollm2-135m-instruct] [--vllm-python ...] [--sglang-python ...]

The prompts are the main job's questions with the chat template (bench_cpu_provider.py's), cycled to the batch
size (28-50 tokens each). ``--context N``: each prompt is instead its question after a shared-free filler of
other questions, N tokens in all (long contexts; no prefix cache, so every token is prefilled and attended).
Per round and backend one engine process (SmolLM2-135M-Instruct, fp32, eager, no prefix / radix cache) warms
up, then per batch size times ``generate`` with max_tokens=1 (prefill: ms per prompt token) and with
max_tokens=N (decode: (t_N - t_1) / (batch x (N - 1)) ms per output token). Reported: medians over the rounds,
ours / own, and whether the greedy tokens are identical. Measures, never asserts. Writes the JSON and a PNG
beside it (where matplotlib imports).
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


def _prompts(a) -> list[list[int]]:
    """The main job's chat questions as token ids; with ``--context N`` each padded in front to N tokens."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import real_model as rm
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    base = [rm.chat_ids(tok, q) for q in rm.DEMO_QUESTIONS]
    if not a.context:
        return base
    filler = tok(" ".join(rm.DEMO_QUESTIONS) + " ", add_special_tokens=False)["input_ids"]
    out = []
    for i, ids in enumerate(base):
        need = a.context - len(ids)
        pad = (filler[i:] + filler * (need // len(filler) + 2))[:need]  # a different offset per prompt: no sharing
        out.append(pad + ids)
    return out


def _time_batches(a, generate) -> dict:
    """Per batch size: warm-up, then generate with max_tokens=1 and max_tokens=N, timed."""
    base = _prompts(a)
    res = {}
    for n in a.batches:
        prompts = [base[i % len(base)] for i in range(n)]
        generate(prompts, a.max_tokens)  # warm-up at this batch size
        t0 = time.perf_counter()
        generate(prompts, 1)
        t1 = time.perf_counter()
        ids = generate(prompts, a.max_tokens)
        t2 = time.perf_counter()
        res[str(n)] = {"t1": t1 - t0, "tn": t2 - t1, "prompt_tokens": sum(map(len, prompts)), "token_ids": ids}
    return res


def worker_vllm(a) -> dict:
    os.environ["XPU_ATTN_ENABLE"] = "0" if a.backend == "own" else "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams

    llm = LLM(
        model=a.model,
        dtype="float32",
        seed=0,
        max_model_len=max(1024, a.context + a.max_tokens + 8),
        enforce_eager=True,
        enable_prefix_caching=False,
    )

    def generate(prompts, n):
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    res = _time_batches(a, generate)
    if a.backend == "ours":
        from vllm_xpu_attn.kernels.api import chosen_providers

        res["providers"] = chosen_providers()
    return res


def worker_sglang(a) -> dict:
    import sglang

    engine = sglang.Engine(
        model_path=a.model,
        device="cpu",
        attention_backend="torch_native" if a.backend == "own" else "xpu_attn",
        dtype="float32",
        context_length=max(1024, a.context + a.max_tokens + 8),
        mem_fraction_static=0.1,
        disable_cuda_graph=True,
        random_seed=0,
        skip_server_warmup=True,
        disable_radix_cache=True,
        log_level="error",
    )

    def generate(prompts, n):
        sp = {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True}
        return [r.get("output_ids") for r in engine.generate(input_ids=prompts, sampling_params=sp)]

    try:
        return _time_batches(a, generate)  # providers: from the scheduler process's log (main)
    finally:
        engine.shutdown()


def worker(a) -> int:
    """One engine process: every batch size of ``a.batches``, once each after a warm-up."""
    res = (worker_vllm if a.engine == "vllm" else worker_sglang)(a)
    Path(a.out).write_text(json.dumps(res))
    return 0


def main() -> int:
    venvs = ROOT / ".venvs"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", choices=["own", "ours"])
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    ap.add_argument("--context", type=int, default=0, help="pad each prompt to this many tokens (0: the questions)")
    ap.add_argument("--model", default=str(venvs / "smollm2-135m-instruct"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--vllm-python", default=str(venvs / "vllm" / "bin" / "python"))
    ap.add_argument("--sglang-python", default=str(venvs / "sglang" / "bin" / "python"))
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
    path = [str(ROOT)] + ([str(ROOT / "sglang_compat" / "cpu_shims")] if a.engine == "sglang" else [])
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    py = a.vllm_python if a.engine == "vllm" else a.sglang_python
    raw: dict = {"own": [], "ours": []}
    for r in range(a.rounds):
        for backend in ("own", "ours"):
            out = tmp / f"{backend}-{r}.json"
            cmd = [
                py,
                str(Path(__file__).resolve()),
                "--worker",
                "--engine",
                a.engine,
                "--context",
                str(a.context),
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
            got = json.loads(out.read_text())
            if a.engine == "sglang" and backend == "ours":
                log = proc.stdout + proc.stderr
                said = [ln for ln in log.splitlines() if "xpu_attn (SGLang): providers" in ln]
                got["providers"] = sorted({ln.split("providers", 1)[1].strip() for ln in said})
            raw[backend].append(got)
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

    eng = subprocess.run(
        [py, "-c", f"import torch, {a.engine} as e; print(torch.__version__, e.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    own_name = "CPU_ATTN" if a.engine == "vllm" else "torch_native"
    report = {
        "what": f"{a.engine}, SmolLM2-135M-Instruct fp32: ms per token, medians of alternating rounds (one process "
        f"each); ratio = this backend / {own_name} (the engine's own)",
        "engine": a.engine,
        "own": own_name,
        "context": a.context or None,
        "max_tokens": a.max_tokens,
        "rounds": a.rounds,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "torch": eng[0] if eng else None,
        a.engine: eng[1] if len(eng) > 1 else None,
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
    own = report.get("own", "CPU_ATTN")
    engine = report.get("engine", "vllm")
    ax.axhline(1.0, color="#aa0000", lw=1, ls="--", label=f"target: 1.0x {own}")
    ax.set_xticks([x + w / 2 for x in range(len(rows))], [f"batch {r['batch']}" for r in rows])
    ax.set_ylabel(f"{'+'.join(report.get('providers') or ['ours'])} / {own} (time per token)")
    ax.set_ylim(0, max(max(r["ratio_prefill"], r["ratio_decode"]) for r in rows) * 1.3)
    ax.legend(fontsize=8)
    ax.set_title(
        f"{engine} {report.get(engine)}, SmolLM2-135M fp32"
        + (f", {report['context']}-token prompts" if report.get("context") else "")
        + f", {report['cpu_count']} cores, "
        f"median of {report['rounds']} alternating rounds",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
