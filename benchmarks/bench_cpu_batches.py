"""Model-level time per token on the CPU at several batch sizes, in vLLM or SGLang: this backend vs the engine's
own CPU backend (vLLM CPU_ATTN, SGLang torch_native), measured in pairs.

    python benchmarks/bench_cpu_batches.py --out docs/cpu/cpu_batches.json [--engine vllm|sglang]
        [--batches 1 8 32] [--reps 9] [--max-tokens 32] [--context N]
        [--start own,ours|ours,own] [--aa] [--fresh [--warmup-batch K]] [--model .venvs/smollm2-135m-instruct]
        [--vllm-python ...] [--sglang-python ...]

By default both engines stay up side by side, one process each (SmolLM2-135M-Instruct, fp32, eager, no prefix / radix
cache), and take turns: per batch size both warm up, then each repetition times own and ours back to back (the
order swapped every repetition), one call of every prompt at once with max_tokens=N each. The call is timed from
inside (vLLM: its engine stepped here; SGLang: the stream of tokens): prefill = the time until every request has
its first token, per prompt token; decode = the time from then to the last token, per token generated in it. So
neither is a difference of two calls (at 2,048-token prompts the prefill is seconds and the decode a fraction of
it). The idle engine waits on a pipe (SGLang's scheduler with sleep_on_idle: else it spins on a core), so one
engine runs at a time. Why pairs: on a shared machine the speed drifts by 10-40 % over minutes; two runs a few
seconds apart see the same drift, so the ratio of a pair cancels it where medians of separate processes do not.
Reported per batch size: the median over repetitions of the paired ratios ours / own (and their range), each
backend's median time, and whether the greedy tokens are identical. Measures, never asserts. Writes the JSON and
a PNG beside it (where matplotlib imports).

The prompts are the main job's questions with the chat template (bench_cpu_provider.py's), cycled to the batch
size (28-50 tokens each). ``--context N``: each prompt is instead its question after a shared-free filler of
other questions, N tokens in all (long contexts; no prefix cache, so every token is prefilled and attended).
``--aa`` (A/A calibration): the "ours" slot runs the engine's own backend too, so the ratios show what the method
reads for two identical engines: its own bias and spread at that shape.

``--fresh`` (for long prompts): no engine stays up. Every timed call gets a process of its own, alone on the
machine: start, one warm-up call, the timed call, exit; a pair is two such processes back to back (the order swapped
every repetition; ``--warmup-batch K``: the warm-up call runs K prompts, enough to meet every step shape of a long
batch at a fraction of its time). It costs a start-up per call, and it is the method the A/A run reads at 1.0x
where the side-by-side one does not: at batch 8 with 2,048-token prompts two identical vLLM engines read 1.10-1.19x
side by side, 0.96-1.06x a process per call (docs/cpu/profile.md, tenth and eleventh passes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOGS = HERE / "out"  # each engine's stderr (git-ignored)
MARK = "@@bench_cpu_batches "  # a worker's answer line (engine logs share its stdout)
HANDOVER_S = 0.5  # idle time between turns: the last engine's OpenMP threads stop spinning before the next runs


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


class Clock:
    """One generate call's timeline: when every request had its first token (the batch's prefill, chunked or
    not, with the first sampled token) and when the last one ended; the tokens generated between the two."""

    def __init__(self, n: int):
        self.t0 = time.perf_counter()
        self.n = n
        self.count = [0] * n
        self.t_first = None  # seconds from t0 to the moment every request had a token
        self.tokens_at_first = 0
        self.t_end = 0.0
        self.ticks = 0  # vLLM: engine steps (SGLang: streamed chunks)
        self.ticks_to_first = None

    def tokens(self, i: int, count: int) -> None:
        self.count[i] = count

    def tick(self) -> None:
        now = time.perf_counter() - self.t0
        self.ticks += 1
        if self.t_first is None and min(self.count) > 0:
            self.t_first, self.tokens_at_first, self.ticks_to_first = now, sum(self.count), self.ticks
        self.t_end = now

    def result(self) -> dict:
        return {
            "prefill_s": self.t_first,
            "decode_s": self.t_end - self.t_first,
            "decode_tokens": sum(self.count) - self.tokens_at_first,
            "ticks_to_first": self.ticks_to_first,
        }


def engine_vllm(a):
    """A vLLM engine in this process; returns generate(prompts, max_tokens) -> token ids per prompt."""
    os.environ["XPU_ATTN_ENABLE"] = "0" if a.backend == "own" else "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(a.kv_space_gb))
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

    engine = llm.llm_engine
    calls = iter(range(1 << 30))

    def generate(prompts, n):
        """Every prompt at once, stepped here: the time of each step that gives a request a token is seen."""
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        call = next(calls)
        for i, p in enumerate(prompts):
            engine.add_request(f"c{call}-{i}", {"prompt_token_ids": p}, sp)
        clock = Clock(len(prompts))
        ids: dict = {}
        while engine.has_unfinished_requests():
            outs = engine.step()
            for o in outs:
                i = int(o.request_id.rsplit("-", 1)[1])
                ids[i] = list(o.outputs[0].token_ids)
                clock.tokens(i, len(ids[i]))
            clock.tick()
        return [ids[i] for i in range(len(prompts))], clock

    def providers():
        if a.backend != "ours":
            return None
        from vllm_xpu_attn.kernels.api import chosen_providers

        return chosen_providers()

    return generate, providers, lambda: None


def engine_sglang(a):
    """An SGLang engine (its scheduler in a child process); the same generate as engine_vllm."""
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
        sleep_on_idle=True,  # else the idle engine's scheduler spins on a core while the other one runs
    )

    def generate(prompts, n):
        """Every prompt at once, streamed: each chunk is a request's new token(s) as the scheduler sends them."""
        sp = {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True}
        clock = Clock(len(prompts))
        ids: dict = {}
        for chunk in engine.generate(input_ids=prompts, sampling_params=sp, stream=True):
            i, got = chunk.get("index", 0), chunk.get("output_ids") or []
            done = chunk["meta_info"]["completion_tokens"]
            ids[i] = list(got) if len(got) == done else ids.get(i, []) + list(got)  # cumulative or incremental
            clock.tokens(i, done)
            clock.tick()
        if any(len(ids.get(i, ())) != n for i in range(len(prompts))):
            raise RuntimeError(f"SGLang streamed {[len(ids.get(i, ())) for i in range(len(prompts))]} tokens, not {n}")
        return [ids[i] for i in range(len(prompts))], clock

    return generate, lambda: None, engine.shutdown  # providers: from the scheduler's log (the driver reads it)


