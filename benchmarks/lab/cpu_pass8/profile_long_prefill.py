import os, sys, time
backend, ctx, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.environ["XPU_ATTN_ENABLE"] = "0" if backend == "own" else "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, "/work/main/benchmarks")
import bench_cpu_batches as B
class A: pass
a = A(); a.model = "/work/main/.venvs/smollm2-135m-instruct"; a.context = ctx
base = B._prompts(a)
prompts = [base[i % len(base)] for i in range(batch)]
from vllm import LLM, SamplingParams
llm = LLM(model=a.model, dtype="float32", seed=0, max_model_len=max(1024, ctx + 40), enforce_eager=True, enable_prefix_caching=False)
eng = llm.llm_engine
k = iter(range(10**6))
def run(n):
    sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    c = next(k)
    for i, p in enumerate(prompts): eng.add_request(f"c{c}-{i}", {"prompt_token_ids": p}, sp)
    ts = []; t0 = time.perf_counter()
    while eng.has_unfinished_requests():
        outs = eng.step(); ts.append(round(time.perf_counter() - t0, 3))
    return ts
run(4)
for _ in range(3): print("steps", run(2), flush=True)
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    run(1)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
