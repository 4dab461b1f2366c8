"""Engine side of the real-model runs (tests/support/real_model.py has the prompts and the transformers oracle).

One engine process per backend runs several configurations one after another (each its own
``LLM`` / ``sglang.Engine``, made, used and shut down in turn), so the engines' imports and start-up are
paid once per backend, not once per configuration (CI time):

    python tests/support/real_model_engine.py vllm|sglang ours|own PLAN_JSON OUT_JSON

PLAN_JSON: {"model": DIR, "prompts": [[ids]...], "runs": [RUN...]}; RUN keys:
  name            label of the run
  dtype           "float32" | "bfloat16"
  kv_cache_dtype  null (the engine's default) | "fp8_e4m3"
  budget          token budget per step (vLLM max_num_batched_tokens, SGLang chunked_prefill_size): chunked prefill
  subset          null (every prompt) | prompt indices
  again           prompt indices generated once more after the first round (prefix / radix-cache hits)
  teacher_force   null | [[ids]...] whole sequences: the log-probability of each token after the prompt
  spec            null | "ngram" (n-gram / prompt-lookup speculative decoding, k = 3)
  max_tokens      default 32; ignore_eos default true (false: stop at end of turn, as a user sees it)
OUT_JSON: {"backend", "providers", "runs": {name: {"tokens", "logprobs", "again_tokens", "cache_hits",
"tf", "seconds", "spec", "error"}}}. A run that raises records its error and the next one still runs.
The engine's log (SGLang: its scheduler's, with our provider line) goes to stderr, which the caller keeps.
"""

import gc
import json
import os
import sys
import time
import traceback

VLLM_SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
SGLANG_SPEC = {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 4}
MAX_MODEL_LEN = 4096
# SGLang sizes its KV pool on the CPU from the host's free memory, measured before the weights load and again after
# (the second must exceed (1 - mem_fraction_static) x the first). Other processes on a shared host (CI's background
# lane starts engines of its own) can take gigabytes between the two: at 0.2-0.3 that failed start-up ("Loaded
# weights leave no GPU memory for the KV cache"). A high fraction with a fixed token cap gives the same pool
# every time: 32,768 tokens, 7x what the 16 prompts and their continuations hold (4,755), 1.5 GB in fp32.
SGLANG_KV_POOL = {"mem_fraction_static": 0.7, "max_total_tokens": 32768}
SGLANG_SHIMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sglang", "spec_cpu_shims")


def _tf_rows(prompt_len: int, seq: list[int], rows) -> list[list]:
    """[log p(given token), given token is the engine's argmax] at each position after the prompt."""
    return [[rows[p][seq[p]], rows[p][seq[p]] >= max(rows[p].values())] for p in range(prompt_len, len(seq))]


def run_vllm(model: str, prompts: list[list[int]], runs: list[dict], save=lambda out: None) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine in this process: its choices are ours to read
    from vllm import LLM, SamplingParams

    out = {}
    for r in runs:
        res = out[r["name"]] = {}
        llm = None
        try:
            idx = r.get("subset") or list(range(len(prompts)))
            kw = dict(
                model=model,
                dtype=r.get("dtype", "float32"),
                seed=0,
                max_model_len=MAX_MODEL_LEN,
                enforce_eager=True,
                enable_prefix_caching=True,
                disable_log_stats=False,
            )
            if r.get("budget"):
                kw.update(max_num_batched_tokens=r["budget"], enable_chunked_prefill=True)
            if r.get("kv_cache_dtype"):
                kw["kv_cache_dtype"] = r["kv_cache_dtype"]
            if r.get("spec") == "ngram":
                kw["speculative_config"] = dict(VLLM_SPEC)
            llm = LLM(**kw)
            sp = SamplingParams(
                temperature=0.0, max_tokens=r.get("max_tokens", 32), logprobs=1, ignore_eos=r.get("ignore_eos", True)
            )
            t0 = time.perf_counter()
            outs = llm.generate([{"prompt_token_ids": prompts[i]} for i in idx], sp, use_tqdm=False)
            res["seconds"] = time.perf_counter() - t0
            res["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
            res["logprobs"] = [
                [lp[t].logprob for t, lp in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)] for o in outs
            ]
            if r.get("again"):
                again = llm.generate([{"prompt_token_ids": prompts[i]} for i in r["again"]], sp, use_tqdm=False)
                res["again_tokens"] = [list(o.outputs[0].token_ids) for o in again]
            metrics = {m.name: getattr(m, "value", None) for m in llm.get_metrics()}
            res["cache_hits"] = metrics.get("vllm:prefix_cache_hits", 0)
            if r.get("spec"):
                res["spec"] = {k: v for k, v in metrics.items() if "spec_decode" in k and not isinstance(v, list)}
            if r.get("teacher_force"):
                seqs = [r["teacher_force"][i] for i in idx]
                tf = llm.generate(
                    [{"prompt_token_ids": s} for s in seqs],
                    SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=1),
                    use_tqdm=False,
                )
                res["tf"] = [
                    _tf_rows(
                        len(prompts[i]),
                        s,
                        [None] + [{k: v.logprob for k, v in lp.items()} for lp in o.prompt_logprobs[1:]],
                    )
                    for i, s, o in zip(idx, seqs, tf)
                ]
        except Exception:  # noqa: BLE001  (recorded; the next configuration still runs)
            res["error"] = traceback.format_exc()[-4000:]
        finally:
            del llm
            gc.collect()
        save(out)
    return out