def worker(a) -> int:
    """One engine process serving the driver: a JSON command per stdin line, a MARK line per answer on stdout.

    {"batch": n, "max_tokens": m} -> {"prefill_s", "decode_s", "decode_tokens", "prompt_tokens", "token_ids"};
    {"providers": 1};
    EOF ends it."""
    generate, providers, shutdown = (engine_vllm if a.engine == "vllm" else engine_sglang)(a)
    base = _prompts(a)
    print(MARK + json.dumps({"ready": True}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if "providers" in cmd:
                ans = {"providers": providers()}
            else:
                prompts = [base[i % len(base)] for i in range(cmd["batch"])]
                ids, clock = generate(prompts, cmd["max_tokens"])
                ans = dict(clock.result(), prompt_tokens=sum(map(len, prompts)), token_ids=ids)
            print(MARK + json.dumps(ans), flush=True)
    finally:
        shutdown()
    return 0


class Engine:
    """The driver's handle on one worker process; its stdout lines other than answers are kept as its log."""

    def __init__(self, a, backend: str, env: dict, log: Path):
        py = a.vllm_python if a.engine == "vllm" else a.sglang_python
        served = "own" if a.aa else backend  # --aa: both slots run the engine's own backend
        cmd = [py, str(Path(__file__).resolve()), "--worker", "--engine", a.engine, "--backend", served]
        cmd += ["--context", str(a.context), "--model", a.model, "--max-tokens", str(a.max_tokens)]
        cmd += ["--kv-space-gb", str(a.kv_space_gb)]
        self.backend = backend
        self.log_path = log
        self.log: list[str] = []
        self._err = open(log, "w")
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True, bufsize=1
        )

    def answer(self, timeout_s: float = 3600) -> dict:
        t0 = time.time()
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
            self.log.append(line.rstrip("\n"))
            if time.time() - t0 > timeout_s:
                break
        self.close()
        tail = "\n".join(self.log[-40:]) + "\n" + self.log_path.read_text()[-4000:]
        raise SystemExit(f"the {self.backend} engine ended without an answer (rc {self.proc.poll()}):\n{tail}")

    def ask(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=120)
            except Exception:
                self.proc.kill()
        self._err.close()


def _pair_stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def main() -> int:
    venvs = ROOT / ".venvs"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--backend", choices=["own", "ours"])
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    ap.add_argument("--context", type=int, default=0, help="pad each prompt to this many tokens (0: the questions)")
    ap.add_argument("--model", default=str(venvs / "smollm2-135m-instruct"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--reps", type=int, default=9, help="timed pairs per batch size")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--start", choices=["own,ours", "ours,own"], default="own,ours", help="which engine starts first")
    ap.add_argument("--aa", action="store_true", help="A/A calibration: both slots run the engine's own backend")
    ap.add_argument("--fresh", action="store_true", help="a process per timed call, alone (no engine stays up)")
    ap.add_argument(
        "--warmup-batch", type=int, default=0, help="--fresh: the warm-up call's batch size (0: the timed one's)"
    )
    ap.add_argument("--kv-space-gb", type=int, default=4, help="vLLM's VLLM_CPU_KVCACHE_SPACE per engine")
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
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    LOGS.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env.pop("XPU_ATTN_KERNEL", None)
    path = [str(ROOT)] + ([str(ROOT / "sglang_compat" / "cpu_shims")] if a.engine == "sglang" else [])
    env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t_start = time.time()
    if a.fresh:
        rows, providers = _fresh(a, env, out)
    else:
        rows, providers = _side_by_side(a, env, out, t_start)
    report = _report(a, rows, providers)
    out.write_text(json.dumps(report, indent=1))
    print(f"[bench] wrote {out} ({time.time() - t_start:.0f} s)")
    try:
        plot(report, out.with_suffix(".png"))
        print(f"[bench] wrote {out.with_suffix('.png')}")
    except ImportError:
        print("[bench] matplotlib not importable here: no PNG (then --replot JSON where it is)")
    return 0


def _providers_said(e: Engine) -> list[str]:
    """SGLang: the providers the scheduler process logged (to stdout or stderr) as it served."""
    lines = e.log + e.log_path.read_text().splitlines()
    said = [ln for ln in lines if "xpu_attn (SGLang): providers" in ln]
    return sorted({ln.split("providers", 1)[1].strip() for ln in said})


def _side_by_side(a, env: dict, out: Path, t_start: float) -> tuple[list[dict], object]:
    """Both engines up for the whole run, taking turns."""
    engines: dict = {}
    try:
        for backend in a.start.split(","):  # one at a time: start-up is the heaviest part of a process
            engines[backend] = Engine(a, backend, env, LOGS / f"{out.stem}.{backend}.log")
            engines[backend].answer()
            print(f"[bench] {backend} engine up after {time.time() - t_start:.0f} s", flush=True)

        def call(backend: str, n: int) -> dict:
            time.sleep(HANDOVER_S)
            return engines[backend].ask(batch=n, max_tokens=a.max_tokens)

        rows = []
        for n in a.batches:
            for e in engines.values():
                e.ask(batch=n, max_tokens=a.max_tokens)  # warm-up at this batch size (and every compile it triggers)
            rows.append(_measure(a, n, call))
        providers = engines["ours"].ask(providers=1)["providers"]
    finally:
        for e in engines.values():
            e.close()
    if a.engine == "sglang":
        providers = _providers_said(engines["ours"])
    return rows, providers


def _fresh(a, env: dict, out: Path) -> tuple[list[dict], object]:
    """Every timed call in a process of its own, alone on the machine: start, warm up, time one call, exit."""
    said: dict = {}

    def call(backend: str, n: int) -> dict:
        t0 = time.time()
        e = Engine(a, backend, env, LOGS / f"{out.stem}.{backend}.log")
        try:
            e.answer()
            e.ask(batch=a.warmup_batch or n, max_tokens=a.max_tokens)  # warm-up: every kernel and step shape once
            got = e.ask(batch=n, max_tokens=a.max_tokens)
            if backend == "ours" and a.engine == "vllm" and "providers" not in said:
                said["providers"] = e.ask(providers=1)["providers"]
        finally:
            e.close()
        if backend == "ours" and a.engine == "sglang":
            said["providers"] = sorted(set(said.get("providers", [])) | set(_providers_said(e)))
        print(f"[bench] batch {n} {backend}: one process, {time.time() - t0:.0f} s", flush=True)
        time.sleep(HANDOVER_S)
        return got

    rows = [_measure(a, n, call) for n in a.batches]
    return rows, said.get("providers")


def _measure(a, n: int, call) -> dict:
    """One batch size, warmed up: ``a.reps`` pairs (order swapped each repetition); ``call(backend, n)`` times one
    generate call of that backend and returns the worker's answer."""
    runs: dict = {"own": [], "ours": []}
    ids: dict = {}
    for rep in range(a.reps):
        order = ("own", "ours") if rep % 2 == 0 else ("ours", "own")
        for backend in order:
            got = call(backend, n)
            ids.setdefault(backend, got["token_ids"])
            runs[backend].append(
                {
                    "prefill": got["prefill_s"] / got["prompt_tokens"] * 1e3,
                    "decode": got["decode_s"] / got["decode_tokens"] * 1e3,
                    "prompt_tokens": got["prompt_tokens"],
                    "ticks_to_first": got["ticks_to_first"],
                }
            )
    row: dict = {"batch": n}
    for backend in ("own", "ours"):
        rs = runs[backend]
        row[backend] = {
            "prefill_ms_per_prompt_token": statistics.median(r["prefill"] for r in rs),
            "prefill_runs": [r["prefill"] for r in rs],
            "decode_ms_per_output_token": statistics.median(r["decode"] for r in rs),
            "decode_runs": [r["decode"] for r in rs],
            "prompt_tokens": rs[0]["prompt_tokens"],
            "prefill_ticks": [r["ticks_to_first"] for r in rs],  # vLLM: steps until every request had a token
        }
    for phase in ("prefill", "decode"):
        pairs = [o[phase] / w[phase] for o, w in zip(runs["ours"], runs["own"])]
        row[f"pairs_{phase}"] = _pair_stats(pairs)
        row[f"ratio_{phase}"] = row[f"pairs_{phase}"]["median"]
    row["identical_to_own"] = f"{sum(x == y for x, y in zip(ids['own'], ids['ours']))}/{n}"
    print(
        f"batch {n:3}: prefill {row['ours']['prefill_ms_per_prompt_token']:.3f} vs "
        f"{row['own']['prefill_ms_per_prompt_token']:.3f} ms/token (pairs x{row['ratio_prefill']:.3f}, "
        f"{row['pairs_prefill']['min']:.2f}-{row['pairs_prefill']['max']:.2f}), decode "
        f"{row['ours']['decode_ms_per_output_token']:.3f} vs {row['own']['decode_ms_per_output_token']:.3f} ms/token "
        f"(pairs x{row['ratio_decode']:.3f}, {row['pairs_decode']['min']:.2f}-{row['pairs_decode']['max']:.2f}), "
        f"identical {row['identical_to_own']}",
        flush=True,
    )
    return row


def _report(a, rows: list[dict], providers) -> dict:
    import platform

    py = a.vllm_python if a.engine == "vllm" else a.sglang_python
    eng = subprocess.run(
        [py, "-c", f"import torch, {a.engine} as e; print(torch.__version__, e.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    own_name = "CPU_ATTN" if a.engine == "vllm" else "torch_native"
    return {
        "what": f"{a.engine}, SmolLM2-135M-Instruct fp32: ms per token; "
        + (
            "a process per timed call, alone, two back to back a pair; "
            if a.fresh
            else "both engines up, taking turns; "
        )
        + (
            f"A/A calibration: ratio = median over repetitions of the paired ratio of a second {own_name} engine "
            f"(the 'ours' slot) / {own_name}"
            if a.aa
            else f"ratio = median over repetitions of the paired ratio this backend / {own_name} (the engine's own)"
        ),
        "engine": a.engine,
        "own": own_name,
        "method": "fresh pairs" if a.fresh else "pairs",  # fresh: a process per timed call
        "context": a.context or None,
        "max_tokens": a.max_tokens,
        "reps": a.reps,
        "warmup_batch": (a.warmup_batch or "the timed batch") if a.fresh else "the timed batch, once per engine",
        "started": a.start,
        "aa": a.aa,  # True: "ours" is a second engine on the engine's own backend (the method's null reading)
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "torch": eng[0] if eng else None,
        a.engine: eng[1] if len(eng) > 1 else None,
        "providers": providers,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "rows": rows,
    }


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
        pk = "pairs_" + label
        err = [[r[rk] - r[pk]["min"] for r in rows], [r[pk]["max"] - r[rk] for r in rows]]
        bars = ax.bar([x + i * w for x in range(len(rows))], [r[rk] for r in rows], w, yerr=err, capsize=3, label=label)
        for bar, r in zip(bars, rows):
            ax.annotate(
                f"x{r[rk]:.2f}\n{r['ours'][key]:.3g} vs {r['own'][key]:.3g} ms",
                (bar.get_x() + bar.get_width() / 2, r[pk]["max"]),  # above the range bar
                ha="center",
                va="bottom",
                fontsize=7,
            )
    own = report.get("own", "CPU_ATTN")
    engine = report.get("engine", "vllm")
    ax.axhline(1.0, color="#aa0000", lw=1, ls="--", label=f"target: 1.0x {own}")
    ax.set_xticks([x + w / 2 for x in range(len(rows))], [f"batch {r['batch']}" for r in rows])
    slot = f"2nd {own} (A/A)" if report.get("aa") else "ours"  # --aa: the "ours" slot ran the engine's own
    ax.set_ylabel(f"{slot} / {own}, time per token\n(median of pairs; bar: min-max)")
    ax.set_ylim(0, max(max(r["pairs_prefill"]["max"], r["pairs_decode"]["max"]) for r in rows) * 1.35)
    ax.legend(fontsize=8)
    ax.set_title(
        f"{engine} {report.get(engine)}, SmolLM2-135M fp32"
        + (f", {report['context']}-token prompts" if report.get("context") else "")
        + f", {report['cpu_count']} cores, "
        f"median of {report['reps']} paired runs"
        + ("\n(a process per timed call)" if report.get("method") == "fresh pairs" else ""),
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
