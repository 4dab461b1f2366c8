import time, torch
from vllm import _custom_ops as ops
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
from vllm_xpu_attn.core import AttentionKind, LayerRunner, LayerSpec, Mode, StepInputs, plan_step
from vllm_xpu_attn.kernels.api import KVLayout
from vllm_xpu_attn.kernels.providers import vllm_cpu as VC
B, Hq, Hkv, D, page, ctx = 1, 9, 3, 64, 128, 2048
dt = torch.float32; P = 64
kv = torch.randn(P, Hkv, page, 2 * D, dtype=dt)
seq_lens = torch.full((B,), ctx, dtype=torch.int32)
qsl = torch.tensor([0, ctx], dtype=torch.int32)
bt = torch.arange(16, dtype=torch.int32).view(1, 16)
qkv = torch.randn(ctx, (Hq + 2 * Hkv) * D, dtype=dt)
q = qkv[:, : Hq * D].view(ctx, Hq, D)
out = torch.empty(ctx, Hq, D, dtype=dt)
isa = _get_attn_isa(dt, page, D, "auto"); print("isa", isa)
theirs = ops.cpu_attn_get_scheduler_metadata(num_reqs=B, num_heads=Hq, num_kv_heads=Hkv, head_dim=D, seq_lens=seq_lens, dtype=dt, query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=True, dynamic_causal=None, kv_cache_dtype="auto")
spec = LayerSpec(num_q_heads=Hq, num_kv_heads=Hkv, head_dim=D, scale=D**-0.5, kind=AttentionKind.DECODER, dtype=dt, kv_dtype=dt, kv_layout=KVLayout.HND)
runner = LayerRunner(spec, "cpu", page)
kvv = kv.view(P, Hkv, 2 * page, D)
kc, vc = kvv[:, :, :page].transpose(1, 2), kvv[:, :, page:].transpose(1, 2)
plan = plan_step(StepInputs(mode=Mode.MIXED, seq_lens=seq_lens, max_seqlen_k=ctx, num_tokens=ctx, page_size=page, cu_seqlens_q=qsl, max_seqlen_q=ctx, page_table=bt))
runner.forward(plan, q, kc, vc, out)
launch = next(iter(plan.launches.values()))
tmpl = launch._template
names = VC.ops().attn_names
ours_meta = tmpl[names.index("scheduler_metadata")]
print("meta equal", torch.equal(ours_meta, theirs), ours_meta.shape, theirs.shape, ours_meta.dtype)
if not torch.equal(ours_meta, theirs):
    d = (ours_meta != theirs).nonzero()[:10]; print("diff at", d.flatten().tolist()[:20]); print(ours_meta.flatten()[:32].tolist()); print(theirs.flatten()[:32].tolist())
for n, v in zip(names, tmpl):
    if not isinstance(v, torch.Tensor): print("arg", n, v)
kk, vv = kvv.chunk(2, dim=2)
def t_theirs():
    ops.cpu_attention_with_kv_cache(query=q, key_cache=kk, value_cache=vv, output=out, query_start_loc=qsl, seq_lens=seq_lens, scale=D**-0.5, causal=True, alibi_slopes=None, sliding_window=-1, block_table=bt, softcap=0, scheduler_metadata=theirs, s_aux=None, dynamic_causal=None, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
def t_ours():
    runner.forward(plan, q, kc, vc, out)
for f in (t_theirs, t_ours): f()
for r in range(3):
    for name, f in (("theirs", t_theirs), ("ours", t_ours)):
        t = time.perf_counter()
        for _ in range(5): f()
        print(name, round((time.perf_counter() - t) / 5 * 1e3, 2), "ms")
theirs2 = ops.cpu_attn_get_scheduler_metadata(num_reqs=B, num_heads=Hq, num_kv_heads=Hkv, head_dim=D, seq_lens=seq_lens, dtype=dt, query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=True, dynamic_causal=None, kv_cache_dtype="auto")
a, b, c = theirs.view(torch.int32), theirs2.view(torch.int32), ours_meta.view(torch.int32)
print("theirs vs theirs2 diff idx", (a != b).nonzero().flatten().tolist()[:20])
print("theirs vs ours diff idx", (a != c).nonzero().flatten().tolist()[:40])
print("nonzero theirs", (a != 0).sum().item(), "ours", (c != 0).sum().item())
print("theirs", a[:48].tolist()); print("ours  ", c[:48].tolist())
