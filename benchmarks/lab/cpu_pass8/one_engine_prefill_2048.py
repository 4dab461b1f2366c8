import os, sys, time
mode = sys.argv[1]  # own | own+import | ours | ours+theirscall
backend = "own" if mode.startswith("own") else "ours"
os.environ["XPU_ATTN_ENABLE"] = "0" if backend == "own" else "1"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
if mode == "own+import":
    from vllm_xpu_attn.kernels.api import select_provider, KernelRequest, Phase, get_provider
    import torch
    for n in ("torch_sdpa", "reference", "vllm_cpu", "triton"):
        try: get_provider(n).unavailable_reason()
        except Exception as e: print("imp", n, e)
if mode == "ours+theirscall":
    from vllm_xpu_attn.kernels.providers import vllm_cpu as VC
    from vllm import _custom_ops as ops
    def run(self, q, k_cache, v_cache, out, *, layer):
        t = self._template
        if t is None:
            self._template = t = self._arm(q.dtype, k_cache.shape[1])
        n = self._ops.attn_names
        kv = k_cache._base_kv
        kk, vv = kv.chunk(2, dim=2)
        ops.cpu_attention_with_kv_cache(query=q, key_cache=kk, value_cache=vv, output=out, query_start_loc=t[n.index("query_start_loc")], seq_lens=t[n.index("seq_lens")], scale=t[n.index("scale")], causal=True, alibi_slopes=None, sliding_window=-1, block_table=t[n.index("block_table")], softcap=0.0, scheduler_metadata=t[n.index("scheduler_metadata")], s_aux=None, dynamic_causal=None, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
        return out
    VC.VllmCpuLaunch.run = run
    from vllm_xpu_attn.vllm import compat
    orig = compat.split_kv_cache
    def split(kv_cache, head_size, kv_dtype, layout):
        k, v = orig(kv_cache, head_size, kv_dtype, layout)
        nb, nh, bs, _ = kv_cache.shape
        k._base_kv = kv_cache.view(nb, nh, bs * 2, -1)
        return k, v
    compat.split_kv_cache = split
sys.path.insert(0, "/work/main/benchmarks")
import bench_cpu_batches as B
class A: pass
a = A(); a.model = "/work/main/.venvs/smollm2-135m-instruct"; a.context = 2048
prompts = B._prompts(a)[:1]
from vllm import LLM, SamplingParams
llm = LLM(model=a.model, dtype="float32", seed=0, max_model_len=2100, enforce_eager=True, enable_prefix_caching=False)
sp = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
def gen():
    t = time.perf_counter(); llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False); return round(time.perf_counter() - t, 3)
gen()
print("RESULT", mode, [gen() for _ in range(4)], flush=True)