def run_sglang(model: str, prompts: list[list[int]], runs: list[dict], ours: bool, save=lambda out: None) -> dict:
    import sglang

    out = {}
    for r in runs:
        res = out[r["name"]] = {}
        engine = None
        try:
            idx = r.get("subset") or list(range(len(prompts)))
            kw = dict(
                model_path=model,
                device="cpu",
                attention_backend="xpu_attn" if ours else "torch_native",
                dtype=r.get("dtype", "float32"),
                context_length=MAX_MODEL_LEN,
                **SGLANG_KV_POOL,
                disable_cuda_graph=True,
                random_seed=0,
                skip_server_warmup=True,
                log_level="info",
            )
            if r.get("budget"):
                kw["chunked_prefill_size"] = r["budget"]
            if r.get("kv_cache_dtype"):
                kw["kv_cache_dtype"] = r["kv_cache_dtype"]
            if r.get("spec") == "ngram":
                # SGLang's own speculative kernels (tree build, cache slots) in Triton's interpreter on this
                # CPU-only machine (tests/sglang/spec_cpu_shims); the scheduler process inherits this environment
                os.environ["TRITON_INTERPRET"] = "1"
                os.environ["PYTHONPATH"] = SGLANG_SHIMS + os.pathsep + os.environ.get("PYTHONPATH", "")
                kw.update(SGLANG_SPEC)
            engine = sglang.Engine(**kw)
            sp = {
                "temperature": 0.0,
                "max_new_tokens": r.get("max_tokens", 32),
                "ignore_eos": r.get("ignore_eos", True),
            }

            def gen(ids):
                rs = engine.generate(input_ids=ids, sampling_params=sp, return_logprob=True, top_logprobs_num=0)
                return (
                    [[t[1] for t in x["meta_info"]["output_token_logprobs"]] for x in rs],
                    [[t[0] for t in x["meta_info"]["output_token_logprobs"]] for x in rs],
                    rs,
                )

            t0 = time.perf_counter()
            res["tokens"], res["logprobs"], rs = gen([prompts[i] for i in idx])
            res["seconds"] = time.perf_counter() - t0
            if r.get("spec"):
                res["spec"] = {
                    k: sum(x["meta_info"].get(k, 0) or 0 for x in rs)
                    for k in ("spec_num_correct_drafts", "spec_num_proposed_drafts", "spec_verify_ct")
                }
            if r.get("again"):
                res["again_tokens"], _, again = gen([prompts[i] for i in r["again"]])
                res["cache_hits"] = sum(x["meta_info"].get("cached_tokens", 0) for x in again)
            if r.get("teacher_force"):
                seqs = [r["teacher_force"][i] for i in idx]
                # SGLang gives None for the first position of the range: start one before the first scored token
                starts = [len(prompts[i]) - 1 for i in idx]
                tf = engine.generate(
                    input_ids=seqs,
                    sampling_params={"temperature": 0.0, "max_new_tokens": 1},
                    return_logprob=True,
                    logprob_start_len=starts,
                    top_logprobs_num=1,
                )
                res["tf"] = []
                for s, start, x in zip(seqs, starts, tf):
                    n = len(s) - start - 1
                    given = x["meta_info"]["input_token_logprobs"][-n:]  # (logprob, id, text) up to the last position
                    top = x["meta_info"]["input_top_logprobs"][-n:]
                    # SGLang reports ids >= vocab_size - 1 as 0 (its image-hash clipping); the logprob is the given
                    # token's
                    assert len(given) == len(top) == n and all(g[1] in (t, 0) for g, t in zip(given, s[start + 1 :])), (
                        "teacher-forced rows out of place"
                    )
                    res["tf"].append([[g[0], g[0] >= tp[0][0]] for g, tp in zip(given, top)])
        except Exception:  # noqa: BLE001
            res["error"] = traceback.format_exc()[-4000:]
        finally:
            if engine is not None:
                engine.shutdown()
            os.environ.pop("TRITON_INTERPRET", None)
            gc.collect()
        save(out)  # SGLang kills this whole process when an engine fails to start: keep what ran
    return out


