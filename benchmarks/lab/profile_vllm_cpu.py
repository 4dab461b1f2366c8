"""Where a real vLLM process on the CPU spends its steps (issue #48): one offline engine, this backend (``ours``) or
vLLM's CPU_ATTN (``own``), a warm-up, then one timed ``generate`` (optionally under cProfile).

    PYTHONPATH=. .venvs/vllm/bin/python benchmarks/lab/profile_vllm_cpu.py --backend ours --batch 1 [--profile]
    PYTHONPATH=. .venvs/vllm/bin/python benchmarks/lab/profile_vllm_cpu.py --backend ours --pressure [--profile]

``--batch N``: the main job's chat questions cycled to N prompts, greedy ``--max-tokens`` (bench_cpu_batches.py's
load). ``--layer-times``: the wall time of each call of the backend impl's ``forward`` and ``do_kv_cache_update`` in
the timed run (perf_counter around the call, no profiler), printed as medians in us (either backend).
``--pressure``: serve_compare.py --pressure's request set offline (load_servers.build_requests, seeded, no cancels)
on its KV pool (20 pages of 32 tokens: preemption, mixed prefill + decode steps, prefix-cache hits).
SmolLM2-135M-Instruct fp32, eager. Prints the wall time, the generated tokens and, with ``--profile``, cProfile's
top functions by self time and the attention path by cumulative time. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=["own", "ours"], required=True)
    ap.add_argument("--model", default=str(ROOT / ".venvs" / "smollm2-135m-instruct"))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--pressure", action="store_true", help="serve_compare --pressure's requests and KV pool")
    ap.add_argument("--requests", type=int, default=128, help="--pressure: how many requests")
    ap.add_argument("--profile", action="store_true", help="the timed generate under cProfile")
    ap.add_argument("--layer-times", action="store_true", help="medians of the impl's per-layer calls, us")
    a = ap.parse_args()
    os.environ["XPU_ATTN_ENABLE"] = "0" if a.backend == "own" else "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: cProfile sees it
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests" / "support")]
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    tok = AutoTokenizer.from_pretrained(a.model)
    if a.pressure:
        from load_servers import build_requests

        llm = LLM(
            model=a.model,
            dtype="float32",
            seed=0,
            max_model_len=256,
            enforce_eager=True,
            block_size=32,
            num_gpu_blocks_override=20,  # serve_compare.VLLM_PRESSURE
        )
        prompts, params = [], []
        for r in build_requests(a.requests, seed=0, n_cancel=0):
            ids = r.prompt if isinstance(r.prompt, list) else tok(r.prompt)["input_ids"]
            prompts.append({"prompt_token_ids": ids})
            params.append(
                SamplingParams(
                    temperature=0.0, max_tokens=r.max_tokens, min_tokens=r.max_tokens, ignore_eos=r.ignore_eos
                )
            )
    else:
        import real_model as rm

        llm = LLM(
            model=a.model, dtype="float32", seed=0, max_model_len=1024, enforce_eager=True, enable_prefix_caching=False
        )
        base = [rm.chat_ids(tok, q) for q in rm.DEMO_QUESTIONS]
        prompts = [{"prompt_token_ids": base[i % len(base)]} for i in range(a.batch)]
        params = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True)
    llm.generate(prompts[:8], params[:8] if isinstance(params, list) else params, use_tqdm=False)  # warm-up
    times = _time_layers(a.backend) if a.layer_times else None
    prof = cProfile.Profile() if a.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    outs = llm.generate(prompts, params, use_tqdm=False)
    if prof:
        prof.disable()
    wall = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    print(f"{a.backend}: wall {wall:.2f} s, {tokens} tokens, {len(prompts)} prompts", flush=True)
    if times:
        for name, ts in times.items():
            ts.sort()
            print(f"{a.backend}: {name} median {ts[len(ts) // 2] * 1e6:.1f} us a layer call ({len(ts)} calls)")
    if prof:
        st = pstats.Stats(prof)
        st.sort_stats("tottime").print_stats(25)
        st.sort_stats("cumulative").print_stats("vllm_xpu_attn|cpu_attn|attention/attention.py", 40)
    return 0


def _time_layers(backend: str) -> dict:
    """Wrap the attention impl's forward and do_kv_cache_update (this backend's or CPU_ATTN's) with a wall clock;
    the returned lists fill with each later call's seconds."""
    if backend == "own":
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl as impl
    else:
        from vllm_xpu_attn.vllm.backend import XpuAttnImpl as impl
    times: dict = {}
    for name in ("forward", "do_kv_cache_update"):
        fn, ts = getattr(impl, name), times.setdefault(name, [])

        def timed(*args, _fn=fn, _ts=ts, **kw):
            t0 = time.perf_counter()
            res = _fn(*args, **kw)
            _ts.append(time.perf_counter() - t0)
            return res

        setattr(impl, name, timed)
    return times


if __name__ == "__main__":
    raise SystemExit(main())
