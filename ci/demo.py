"""Main job: serve the tiny built-in model through one engine with vllm-xpu-attn; print text + provider.

python ci/demo.py --engine vllm|sglang --model DIR   (run inside that engine's venv; ci/demo.sh does it)
"""

import argparse
import logging
import os
import sys


def run_vllm(model: str, prompts: list[str]) -> list[str]:
    os.environ.setdefault("XPU_ATTN_ENABLE", "1")  # opt in on CPU/CUDA (automatic on Intel XPU)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", seed=0, max_model_len=512, enforce_eager=True)
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=24))
    from vllm.platforms import current_platform

    print(f"[vllm] platform: {type(current_platform).__name__}")
    return [o.outputs[0].text for o in outs]


def run_sglang(model: str, prompts: list[str]) -> list[str]:
    import sglang

    engine = sglang.Engine(model_path=model, device="cpu", attention_backend="xpu_attn", dtype="float32",
                           context_length=256, mem_fraction_static=0.1, disable_cuda_graph=True, random_seed=0,
                           skip_server_warmup=True)
    try:
        res = engine.generate(prompt=prompts, sampling_params={"temperature": 0.0, "max_new_tokens": 24})
    finally:
        engine.shutdown()
    return [r["text"] for r in res]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["vllm", "sglang"], required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    from vllm_xpu_attn.log import setup_logging
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from tiny_model import PROMPTS, make_tiny_model  # the seeded tiny model the tests use too

    setup_logging()
    if not os.path.exists(os.path.join(a.model, "config.json")):
        make_tiny_model(a.model, "llama", seed=1)
    prompts = PROMPTS[:4]
    texts = run_vllm(a.model, prompts) if a.engine == "vllm" else run_sglang(a.model, prompts)
    # the provider choice is logged by the engine process; the in-process registry says it too
    from vllm_xpu_attn.kernels import chosen_providers

    providers = chosen_providers() or ["(chosen in the engine's worker process; see log above)"]
    print(f"\n=== {a.engine} + vllm-xpu-attn: kernel provider(s) {providers} ===")
    for p, t in zip(prompts, texts):
        print(f"  {p!r} -> {t!r}")
    logging.shutdown()


if __name__ == "__main__":
    main()