def main() -> int:
    engine, backend, plan_path, out_path = sys.argv[1:5]
    plan = json.load(open(plan_path))
    ours = backend == "ours"

    def save(runs: dict) -> None:
        providers = None
        try:
            from vllm_xpu_attn.kernels.api import chosen_providers

            providers = chosen_providers() or None
        except Exception:  # noqa: BLE001
            pass
        if engine == "vllm":
            from vllm.platforms import current_platform

            backend_name = type(current_platform).__name__
        else:
            backend_name = "xpu_attn" if ours else "torch_native"
        tmp = out_path + ".tmp"
        json.dump(
            {"engine": engine, "ours": ours, "backend": backend_name, "providers": providers, "runs": runs},
            open(tmp, "w"),
        )
        os.replace(tmp, out_path)

    if engine == "vllm":
        os.environ["XPU_ATTN_ENABLE"] = "1" if ours else "0"  # our platform plugin: opt-in on CPU
        save(run_vllm(plan["model"], plan["prompts"], plan["runs"], save))
    else:
        save(run_sglang(plan["model"], plan["prompts"], plan["runs"], ours, save))
    return 0


if __name__ == "__main__":
    sys.exit(main())


def launch(
    engine: str,
    backend: str,
    model: str,
    prompts: list[list[int]],
    runs: list[dict],
    workdir,
    env: dict,
    timeout: int = 1500,
) -> dict:
    """Run this file as one engine process (the caller's env: vLLM's or SGLang's) and return its JSON, with the
    process's whole log under "log" and its wall time under "wall_s"."""
    import subprocess
    from pathlib import Path

    workdir = Path(workdir)
    plan, out = workdir / f"plan-{engine}-{backend}.json", workdir / f"out-{engine}-{backend}.json"
    plan.write_text(json.dumps({"model": model, "prompts": prompts, "runs": runs}))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), engine, backend, str(plan), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = proc.stdout + proc.stderr
    (workdir / f"log-{engine}-{backend}.txt").write_text(log)
    if not out.exists():
        raise AssertionError(f"{engine} ({backend}) process failed (rc {proc.returncode}):\n{log[-6000:]}")
    res = json.loads(out.read_text())
    for r in runs:  # a configuration the process died in (or never reached): its error is the log's end
        if r["name"] not in res["runs"] or proc.returncode != 0 and not res["runs"][r["name"]]:
            res["runs"][r["name"]] = {
                "error": f"process ended (rc {proc.returncode}) before this run finished:\n{log[-4000:]}"
            }
    res["log"], res["wall_s"] = log, time.perf_counter() - t0
    return res


def ok(res: dict, name: str) -> dict:
    """One configuration's results; its error (with the engine's traceback) if it failed."""
    r = res["runs"][name]
    assert "error" not in r, f"{res['engine']} ({'ours' if res['ours'] else 'own'}) run {name} failed:\n{r['error']}"
    return r


def chat_over_http(
    engine: str, model: str, workdir, question: str, max_tokens: int = 32, startup_s: float = 300
) -> dict:
    """The engine's OpenAI-compatible server with this backend (vLLM: XPU_ATTN_ENABLE=1; SGLang:
    --attention-backend xpu_attn), started as benchmarks/serve_compare.py starts it: one greedy chat completion
    not streamed and one streamed (server-sent events, the deltas joined), then the engine's graceful stop.
    Returns {"plain", "streamed", "chunks", "finish", "log", "shutdown", "startup_s"}."""
    import urllib.request
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # serve_compare.py
    import serve_compare as sc

    workdir = Path(workdir)
    port = sc.free_port()
    cmd, env = sc.server_cmd(engine, "ours", model, port, False, [])
    log_path = workdir / f"http-{engine}.log"
    base = f"http://127.0.0.1:{port}"
    body = {
        "model": sc.SERVED,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0.0,
        "max_tokens": max_tokens,
    }
    out: dict = {}

    def post(payload: dict):
        req = urllib.request.Request(
            base + "/v1/chat/completions",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        return urllib.request.urlopen(req, timeout=120)

    t0 = time.perf_counter()
    with open(log_path, "w") as logf:
        proc = subprocess_popen(cmd, env, logf, workdir)
    try:
        while sc.http_get(base + "/health", 2)[0] != 200:
            if proc.poll() is not None or time.perf_counter() - t0 > startup_s:
                raise AssertionError(
                    f"{engine} server did not start (rc {proc.poll()}):\n{log_path.read_text(errors='replace')[-4000:]}"
                )
            time.sleep(1)
        out["startup_s"] = time.perf_counter() - t0
        with post(body) as r:
            rep = json.loads(r.read())
        out["plain"], out["finish"] = rep["choices"][0]["message"]["content"], rep["choices"][0]["finish_reason"]
        chunks = []
        with post(dict(body, stream=True)) as r:
            for line in r:
                line = line.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                delta = json.loads(line[5:])["choices"][0].get("delta", {}).get("content")
                if delta:
                    chunks.append(delta)
        out["streamed"], out["chunks"] = "".join(chunks), len(chunks)
    finally:
        out["shutdown"] = sc.stop(proc, sc.STOP_SIGNAL[engine])
    out["log"] = log_path.read_text(errors="replace")
    return out


def subprocess_popen(cmd, env, logf, cwd):
    import subprocess

    return subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(cwd))
