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
    ap.add_argument("--step-times", action="store_true", help="per-step medians of the engine step's parts, us")
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
    steps = _time_steps(a.backend) if a.step_times else None
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
    if steps is not None:
        _print_steps(a.backend, steps, len(prompts))
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


# (label, module, class, attribute, backend): the engine step's parts, outermost first. A part's time includes the
# parts below it with more dots; per step, each part is summed over its calls (the attention rows: over the 30
# layers). class None: a module function (patched in its module: callers that look it up by name see the wrapper);
# "impl" / "builder": the backend's; backend None: both backends' runs.
_VR = "vllm.v1.worker.gpu_model_runner"
_LM = "vllm.model_executor.models.llama"  # SmolLM2 is a Llama
_STEP_PARTS = [
    ("step", "vllm.v1.engine.llm_engine", "LLMEngine", "step", None),
    (". schedule", "vllm.v1.core.sched.scheduler", "Scheduler", "schedule", None),
    (". execute_model", _VR, "GPUModelRunner", "execute_model", None),
    (". . _update_states", _VR, "GPUModelRunner", "_update_states", None),
    (". . _prepare_inputs", _VR, "GPUModelRunner", "_prepare_inputs", None),
    (". . _get_slot_mappings", _VR, "GPUModelRunner", "_get_slot_mappings", None),
    (". . _build_attention_metadata", _VR, "GPUModelRunner", "_build_attention_metadata", None),
    (". . . builder.build", None, "builder", "build", None),
    (". . _preprocess", _VR, "GPUModelRunner", "_preprocess", None),
    (". . _model_forward", _VR, "GPUModelRunner", "_model_forward", None),
    (". . . LlamaAttention.forward (qkv, rope, attention, o_proj)", _LM, "LlamaAttention", "forward", None),
    (". . . LlamaMLP.forward", _LM, "LlamaMLP", "forward", None),
    (". . . Attention.forward (all layers)", "vllm.model_executor.layers.attention.attention", "Attention", "forward", None),
    (". . . . impl.do_kv_cache_update", None, "impl", "do_kv_cache_update", None),
    (". . . . . cpu_attn_reshape_and_cache", "vllm._custom_ops", None, "cpu_attn_reshape_and_cache", "own"),
    (". . . . . _write_all_cpu", "vllm_xpu_attn.kernels.api.torch_ops", None, "_write_all_cpu", "ours"),
    (". . . . impl.forward", None, "impl", "forward", None),
    (". . . . . cpu_attention_with_kv_cache", "vllm._custom_ops", None, "cpu_attention_with_kv_cache", "own"),
    (". . . . . TorchSdpaLaunch.run", "vllm_xpu_attn.kernels.providers.cpu_sdpa", "TorchSdpaLaunch", "run", "ours"),
    (". . . . . . _build (first layer a step)", "vllm_xpu_attn.kernels.providers.cpu_sdpa", "TorchSdpaLaunch", "_build", "ours"),
    (". . . . . . _gather_paired", "vllm_xpu_attn.kernels.providers.cpu_sdpa", None, "_gather_paired", "ours"),
    (". . . . . . flash kernel op", "vllm_xpu_attn.kernels.providers.cpu_sdpa", None, "_OP", "ours"),
    (". . compute_logits", "vllm.model_executor.layers.logits_processor", "LogitsProcessor", "forward", None),
    (". sample_tokens", _VR, "GPUModelRunner", "sample_tokens", None),
    (". . sampler", "vllm.v1.sample.sampler", "Sampler", "forward", None),
    (". . _bookkeeping_sync", _VR, "GPUModelRunner", "_bookkeeping_sync", None),
    (". update_from_output", "vllm.v1.core.sched.scheduler", "Scheduler", "update_from_output", None),
    ("process_outputs", "vllm.v1.engine.output_processor", "OutputProcessor", "process_outputs", None),
]


def _time_steps(backend: str) -> list:
    """Wrap the engine step's parts (``_STEP_PARTS``) with a wall clock and this thread's CPU clock; the returned
    list fills with one dict a step: label -> [wall s, thread CPU s, calls], plus "tokens" (the step's scheduled
    tokens) and "process_cpu" (every thread's CPU time over the step: OpenMP workers included)."""
    import importlib

    if backend == "own":
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl as impl
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadataBuilder as builder
    else:
        from vllm_xpu_attn.vllm.backend import XpuAttnImpl as impl
        from vllm_xpu_attn.vllm.backend import XpuAttnMetadataBuilder as builder
    steps: list = []
    cur: dict = {}

    def wrap(fn, label, outer=False, model=False):
        def timed(*args, **kw):
            nonlocal cur
            if outer:
                cur = {}
                p0 = time.process_time()
            if model:
                so = args[1] if len(args) > 1 else kw.get("scheduler_output")
                cur["tokens"] = getattr(so, "total_num_scheduled_tokens", None)
            t0, c0 = time.perf_counter(), time.thread_time()
            res = fn(*args, **kw)
            t1, c1 = time.perf_counter(), time.thread_time()
            acc = cur.setdefault(label, [0.0, 0.0, 0])
            acc[0] += t1 - t0
            acc[1] += c1 - c0
            acc[2] += 1
            if outer:
                cur["process_cpu"] = time.process_time() - p0
                steps.append(cur)
            return res

        return timed

    for label, mod, cls_name, attr, only in _STEP_PARTS:
        if only not in (None, backend):
            continue
        kw = dict(outer=label == "step", model=label.endswith("execute_model"))
        if attr == "_OP":  # the flash op, looked up once into cpu_sdpa._OP
            m = importlib.import_module(mod)
            m._flash_op()
            m._OP[0] = wrap(m._OP[0], label)
            continue
        owner = {"impl": impl, "builder": builder}.get(cls_name) if cls_name else None
        if owner is None:
            owner = importlib.import_module(mod)
            if cls_name:
                owner = getattr(owner, cls_name)
        setattr(owner, attr, wrap(getattr(owner, attr), label, **kw))
    return steps


def _print_steps(backend: str, steps: list, batch: int) -> None:
    """Medians over the decode steps (each request's one new token: ``batch`` scheduled tokens) and the prefill
    step, us a step: wall, this thread's CPU."""
    for kind, sel in (("decode", lambda s: s.get("tokens") == batch), ("prefill", lambda s: (s.get("tokens") or 0) > batch)):
        chosen = [s for s in steps if sel(s)]
        if not chosen:
            continue
        print(f"{backend}: {kind} steps: {len(chosen)}; us a step, median (wall / main-thread CPU / calls)")
        for label, *_, only in _STEP_PARTS:
            if only not in (None, backend):
                continue
            w = sorted(s.get(label, [0.0, 0.0, 0])[0] for s in chosen)
            c = sorted(s.get(label, [0.0, 0.0, 0])[1] for s in chosen)
            k = chosen[len(chosen) // 2].get(label, [0, 0, 0])[2]
            print(f"{backend}: {kind} {label:<55} {w[len(w) // 2] * 1e6:10.1f} {c[len(c) // 2] * 1e6:10.1f} {k:5d}")
        pc = sorted(s["process_cpu"] for s in chosen)
        print(f"{backend}: {kind} {'step: process CPU (all threads)':<55} {pc[len(pc) // 2] * 1e6:10.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
