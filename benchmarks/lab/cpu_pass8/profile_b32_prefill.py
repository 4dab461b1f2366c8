import os, sys, time, json
backend = sys.argv[1]
os.environ["XPU_ATTN_ENABLE"] = "0" if backend == "own" else "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
sys.path.insert(0, "/work/main/tests/support")
import real_model as rm
from transformers import AutoTokenizer
model = "/work/main/.venvs/smollm2-135m-instruct"
tok = AutoTokenizer.from_pretrained(model)
base = [rm.chat_ids(tok, q) for q in rm.DEMO_QUESTIONS]
prompts = [base[i % len(base)] for i in range(32)]
from vllm import LLM, SamplingParams
llm = LLM(model=model, dtype="float32", seed=0, max_model_len=1024, enforce_eager=True, enable_prefix_caching=False)
vc = llm.llm_engine.vllm_config
print("CFG block", vc.cache_config.block_size, "mnbt", vc.scheduler_config.max_num_batched_tokens, "chunked", vc.scheduler_config.enable_chunked_prefill, "async", getattr(vc.scheduler_config, "async_scheduling", None), flush=True)
def gen(n):
    sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    t = time.perf_counter(); llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False); return time.perf_counter() - t
gen(32); gen(32)
print("t1s", [round(gen(1), 3) for _ in range(5)], flush=True)
import torch
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    gen(1)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22), flush=True)
