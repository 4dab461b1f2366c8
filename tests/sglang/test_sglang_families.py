"""Model-family bugs, with SGLang's own pools, RadixAttention and ForwardBatch vs the naive oracle.

Llama-4 (iRoPE chunked local attention in a hybrid SWA pool, and at target verify), GPT-OSS (sinks
known only at forward time), SGLang's Llama-4 casting q to bf16 off CUDA, and top-k > 1 trees with
sliding windows. Each test failed before its fix (see the closing note of the session that added it).
"""

from types import SimpleNamespace

import pytest
import torch
from layouts import assert_close_to
from naive import naive_paged_attention
from sgl_objects import forward_batch as _fb
from test_sglang_graphs import HKV, D, H, _backend, _pools, _runner, _World


def _layer(layer_id, **kw):
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(H, D, D**-0.5, HKV, layer_id=layer_id, **kw)


def _table(world, reqs):
    lens = [len(world.slots[r]) for r in reqs]
    pt = torch.zeros(len(reqs), max(lens), dtype=torch.int32)
    for i, r in enumerate(reqs):
        pt[i, : lens[i]] = torch.tensor(world.slots[r], dtype=torch.int32)
    return pt, torch.tensor(lens)


def _chunked_oracle(world, q, reqs, q_lens, chunk):
    pt, lens = _table(world, reqs)
    cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()))
    return naive_paged_attention(
        q.view(-1, H, D), world.keys[:, None], world.vals[:, None], pt, lens, cu, scale=D**-0.5, chunk_size=chunk
    )[0]


def _extend(backend, world, reqs, lens, layers):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    prefix = [len(world.slots.get(r, [])) for r in reqs]
    new = [s for r, n in zip(reqs, lens) for s in world.grow(r, n)]
    loc = torch.tensor(new)
    fb = _fb(ForwardMode.EXTEND, reqs, [p + n for p, n in zip(prefix, lens)], loc, lens, prefix)
    backend.init_forward_metadata(fb)
    outs = []
    for layer in layers:
        q = torch.randn(len(new), H * D, generator=world.g)
        outs.append((q, backend.forward_extend(q, world.keys[loc], world.vals[loc], layer, fb)))
    return outs


def test_local_attention_layer_in_the_swa_pool_reads_swa_pages():
    """Llama-4 in SGLang's hybrid pool: the chunked (iRoPE) layers' KV lives in the SWA sub-pool."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    req_pool, kv_pool = _pools(swa=True)  # layer 1 in the SWA sub-pool
    backend = _backend(_runner(req_pool, kv_pool, chunk=4))
    local = _layer(1, use_irope=True)
    assert backend._spec(local, False).uses_swa_pool and backend._spec(local, False).local_attention
    world = _World(req_pool, kv_pool, [local], seed=21)
    for q, out in _extend(backend, world, [1, 2], [9, 6], [local]):
        assert_close_to(out.view(-1, H, D), _chunked_oracle(world, q, [1, 2], [9, 6], 4), torch.float32)
    for _ in range(3):
        loc = [world.grow(r, 1)[0] for r in (1, 2)]
        fb = _fb(ForwardMode.DECODE, [1, 2], [len(world.slots[1]), len(world.slots[2])], torch.tensor(loc))
        backend.init_forward_metadata(fb)
        q = torch.randn(2, H * D, generator=world.g)
        out = backend.forward_decode(q, world.keys[fb.out_cache_loc], world.vals[fb.out_cache_loc], local, fb)
        assert_close_to(out.view(-1, H, D), _chunked_oracle(world, q, [1, 2], [1, 1], 4), torch.float32)


def test_target_verify_top1_runs_local_layers_chunked():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    req_pool, kv_pool = _pools()
    backend = _backend(_runner(req_pool, kv_pool, chunk=4, topk=1, num_draft=3))
    local = _layer(0, use_irope=True)
    world = _World(req_pool, kv_pool, [local], seed=22)
    _extend(backend, world, [1, 2], [6, 3], [local])
    drafts = [world.grow(r, 3) for r in (1, 2)]  # 6 + 3 = 9 and 3 + 3 = 6: the drafts cross a chunk edge
    loc = torch.tensor([s for d in drafts for s in d])
    fb = _fb(ForwardMode.TARGET_VERIFY, [1, 2], [6, 3], loc)
    fb.spec_info = SimpleNamespace(custom_mask=None)
    backend.init_forward_metadata(fb)
    assert backend.forward_metadata.local is not None
    q = torch.randn(6, H * D, generator=world.g)
    out = backend.forward_extend(q, world.keys[loc], world.vals[loc], local, fb)
    assert_close_to(out.view(-1, H, D), _chunked_oracle(world, q, [1, 2], [3, 3], 4), torch.float32)


@pytest.mark.parametrize("kw", [dict(sliding_window_size=3), dict(use_irope=True)], ids=["window", "local"])
def test_topk_tree_with_window_or_local_layers_is_refused_at_start_up(kw):
    req_pool, kv_pool = _pools()
    runner = _runner(req_pool, kv_pool, topk=4, num_draft=8, chunk=4 if "use_irope" in kw else None)
    runner.model = torch.nn.ModuleList([_layer(0, **kw)])
    with pytest.raises(ValueError, match="top-k > 1"):
        _backend(runner)


def test_bf16_query_on_an_fp32_model_returns_model_dtype():
    """SGLang's Llama-4 casts q/k to bf16 on non-CUDA devices; the layer runs in the model dtype."""
    req_pool, kv_pool = _pools()
    backend = _backend(_runner(req_pool, kv_pool))
    layer = _layer(0)
    world = _World(req_pool, kv_pool, [layer], seed=23)
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    new = [s for r, n in zip([1, 2], [5, 4]) for s in world.grow(r, n)]
    loc = torch.tensor(new)
    fb = _fb(ForwardMode.EXTEND, [1, 2], [5, 4], loc, [5, 4], [0, 0])
    backend.init_forward_metadata(fb)
    q = torch.randn(len(new), H * D, generator=world.g).bfloat16()
    out = backend.forward_extend(q, world.keys[loc].bfloat16(), world.vals[loc].bfloat16(), layer, fb)
    assert out.dtype == torch.float32
    world.keys[loc] = world.keys[loc].bfloat16().float()  # what the pool stored
    world.vals[loc] = world.vals[loc].bfloat16().float()
    pt, lens = _table(world, [1, 2])
    want = naive_paged_attention(
        q.float().view(-1, H, D),
        world.keys[:, None],
        world.vals[:, None],
        pt,
        lens,
        torch.tensor([0, 5, 9]),
        scale=D**-0.5,
    )[0]
    assert_close_to(out.view(-1, H, D), want, torch.float32)


