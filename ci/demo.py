"""Main job: serve a real model (SmolLM2-135M-Instruct, fp32; ci/real_model.sh) through an engine with
vllm-xpu-attn and with the engine's own backend, and show the answers side by side with transformers'.

    python ci/demo.py run --engine vllm|sglang --backend ours|own --model DIR --out JSON   (in that engine's venv)
    python ci/demo.py reference --model DIR --out JSON                                     (venv with transformers)
    python ci/demo.py report JSON...                                                       (any Python)

ci/demo.sh runs the four engine processes (vLLM / SGLang x ours / own), transformers' eager fp32 greedy answers
and then the report: for each engine every question with the three answers as text, ``identical: N/N`` against
the engine's own backend and against transformers (token ids up to the end of the answer) and the kernel
provider that served this backend's layers. Exit 1 if any answer differs.
"""

import argparse
import json
import logging
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))
import real_model as rm  # noqa: E402  (the questions, the chat template use, the transformers oracle)

MAX_TOKENS = 64  # answers end at the end-of-turn token well before this


def questions(model: str) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    return [rm.chat_ids(tok, q) for q in rm.DEMO_QUESTIONS]


def cut(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def run_vllm(model: str, ids: list[list[int]], ours: bool) -> dict:
    os.environ["XPU_ATTN_ENABLE"] = "1" if ours else "0"  # our platform plugin: opt-in on CPU/CUDA
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in this process: its choices are ours to read
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", seed=0, max_model_len=1024, enforce_eager=True)
    sp = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)  # stops at the end of the answer, as a user sees it
    llm.generate([{"prompt_token_ids": ids[0]}], sp, use_tqdm=False)  # warm-up
    t0 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": p} for p in ids], sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    from vllm.platforms import current_platform

    return {
        "backend": type(current_platform).__name__,
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "seconds": dt,
    }


def run_sglang(model: str, ids: list[list[int]], ours: bool) -> dict:
    import sglang

    engine = sglang.Engine(
        model_path=model,
        device="cpu",
        attention_backend="xpu_attn" if ours else "torch_native",
        dtype="float32",
        context_length=1024,
        disable_cuda_graph=True,
        # a fixed pool (1.5 GB fp32): SGLang's free-memory fraction fails start-up when another
        # process takes host memory between its two measurements
        mem_fraction_static=0.7,
        max_total_tokens=32768,
        random_seed=0,
        skip_server_warmup=True,
    )
    sp = {"temperature": 0.0, "max_new_tokens": MAX_TOKENS}
    try:
        engine.generate(input_ids=ids[:1], sampling_params=sp)  # warm-up
        t0 = time.perf_counter()
        res = engine.generate(input_ids=ids, sampling_params=sp)
        dt = time.perf_counter() - t0
    finally:
        engine.shutdown()
    return {"backend": "xpu_attn" if ours else "torch_native", "tokens": [r["output_ids"] for r in res], "seconds": dt}


def run(a) -> None:
    from vllm_xpu_attn.log import setup_logging

    setup_logging()
    ids = questions(a.model)
    ours = a.backend == "ours"
    res = (run_vllm if a.engine == "vllm" else run_sglang)(a.model, ids, ours)
    from vllm_xpu_attn.kernels.api import chosen_providers

    res.update(engine=a.engine, ours=ours, providers=chosen_providers())
    json.dump(res, open(a.out, "w"))
    logging.shutdown()


def reference(a) -> None:
    """transformers, eager attention, fp32: greedy until the end-of-turn token (or MAX_TOKENS)."""
    import torch

    m, tok = rm.load_hf(a.model)
    out = []
    for p in questions(a.model):
        with torch.no_grad():
            g = m.generate(
                torch.tensor([p]),
                max_new_tokens=MAX_TOKENS,
                do_sample=False,
                eos_token_id=tok.convert_tokens_to_ids(rm.EOS_TEXT),
            )
        out.append(g[0, len(p) :].tolist())
    json.dump(
        {"tokens": out, "eos": tok.convert_tokens_to_ids(rm.EOS_TEXT), "texts": [rm.answer_text(tok, t) for t in out]},
        open(a.out, "w"),
    )


