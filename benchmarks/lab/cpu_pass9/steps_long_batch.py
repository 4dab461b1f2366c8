"""One vLLM engine (own = CPU_ATTN, ours = vllm-xpu-attn), BATCH prompts of CTX tokens at once: each step's wall
time and its query lengths (the scheduler's chunking), over one timed call, then torch.profiler's top ops of one
call. Run one engine at a time, alternating: python steps_long_batch.py own|ours CTX BATCH

Question (#48, ninth pass): at 2,048-token prompts batch 8 prefills 1.09-1.11x slower with ours in pairs (either
start order) while batch 1 is at parity. Which steps are slower, and in which op (GEMM or attention)?"""

import os
import sys
import time
from pathlib import Path

backend, ctx, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.environ["XPU_ATTN_ENABLE"] = "0" if backend == "own" else "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_cpu_batches as B  # noqa: E402


class A:
    model = str(ROOT / ".venvs" / "smollm2-135m-instruct")
    context = ctx


base = B._prompts(A)
prompts = [base[i % len(base)] for i in range(batch)]
from vllm import LLM, SamplingParams  # noqa: E402

llm = LLM(model=A.model, dtype="float32", seed=0, max_model_len=max(1024, ctx + 40), enforce_eager=True,
          enable_prefix_caching=False)
eng = llm.llm_engine
k = iter(range(10**6))


def run(n):
    sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    c = next(k)
    for i, p in enumerate(prompts):
        eng.add_request(f"c{c}-{i}", {"prompt_token_ids": p}, sp)
    steps = []
    while eng.has_unfinished_requests():
        t = time.perf_counter()
        eng.step()
        dt = time.perf_counter() - t
        steps.append(round(dt, 3))
    return steps


run(2)
for _ in range(1):
    s = run(2)
    print(backend, "step s", s, "sum", round(sum(s), 2), flush=True)
from torch.profiler import ProfilerActivity, profile  # noqa: E402

with profile(activities=[ProfilerActivity.CPU]) as prof:
    run(1)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10), flush=True)
