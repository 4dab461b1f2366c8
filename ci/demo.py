"""Main job: serve the tiny built-in model through an engine, with vllm-xpu-attn and with the engine's
own backend, and show both side by side.

    python ci/demo.py run --engine vllm|sglang --backend ours|own --model DIR --out JSON   (in that engine's venv)
    python ci/demo.py report JSON...                                                       (any Python)

ci/demo.sh runs the four engine processes (vLLM / SGLang x ours / own) and then the report: for each
engine the two continuations of every prompt, ``identical: N/N``, the kernel provider that served
this backend's layers, and the time per generated token of each (CPU: only the ratio means anything).
"""

import argparse
import json
import logging
import os
import sys
import time

PROMPTS_N, MAX_TOKENS = 6, 24


def run_vllm(model: str, prompts: list[str], ours: bool) -> dict:
    os.environ["XPU_ATTN_ENABLE"] = "1" if ours else "0"  # our platform plugin: opt-in on CPU/CUDA
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process: its choices are ours to read
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", seed=0, max_model_len=512, enforce_eager=True)
    sp = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    llm.generate(prompts[:1], sp)  # warm-up
    t0 = time.perf_counter()
    outs = llm.generate(prompts, sp)
    dt = time.perf_counter() - t0
    from vllm.platforms import current_platform

    return {"backend": type(current_platform).__name__, "texts": [o.outputs[0].text for o in outs],
            "tokens": [list(o.outputs[0].token_ids) for o in outs], "seconds": dt}


def run_sglang(model: str, prompts: list[str], ours: bool) -> dict:
    import sglang

    engine = sglang.Engine(model_path=model, device="cpu", attention_backend="xpu_attn" if ours else "torch_native",
                           dtype="float32", context_length=256, mem_fraction_static=0.1, disable_cuda_graph=True,
                           random_seed=0, skip_server_warmup=True)
    sp = {"temperature": 0.0, "max_new_tokens": MAX_TOKENS, "ignore_eos": True}
    try:
        engine.generate(prompt=prompts[:1], sampling_params=sp)  # warm-up
        t0 = time.perf_counter()
        res = engine.generate(prompt=prompts, sampling_params=sp)
        dt = time.perf_counter() - t0
    finally:
        engine.shutdown()
    return {"backend": "xpu_attn" if ours else "torch_native", "texts": [r["text"] for r in res],
            "tokens": [r["output_ids"] if "output_ids" in r else None for r in res], "seconds": dt}


def run(a) -> None:
    from vllm_xpu_attn.log import setup_logging

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from tiny_model import PROMPTS, make_tiny_model  # the seeded tiny model the tests use too

    setup_logging()
    if not os.path.exists(os.path.join(a.model, "config.json")):
        make_tiny_model(a.model, "llama", seed=1)
    prompts = PROMPTS[:PROMPTS_N]
    ours = a.backend == "ours"
    res = (run_vllm if a.engine == "vllm" else run_sglang)(a.model, prompts, ours)
    from vllm_xpu_attn.kernels import chosen_providers

    res.update(engine=a.engine, ours=ours, prompts=prompts, providers=chosen_providers())
    json.dump(res, open(a.out, "w"))
    logging.shutdown()


def _providers(r: dict, log: str) -> str:
    if r["providers"]:
        return ", ".join(r["providers"])
    # SGLang plans in its scheduler process: the choice is in that process's log line
    for line in log.splitlines():
        if "xpu_attn (SGLang): providers" in line:
            return line.split("providers", 1)[1].strip()
    return "(see the engine log)"


def report(paths: list[str]) -> int:
    runs = [json.load(open(p)) | {"log": open(p + ".log").read() if os.path.exists(p + ".log") else ""}
            for p in paths]
    status = 0
    for engine in ("vllm", "sglang"):
        ours = next((r for r in runs if r["engine"] == engine and r["ours"]), None)
        own = next((r for r in runs if r["engine"] == engine and not r["ours"]), None)
        if not ours or not own:
            continue
        same = sum(a == b for a, b in zip(ours["texts"], own["texts"]))
        n = len(ours["texts"])
        per_tok = lambda r: r["seconds"] / (len(r["texts"]) * MAX_TOKENS) * 1e3  # noqa: E731
        print(f"\n=== {engine}: vllm-xpu-attn ({ours['backend']}) vs the engine's own backend ({own['backend']}) ===")
        print(f"kernel provider that served vllm-xpu-attn's layers: {_providers(ours, ours['log'])}")
        for p, a, b in zip(ours["prompts"], ours["texts"], own["texts"]):
            mark = "==" if a == b else "!="
            print(f"  {p[:40]!r:44}\n      ours {a!r}\n   {mark} own  {b!r}")
        print(f"identical: {same}/{n}")
        print(f"time per generated token (CPU, {n} prompts x {MAX_TOKENS} tokens, batched): "
              f"ours {per_tok(ours):.1f} ms, own {per_tok(own):.1f} ms")
        status |= same != n
    print("\n(random-weight tiny model: the text itself is noise by design; what matters is that both"
          " backends produce the same tokens)")
    return status


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    r.add_argument("--backend", choices=["ours", "own"], default="ours")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("paths", nargs="+")
    a = ap.parse_args()
    if a.cmd == "run":
        run(a)
        return 0
    return report(a.paths)


if __name__ == "__main__":
    sys.exit(main())
