"""Serve one engine's real HTTP server twice (its own attention backend, then vllm-xpu-attn), drive each
with the same seeded load (benchmarks/load_servers.py), shut each down cleanly, compare every request.

    .venvs/vllm/bin/python   benchmarks/serve_compare.py --engine vllm   --model DIR [--pressure] [--out FILE]
    .venvs/sglang/bin/python benchmarks/serve_compare.py --engine sglang --model DIR [--pressure] [--out FILE]
    (no --model: a tiny seeded Llama is made with tests/support/tiny_model.py under the output directory)

Servers (loopback, a free port, fp32, greedy):
- vllm:   `python -m vllm.entrypoints.openai.api_server` with XPU_ATTN_ENABLE=0 (vLLM's CPU_ATTN) and
          XPU_ATTN_ENABLE=1 (this backend, through the platform plugin's entry point);
- sglang: `python -m sglang.launch_server --device cpu --attention-backend torch_native`, then `xpu_attn`
          (sglang_compat/cpu_shims on PYTHONPATH: the CUDA wheel's one vllm._custom_ops import).
`--pressure`: a KV pool too small for the load, the same for both backends: vLLM
`--num-gpu-blocks-override` (preemption, counted by `vllm:num_preemptions` on /metrics) and SGLang
`--max-total-tokens` plus SGLANG_TEST_RETRACT (retraction, counted from its log: SGLANG_PRESSURE says why
the switch is needed).

Each server: wait for /health, one warm-up request (not counted), the load, then /metrics until nothing
runs or waits (cancelled streams were released), the stop signal, wait, exit code recorded (clean = 0 without
needing a kill; SIGINT for vLLM, SIGTERM for SGLang: STOP_SIGNAL). The report (JSON) holds both loads' summaries, the servers' facts and the comparison:
every request completed by both must have identical token ids (and text); a request cancelled by the
client in either run is compared on the tokens both received. Exit status 1 if anything required fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import load_servers  # noqa: E402

SERVED = "tiny"
# vLLM: XpuAttnBackend on accelerators, XpuAttnCpuBackend on the CPU
OURS_MARK = {"vllm": "routes attention to vllm_xpu_attn.vllm.backend.XpuAttn",
             "sglang": "xpu_attn (SGLang): providers"}
PROVIDER_MARK = re.compile(r"kernel provider '\w+' serves")  # whichever provider the device's priority picks
RETRACT_MARK = "KV cache pool is full. Retract requests."

# Load and pressure settings, shared by both backends of a run (the tests use these defaults).
DEFAULTS = dict(num_requests=192, concurrency=64, max_prompt=160, max_output=40, cancel=10)
VLLM_PRESSURE = ["--num-gpu-blocks-override", "20"]  # 20 blocks of 32 = 640 tokens; one request needs <= 200
SGLANG_POOL = ["--max-total-tokens", "32768"]  # 64 requests x 512-token context fit whole: no retraction
SGLANG_PRESSURE = ["--max-total-tokens", "1024", "--schedule-conservativeness", "0.05"]
# SGLang under this load did not run out of KV by itself: with 1024, 512 or 2048 tokens, conservativeness
# 0.05, longer outputs, overlap scheduling off, its admission (each new request reserves its whole
# max_tokens) kept the pool at <= 0.85-1.00 usage and "KV cache pool is full. Retract requests." never
# came. So the small pool stays (a natural retraction is counted if it comes) and SGLang's own test switch
# SGLANG_TEST_RETRACT=1 forces retract_decode every SGLANG_TEST_RETRACT_INTERVAL decode steps: the same
# path (free the request's KV, requeue it, prefill it again over prompt + tokens so far), logged as
# "Testing retraction. #retracted_reqs: N".
SGLANG_PRESSURE_ENV = {"SGLANG_TEST_RETRACT": "1", "SGLANG_TEST_RETRACT_INTERVAL": "5"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_cmd(engine: str, backend: str, model: str, port: int, pressure: bool, extra: list[str]) -> tuple[list, dict]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    if engine == "vllm":
        env.update(XPU_ATTN_ENABLE="1" if backend == "ours" else "0",
                   VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "1"))
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
               "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
               "--max-model-len", "256" if pressure else "512", "--enforce-eager", "--seed", "0",
               "--block-size", "32"]  # (CPU default 128 > the shared prefixes: no hits; CPU_ATTN: multiple of 32)
        if pressure:
            cmd += VLLM_PRESSURE
    else:
        stubs = str(ROOT / "sglang_compat" / "cpu_shims")
        env["PYTHONPATH"] = stubs + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", model, "--served-model-name", SERVED,
               "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
               "--attention-backend", "xpu_attn" if backend == "ours" else "torch_native",
               "--dtype", "float32", "--context-length", "512", "--mem-fraction-static", "0.7",
               "--disable-cuda-graph", "--random-seed", "0", "--skip-server-warmup", "--enable-metrics",
               "--log-level", "info"]
        # A fixed KV pool (SGLANG_POOL, or SGLANG_PRESSURE's smaller one) under a high static fraction: SGLang sizes
        # the pool from the host's free memory, measured before the weights load and again after, and a low fraction
        # fails start-up when another process on a shared host takes memory in between.
        if pressure:
            cmd += SGLANG_PRESSURE
            env.update(SGLANG_PRESSURE_ENV)
        else:
            cmd += SGLANG_POOL
    return cmd + list(extra), env


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except Exception as e:  # noqa: BLE001
        return -1, repr(e)


def parse_metrics(text: str) -> dict:
    """Prometheus text -> {name: summed value} for the series this report uses."""
    keep = ("vllm:num_preemptions", "vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:request_success",
            "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_retracted_requests_total",
            "sglang:cache_hit_rate", "sglang:prompt_tokens_total", "sglang:generation_tokens_total")
    out: dict = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m or not m.group(1).startswith(keep):
            continue
        name = m.group(1)
        if name.endswith("_created"):
            continue
        if name.startswith("vllm:") and name.endswith("_total"):  # vLLM's counters, named as in its source
            name = name[: -len("_total")]
        labels = m.group(2) or ""
        if name.startswith("vllm:request_success"):  # keep the finish reason
            fr = re.search(r'finished_reason="([^"]+)"', labels)
            name = f"{name}[{fr.group(1) if fr else ''}]"
        out[name] = out.get(name, 0.0) + float(m.group(3))
    return out


def serve_and_load(engine: str, backend: str, model: str, workdir: Path, *, pressure: bool, load: dict,
                   seed: int, vocab_size: int, startup_s: float, deadline_s: float, extra: list[str]) -> dict:
    port = free_port()
    cmd, env = server_cmd(engine, backend, model, port, pressure, extra)
    tag = f"{engine}-{backend}{'-pressure' if pressure else ''}"
    log_path = workdir / f"{tag}.log"
    info: dict = {"backend": backend, "cmd": cmd, "log": str(log_path)}
    base = f"http://127.0.0.1:{port}"
    t_start = time.perf_counter()
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=str(workdir))
    try:
        while True:  # /health
            if proc.poll() is not None:
                raise RuntimeError(f"{tag}: server exited during start-up (rc {proc.returncode})")
            if time.perf_counter() - t_start > startup_s:
                raise RuntimeError(f"{tag}: no /health within {startup_s:.0f}s")
            if http_get(base + "/health", 2)[0] == 200:
                break
            time.sleep(1)
        info["startup_s"] = round(time.perf_counter() - t_start, 1)
        reqs = load_servers.build_requests(load["num_requests"], seed=seed, vocab_size=vocab_size,
                                           max_prompt=load["max_prompt"], max_output=load["max_output"],
                                           n_cancel=load["cancel"])
        warm = asyncio.run(load_servers.run_load(base + "/v1", SERVED,
                                                 [load_servers.Req(0, [5, 6, 7, 8], 2, False)],
                                                 concurrency=1, deadline_s=120))
        if warm["summary"]["completed"] != 1:
            raise RuntimeError(f"{tag}: warm-up request failed: {warm['results']}")
        rec = asyncio.run(load_servers.run_load(base + "/v1", SERVED, reqs, concurrency=load["concurrency"],
                                                deadline_s=deadline_s))
        metrics, t_idle = {}, time.perf_counter()
        while time.perf_counter() - t_idle < 60:  # everything released (cancelled streams included)?
            code, text = http_get(base + "/metrics", 5)
            metrics = parse_metrics(text) if code == 200 else {"error": text}
            busy = sum(metrics.get(k, 0) for k in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                                    "sglang:num_running_reqs", "sglang:num_queue_reqs"))
            if code == 200 and busy == 0:
                break
            time.sleep(1)
        info["metrics_after_load"] = metrics
        info["idle_after_load"] = code == 200 and busy == 0
    finally:
        info["shutdown"] = stop(proc, STOP_SIGNAL[engine])
    log = log_path.read_text(errors="replace")
    info["ours_served"] = OURS_MARK[engine] in log and (engine != "vllm" or PROVIDER_MARK.search(log) is not None)
    # which providers served (vLLM logs each choice; SGLang's plugin line lists the layer's providers)
    info["providers"] = sorted(set(re.findall(r"kernel provider '(\w+)' serves", log))
                               | set(re.findall(r"'(?:prefill|decode)': '(\w+)'", log)))
    lines = [re.sub(r"^.*?(vllm-xpu-attn:|vllm_xpu_attn:|xpu_attn \(SGLang\))", r"\1", ln.strip())
             for ln in log.splitlines() if "vllm-xpu-attn:" in ln or "vllm_xpu_attn:" in ln or "xpu_attn (SGLang)" in ln]
    info["plugin_lines"] = sorted(set(lines))[:8]
    info["cached_tokens_logged"] = sum(int(m) for m in re.findall(r"#cached-token: (\d+)", log))  # SGLang prefill
    info["retractions_logged"] = sum(int(m) for m in re.findall(r"Retract requests\. #retracted_reqs: (\d+)", log))
    info["forced_retractions_logged"] = sum(int(m) for m in re.findall(r"Testing retraction\. #retracted_reqs: (\d+)",
                                                                       log))
    info["tracebacks_in_log"] = log.count("Traceback (most recent call last)")
    rec["server"] = info
    return rec


# The signal each server documents as its graceful stop: vLLM's API server stops on SIGINT (Ctrl-C) with
# exit 0; SGLang's launch_server drains requests and exits 0 on SIGTERM, while SIGINT reaches it as a
# KeyboardInterrupt in uvicorn (a traceback, exit 1, its detokenizer killed with -9).
STOP_SIGNAL = {"vllm": signal.SIGINT, "sglang": signal.SIGTERM}


def stop(proc: subprocess.Popen, sig: signal.Signals = signal.SIGINT, wait_s: float = 90) -> dict:
    """Send the graceful stop signal, wait; only if that fails SIGTERM, then SIGKILL of the server's own group."""
    out = {"signal": sig.name}
    if proc.poll() is not None:  # it died by itself: take down what it left in its own group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return {"signal": None, "rc": proc.returncode, "clean": False, "note": "had exited already"}
    t0 = time.perf_counter()
    proc.send_signal(sig)
    try:
        out["rc"] = proc.wait(wait_s)
        out["clean"] = out["rc"] == 0
    except subprocess.TimeoutExpired:
        out["clean"] = False
        for sig, w in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                out["rc"] = proc.wait(w)
                out["forced"] = sig.name
                break
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
    out["shutdown_s"] = round(time.perf_counter() - t0, 1)
    try:  # no child (engine core, scheduler, detokenizer) left behind in the server's group
        os.killpg(proc.pid, 0)
        time.sleep(3)
        os.killpg(proc.pid, 0)
        out["leftover_children"] = True
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        out["leftover_children"] = False
    return out