def _providers(r: dict, log: str) -> str:
    if r["providers"]:
        return ", ".join(r["providers"])
    # SGLang plans in its scheduler process: the choice is in that process's log line
    for line in log.splitlines():
        if "xpu_attn (SGLang): providers" in line:
            return line.split("providers", 1)[1].strip()
    return "(see the engine log)"


def report(paths: list[str]) -> int:
    from transformers import AutoTokenizer

    hf = json.load(open(paths[0]))
    runs = [
        json.load(open(p)) | {"log": open(p + ".log").read() if os.path.exists(p + ".log") else ""} for p in paths[1:]
    ]
    tok = AutoTokenizer.from_pretrained(hf["model"])
    eos = hf["eos"]
    ref = [cut(t, eos) for t in hf["tokens"]]
    status = 0
    print(
        "\nmodel: SmolLM2-135M-Instruct (real weights, fp32, chat template), greedy; "
        "each answer up to its end-of-turn token"
    )
    for engine in ("vllm", "sglang"):
        ours = next((r for r in runs if r["engine"] == engine and r["ours"]), None)
        own = next((r for r in runs if r["engine"] == engine and not r["ours"]), None)
        if not ours or not own:
            continue
        a_ours, a_own = [cut(t, eos) for t in ours["tokens"]], [cut(t, eos) for t in own["tokens"]]
        n = len(ref)
        same_own = sum(x == y for x, y in zip(a_ours, a_own))
        same_hf = sum(x == y for x, y in zip(a_ours, ref))
        own_hf = sum(x == y for x, y in zip(a_own, ref))
        name = "vLLM 0.32 (vllm-cpu)" if engine == "vllm" else "SGLang 0.5.23"
        print(
            f"\n=== {name}: vllm-xpu-attn ({ours['backend']}) vs the engine's own backend ({own['backend']}) "
            f"vs transformers ==="
        )
        print(f"kernel provider that served vllm-xpu-attn's layers: {_providers(ours, ours['log'])}")
        for q, x, y, z in zip(rm.DEMO_QUESTIONS, a_ours, a_own, ref):
            print(f"  Q: {q}")
            print(f"     vllm-xpu-attn: {tok.decode(x).strip()}")
            print(f"     {'own backend':>13}: {tok.decode(y).strip()}" + ("" if x == y else "   <-- differs"))
            print(f"     {'transformers':>13}: {tok.decode(z).strip()}" + ("" if x == z else "   <-- differs"))
        print(
            f"identical: {same_own}/{n} to the engine's own backend, {same_hf}/{n} to transformers "
            f"(the engine's own backend: {own_hf}/{n} to transformers)"
        )
        status |= same_own != n or same_hf != n
    # No timing here: each backend runs once, cold (start-up, compiles and first-touch included), so a time per
    # token from it says nothing about speed. Speed: benchmarks/bench_cpu_provider.py (docs/benchmarks.md).
    print("\nFAILED: an answer differs (above)" if status else "\nOK: every answer identical in both engines")
    return status


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    r.add_argument("--backend", choices=["ours", "own"], default="ours")
    r.add_argument("--model", required=True)
    r.add_argument("--out", required=True)
    f = sub.add_parser("reference")
    f.add_argument("--model", required=True)
    f.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("paths", nargs="+", help="the reference JSON, then the engine runs' JSON")
    a = ap.parse_args()
    if a.cmd == "run":
        run(a)
        return 0
    if a.cmd == "reference":
        reference(a)
        out = json.load(open(a.out))
        out["model"] = a.model
        json.dump(out, open(a.out, "w"))
        return 0
    return report(a.paths)


if __name__ == "__main__":
    sys.exit(main())