class _GptOssLikeAttention(torch.nn.Module):
    """SGLang keeps GPT-OSS's sinks on the model's attention module, beside its RadixAttention."""

    def __init__(self, layer_id):
        super().__init__()
        self.sinks = torch.nn.Parameter(torch.randn(H, dtype=torch.bfloat16))
        self.attn = _layer(layer_id)


def test_sinks_are_found_at_start_up(monkeypatch):
    from vllm_xpu_attn.kernels.api import NoProviderError, register_provider, unregister_provider
    from vllm_xpu_attn.kernels.providers.reference import ReferenceProvider

    req_pool, kv_pool = _pools()
    runner = _runner(req_pool, kv_pool)
    runner.model = torch.nn.ModuleList([_GptOssLikeAttention(0), torch.nn.ModuleDict({"attn": _layer(1)})])
    backend = _backend(runner)
    assert sorted(backend._runners) == [(0, True), (1, False)]

    class NoSinks(ReferenceProvider):  # a provider that cannot serve sinks, first for the CPU
        name = "no_sinks"
        features = ReferenceProvider.features - {"sinks"}

    register_provider("no_sinks", NoSinks, devices={"cpu": 0})
    monkeypatch.setenv("XPU_ATTN_KERNEL", "no_sinks")
    try:
        with pytest.raises(NoProviderError, match="sinks"):  # at construction, not at the first request
            _backend(runner)
    finally:
        unregister_provider("no_sinks")


def test_deterministic_inference_selects_batch_invariant_kernels():
    """SGLang's --enable-deterministic-inference reaches every layer as a batch-invariant LayerSpec,
    and only providers that declare batch invariance are chosen (tests/test_batch_invariance.py
    proves the invariance itself)."""
    req_pool, kv_pool = _pools()
    runner = _runner(req_pool, kv_pool)
    runner.server_args.enable_deterministic_inference = True
    runner.model = torch.nn.ModuleList([_layer(0), _layer(1, sliding_window_size=3)])
    backend = _backend(runner)
    assert backend._runners and all(r.spec.batch_invariant for r in backend._runners.values())
    assert all("batch_invariant" in r.decode_provider.features for r in backend._runners.values())
    runner.server_args.enable_deterministic_inference = False
    assert not any(r.spec.batch_invariant for r in _backend(runner)._runners.values())