def compare(base: dict, ours: dict) -> dict:
    """Every request: both ok -> identical token ids and text; a cancel involved -> common prefix equal."""
    n = len(base["results"])
    identical = compared = prefix_checked = 0
    mismatches = []
    for a, b in zip(base["results"], ours["results"]):
        if a["status"] == b["status"] == "ok":
            compared += 1
            if a["token_ids"] == b["token_ids"] and a["text"] == b["text"]:
                identical += 1
            else:
                k = next((i for i, (x, y) in enumerate(zip(a["token_ids"], b["token_ids"])) if x != y),
                         min(len(a["token_ids"]), len(b["token_ids"])))
                mismatches.append({"idx": a["idx"], "first_diff": k, "own": a["token_ids"], "ours": b["token_ids"]})
        elif {a["status"], b["status"]} <= {"ok", "cancelled"}:
            prefix_checked += 1
            m = min(len(a["token_ids"]), len(b["token_ids"]))
            if a["token_ids"][:m] != b["token_ids"][:m]:
                mismatches.append({"idx": a["idx"], "cancelled_prefix": True, "own": a["token_ids"],
                                   "ours": b["token_ids"]})
    return {"requests": n, "completed_by_both": compared, "identical": identical,
            "cancel_prefix_checked": prefix_checked, "mismatches": mismatches[:10], "n_mismatches": len(mismatches)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--pressure", action="store_true")
    ap.add_argument("--out", default=None, help="default benchmarks/out/load-<engine>[-pressure].json")
    ap.add_argument("--summary-out", default=None,
                    help="also write the report without the per-request arrays (small; the committed copies in "
                         "docs/cpu/http_load-runs/ are these, via bench_http_load.py)")
    ap.add_argument("--seed", type=int, default=0)
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--startup-s", type=float, default=300)
    ap.add_argument("--deadline-s", type=float, default=300)
    ap.add_argument("--backends", default="own,ours", help="which to run, in order (default own,ours)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra server argument (repeatable)")
    ap.add_argument("--reference", default=None,
                    help="a report of the same load without --pressure: each backend's results under pressure "
                         "must also equal its engine's own backend there (tokens unchanged by the pressure)")
    a = ap.parse_args()

    out = Path(a.out or HERE / "out" / f"load-{a.engine}{'-pressure' if a.pressure else ''}.json").resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    workdir = out.parent / (out.stem + "-logs")
    workdir.mkdir(exist_ok=True)
    model = a.model
    if model is None:
        sys.path.insert(0, str(ROOT / "tests" / "support"))
        from tiny_model import make_tiny_model
        model = make_tiny_model(workdir / "tiny-llama", "llama", seed=1)
    model = str(Path(model).resolve())  # the servers run in workdir
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    load = {k: getattr(a, k) for k in DEFAULTS}
    runs = {}
    for backend in a.backends.split(","):
        runs[backend] = serve_and_load(a.engine, backend, model, workdir, pressure=a.pressure, load=load,
                                       seed=a.seed, vocab_size=min(vocab, 258), startup_s=a.startup_s,
                                       deadline_s=a.deadline_s, extra=a.server_arg)
        s = runs[backend]["summary"]
        print(f"[{a.engine}/{backend}] {s['completed']}/{s['requests']} ok, {s['cancelled']} cancelled, "
              f"{s['errors']} errors, {s['lost']} lost; {s['requests_per_s']} req/s, p50 {s['latency_p50_s']:.2f}s "
              f"p99 {s['latency_p99_s']:.2f}s; shutdown {runs[backend]['server']['shutdown']}", flush=True)
    report = {"engine": a.engine, "pressure": a.pressure, "load": load, "seed": a.seed, "model": model,
              "backends": {b: {"summary": r["summary"], "server": r["server"]} for b, r in runs.items()},
              "requests": next(iter(runs.values()))["requests"],
              "results": {b: r["results"] for b, r in runs.items()}}
    ok = True
    for b, r in runs.items():
        s, srv = r["summary"], r["server"]
        ok &= s["errors"] == 0 and s["lost"] == 0 and srv["shutdown"].get("clean", False)
        ok &= srv["idle_after_load"] and srv["ours_served"] == (b == "ours")
        ok &= s["completed"] + s["cancelled"] == s["requests"]
        if a.pressure:
            srv["pressure_events"] = (srv["metrics_after_load"].get("vllm:num_preemptions", 0) if a.engine == "vllm"
                                      else srv["retractions_logged"] + srv["forced_retractions_logged"])
            ok &= srv["pressure_events"] > 0
    if "own" in runs and "ours" in runs:
        report["comparison"] = cmp = compare(runs["own"], runs["ours"])
        ok &= cmp["n_mismatches"] == 0 and cmp["identical"] == cmp["completed_by_both"] > 0
        print(f"[{a.engine}] identical: {cmp['identical']}/{cmp['completed_by_both']} completed by both; "
              f"{cmp['cancel_prefix_checked']} cancelled compared on their common prefix; "
              f"{cmp['n_mismatches']} mismatches", flush=True)
    for b, r in runs.items():  # the shared prefixes were served from the cache (not required under pressure)
        srv = r["server"]
        srv["prefix_hits"] = (srv["metrics_after_load"].get("vllm:prefix_cache_hits", 0) if a.engine == "vllm"
                              else srv["cached_tokens_logged"])
        ok &= a.pressure or srv["prefix_hits"] > 0
    if a.reference:
        ref = json.loads(Path(a.reference).read_text())
        assert ref["requests"] == report["requests"], "--reference ran a different load"
        report["vs_unpressured_own"] = {}
        for b, r in runs.items():
            c = compare({"results": ref["results"]["own"]}, r)
            report["vs_unpressured_own"][b] = c
            ok &= c["n_mismatches"] == 0
            print(f"[{a.engine}] {b} under pressure vs own backend unpressured: identical {c['identical']}/"
                  f"{c['completed_by_both']}, {c['n_mismatches']} mismatches", flush=True)
    report["passed"] = bool(ok)
    out.write_text(json.dumps(report))
    if a.summary_out:
        small = {k: v for k, v in report.items() if k not in ("requests", "results")}
        small["full_report"] = "per-request prompts, token ids and latencies: run serve_compare.py --out"
        Path(a.summary_out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.summary_out).write_text(json.dumps(small, indent=1) + "\n")
    print(f"[{a.engine}] report {out} passed={ok}", flush=True)
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
