"""Graph capture and the hybrid SWA pool, with SGLang's own objects.

Graphs: under capture the adapter builds its plan inside the captured region (SGLang 0.5.23's
``init_forward_metadata_in_graph``) from the runner's static buffers. What makes that replayable
is checked here on the CPU: (1) the planned shapes and host ints depend on the batch size only,
never on the sequence lengths; (2) planning reads no device value on the host (it runs on
`meta` tensors, which have none); (3) the graph-mode plan gives the oracle's output, padded rows
included. Real CUDA graph capture and replay of the same planning + the Triton kernel is in
tests/gpu/gpu_check_triton.py (H200; there is no SGLang on that machine).
"""

from types import SimpleNamespace

import pytest
import torch
from layouts import assert_close_to
from naive import naive_paged_attention
from sgl_objects import forward_batch as _fb

H, HKV, D = 4, 2, 16
WIDTH = 64  # token table width (max context length)


def _runner(req_pool, kv_pool, page_size=1, chunk=None, topk=None, num_draft=None, encoder_decoder=False):
    return SimpleNamespace(
        device="cpu",
        page_size=page_size,
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        model_config=SimpleNamespace(is_encoder_decoder=encoder_decoder),
        dtype=torch.float32,
        kv_cache_dtype=torch.float32,
        server_args=SimpleNamespace(speculative_eagle_topk=topk, speculative_num_draft_tokens=num_draft),
        model=None,
        attention_chunk_size=chunk,
        use_mla_backend=False,
    )


def _pools(swa=False, page_size=1):
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    req_pool = ReqToTokenPool(size=8, max_context_len=WIDTH, device="cpu", enable_memory_saver=False)
    if not swa:
        return req_pool, MHATokenToKVPool(
            size=512,
            page_size=page_size,
            dtype=torch.float32,
            head_num=HKV,
            head_dim=D,
            layer_num=2,
            device="cpu",
            enable_memory_saver=False,
        )
    from sglang_compat.compat import SWAKVPool

    pool = SWAKVPool(
        size=512,
        size_swa=256,
        page_size=page_size,
        dtype=torch.float32,
        head_num=HKV,
        head_dim=D,
        swa_attention_layer_ids=[1],
        full_attention_layer_ids=[0],
        device="cpu",
    )
    # full slot -> SWA slot: a shuffled injection into the smaller pool (slot 0 stays the padding slot)
    g = torch.Generator().manual_seed(11)
    mapping = torch.zeros(512 + 1, dtype=torch.int64)
    mapping[1:256] = torch.randperm(255, generator=g) + 1
    pool.register_mapping(mapping)
    return req_pool, pool


def _backend(runner):
    from sglang_compat.backend import XpuAttnSGLangBackend

    return XpuAttnSGLangBackend(runner)


def _layers():
    from sglang.srt.layers.radix_attention import RadixAttention

    return [
        RadixAttention(H, D, D**-0.5, HKV, layer_id=0),
        RadixAttention(H, D, D**-0.5, HKV, layer_id=1, sliding_window_size=3, logit_cap=5.0),
    ]


class _World:
    """Requests with K/V kept by the test (the oracle's copy) and written through the pool."""

    def __init__(self, req_pool, kv_pool, layers, seed, page_size=1):
        self.g = torch.Generator().manual_seed(seed)
        self.page_size = page_size
        self.req_pool, self.kv_pool, self.layers = req_pool, kv_pool, layers
        self.keys = torch.randn(600, HKV, D, generator=self.g)  # indexed by full-pool slot
        self.vals = torch.randn(600, HKV, D, generator=self.g)
        self.free = (torch.randperm(250, generator=self.g) + 1).tolist()  # slots < 256: all have SWA twins
        self.slots: dict[int, list[int]] = {}

    def grow(self, req: int, n: int) -> list[int]:
        have = self.slots.setdefault(req, [])
        if self.page_size == 1:
            new = [self.free.pop() for _ in range(n)]  # shuffled, non-contiguous slots
        else:  # whole pages: each request owns a contiguous, page-aligned region
            new = list(range(64 * req + len(have), 64 * req + len(have) + n))
        self.req_pool.req_to_token[req, len(have) : len(have) + n] = torch.tensor(new, dtype=torch.int32)
        have.extend(new)
        return new

    def oracle(self, q, reqs, q_lens, layer_idx):
        lens = [len(self.slots[r]) for r in reqs]
        pt = torch.zeros(len(reqs), max(lens), dtype=torch.int32)
        for i, r in enumerate(reqs):
            pt[i, : lens[i]] = torch.tensor(self.slots[r], dtype=torch.int32)
        cu = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0).tolist()))
        window, softcap = ((3, 0), 5.0) if layer_idx == 1 else ((-1, -1), 0.0)
        return naive_paged_attention(
            q.view(-1, H, D),
            self.keys[:, None],
            self.vals[:, None],
            pt,
            torch.tensor(lens),
            cu,
            scale=D**-0.5,
            window=window,
            softcap=softcap,
        )[0]


def _prefill(backend, world, reqs, lens):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    new = [s for r, n in zip(reqs, lens) for s in world.grow(r, n)]
    loc = torch.tensor(new)
    fb = _fb(ForwardMode.EXTEND, reqs, lens, loc, lens, [0] * len(reqs))
    backend.init_forward_metadata(fb)
    for i, layer in enumerate(world.layers):
        q = torch.randn(len(new), H * D, generator=world.g)
        out = backend.forward_extend(q, world.keys[loc], world.vals[loc], layer, fb)
        assert_close_to(out.view(-1, H, D), world.oracle(q, reqs, lens, i), torch.float32)


def _graph_decode(backend, world, reqs, padded_bs, check=True):
    """One decode step as the graph runner drives it: padded rows (request 0, seq_len fill value)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    loc = [world.grow(r, 1)[0] for r in reqs]
    pad = padded_bs - len(reqs)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    seq_lens = [len(world.slots[r]) for r in reqs] + [fill] * pad
    fb = _fb(ForwardMode.DECODE, list(reqs) + [0] * pad, seq_lens, torch.tensor(loc + [0] * pad))
    backend.init_forward_metadata_out_graph(fb, in_capture=True)
    backend.init_forward_metadata_in_graph(fb)
    plan = backend.forward_metadata
    for i, layer in enumerate(world.layers):
        q = torch.randn(padded_bs, H * D, generator=world.g)
        k, v = world.keys[fb.out_cache_loc], world.vals[fb.out_cache_loc]
        out = backend.forward_decode(q, k, v, layer, fb)
        if check:
            n = len(reqs)
            assert_close_to(out.view(-1, H, D)[:n], world.oracle(q[:n], reqs, [1] * n, i), torch.float32)
            assert torch.isfinite(out).all(), "padded rows must stay finite"
    return plan


def _signature(plan):
    """Everything a captured graph bakes in: tensor shapes/dtypes and host ints."""
    sig = [plan.mode, plan.num_tokens]
    for sub in (plan.main, plan.local, plan.encoder, plan.spec_expand):
        if sub is not None:
            sig += [sub.max_seqlen_q, sub.max_seqlen_k, sub.page_size]
            sig += [(t.shape, t.dtype) for t in (sub.cu_seqlens_q, sub.cache_seqlens, sub.page_table)]
    if plan.swa_page_table is not None:
        sig.append((plan.swa_page_table.shape, plan.swa_page_table.dtype))
    return sig


@pytest.mark.parametrize("swa,page_size", [(False, 1), (True, 1), (False, 4)])
def test_graph_mode_decode_matches_oracle_and_shapes_are_length_independent(swa, page_size):
    req_pool, kv_pool = _pools(swa=swa, page_size=page_size)
    backend = _backend(_runner(req_pool, kv_pool, page_size=page_size))
    backend.init_cuda_graph_state(max_bs=8, max_num_tokens=8)
    world = _World(req_pool, kv_pool, _layers(), seed=3, page_size=page_size)
    _prefill(backend, world, [1, 2, 3], [5, 9, 2])
    sigs = []
    for step in range(4):  # lengths grow every step; the captured signature must not
        plan = _graph_decode(backend, world, [1, 2, 3], padded_bs=4)
        sigs.append(_signature(plan))
        assert plan.main.page_table.shape[1] * page_size >= WIDTH - page_size
        assert (plan.swa_page_table is not None) == swa
    assert all(s == sigs[0] for s in sigs), "graph plan shapes must depend on the batch size only"
    # the eager plan of the same batch is sized by the real lengths instead
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    eager = backend.plan(_fb(ForwardMode.DECODE, [1], [len(world.slots[1])], torch.tensor([0])))
    assert eager.main.page_table.shape[1] < plan.main.page_table.shape[1]


def test_graph_mode_with_local_attention_matches_oracle():
    from sglang.srt.layers.radix_attention import RadixAttention

    req_pool, kv_pool = _pools()
    backend = _backend(_runner(req_pool, kv_pool, chunk=4))
    backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
    layer = RadixAttention(H, D, D**-0.5, HKV, layer_id=0, use_irope=True)
    world = _World(req_pool, kv_pool, [layer], seed=4)
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    _ = [world.grow(r, n) for r, n in ((1, 6), (2, 11))]
    for r in (1, 2):
        loc = torch.tensor(world.slots[r])
        kv_pool.set_kv_buffer(layer, loc, world.keys[loc], world.vals[loc])
    loc = [world.grow(r, 1)[0] for r in (1, 2)]
    fb = _fb(ForwardMode.DECODE, [1, 2, 0], [7, 12, 1], torch.tensor(loc + [0]))
    backend.init_forward_metadata_out_graph(fb, in_capture=True)
    backend.init_forward_metadata_in_graph(fb)
    assert backend.forward_metadata.local is not None
    q = torch.randn(3, H * D, generator=world.g)
    out = backend.forward_decode(q, world.keys[fb.out_cache_loc], world.vals[fb.out_cache_loc], layer, fb)
    pt = torch.zeros(2, 12, dtype=torch.int32)
    pt[0, :7] = torch.tensor(world.slots[1])
    pt[1, :12] = torch.tensor(world.slots[2])
    want = naive_paged_attention(
        q[:2].view(2, H, D),
        world.keys[:, None],
        world.vals[:, None],
        pt,
        torch.tensor([7, 12]),
        torch.tensor([0, 1, 2]),
        scale=D**-0.5,
        chunk_size=4,
    )[0]
    assert_close_to(out.view(-1, H, D)[:2], want, torch.float32)


def test_graph_planning_reads_no_device_values():
    """The in-graph plan runs on `meta` tensors (no values): any host read would raise."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    M = torch.device("meta")
    req_pool, kv_pool = _pools(swa=True)
    backend = _backend(_runner(req_pool, kv_pool, chunk=8))
    backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
    mapping = torch.empty(513, dtype=torch.int64, device=M)
    backend.req_to_token_pool = SimpleNamespace(req_to_token=torch.empty(8, WIDTH, dtype=torch.int32, device=M))
    backend.token_to_kv_pool = SimpleNamespace(translate_loc_from_full_to_swa=lambda x: mapping[x.long()])
    fb = SimpleNamespace(
        forward_mode=ForwardMode.DECODE,
        batch_size=4,
        spec_info=None,
        encoder_lens=None,
        req_pool_indices=torch.empty(4, dtype=torch.int64, device=M),
        seq_lens=torch.empty(4, dtype=torch.int32, device=M),
        seq_lens_cpu=None,
        out_cache_loc=torch.empty(4, dtype=torch.int64, device=M),
    )
    backend.init_forward_metadata_out_graph(fb, in_capture=True)  # host part: nothing for decode
    backend.init_forward_metadata_in_graph(fb)
    plan = backend.forward_metadata
    assert plan.main.page_table.device.type == "meta" and plan.main.page_table.shape == (4, WIDTH)
    assert plan.local is not None and plan.swa_page_table.shape == (4, WIDTH)
    assert backend.swa_out_cache_loc.shape == (4,)
    with pytest.raises(Exception):  # the eager path needs host lengths: proves the test can fail
        backend.init_forward_metadata(fb)


def test_graph_target_verify_topk1_static_bound_leaves_room_for_drafts():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    req_pool, kv_pool = _pools()
    backend = _backend(_runner(req_pool, kv_pool, topk=1, num_draft=3))
    backend.init_cuda_graph_state(max_bs=4, max_num_tokens=12)
    assert backend._graph_max_k == WIDTH - 3
    world = _World(req_pool, kv_pool, _layers()[:1], seed=5)
    _prefill(backend, world, [1, 2], [6, 4])
    drafts = [world.grow(r, 3) for r in (1, 2)]
    loc = torch.tensor([s for d in drafts for s in d])
    fb = _fb(ForwardMode.TARGET_VERIFY, [1, 2], [6, 4], loc)
    fb.spec_info = SimpleNamespace(custom_mask=None)
    backend.init_forward_metadata_out_graph(fb, in_capture=True)
    backend.init_forward_metadata_in_graph(fb)
    q = torch.randn(6, H * D, generator=world.g)
    out = backend.forward_extend(q, world.keys[loc], world.vals[loc], world.layers[0], fb)
    # each draft sees the prefix and the drafts up to itself: causal over prefix + 3
    assert_close_to(out.view(-1, H, D), world.oracle(q, [1, 2], [3, 3], 0), torch.float32)


@pytest.mark.parametrize(
    "kw,match", [(dict(topk=4, num_draft=8), "top-k"), (dict(encoder_decoder=True), "encoder-decoder")]
)
def test_graph_capture_refused_where_unsupported(kw, match):
    req_pool, kv_pool = _pools()
    backend = _backend(_runner(req_pool, kv_pool, **kw))
    with pytest.raises(ValueError, match=match):
        backend.init_cuda_graph_state(max_bs=4, max_num_tokens=32)


def test_hybrid_swa_pool_extend_and_decode_match_oracle():
    """Full-attention layer 0 in the full pool, window layer 1 in the SWA sub-pool, addressed
    through the pool's full->SWA translation (writes and the page table both)."""
    req_pool, kv_pool = _pools(swa=True)
    backend = _backend(_runner(req_pool, kv_pool))
    layers = _layers()
    assert [backend._spec(l, False).uses_swa_pool for l in layers] == [False, True]
    world = _World(req_pool, kv_pool, layers, seed=6)
    _prefill(backend, world, [1, 2], [7, 3])
    # the window layer's K/V went to the SWA sub-pool at translated slots, not the full pool's
    swa_k = kv_pool.swa_kv_pool.get_key_buffer(0)
    s = world.slots[1][0]
    assert torch.equal(swa_k[kv_pool.full_to_swa_index_mapping[s]], world.keys[s])
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    for _ in range(3):  # eager decode steps
        loc = [world.grow(r, 1)[0] for r in (1, 2)]
        fb = _fb(ForwardMode.DECODE, [1, 2], [len(world.slots[1]), len(world.slots[2])], torch.tensor(loc))
        backend.init_forward_metadata(fb)
        for i, layer in enumerate(layers):
            q = torch.randn(2, H * D, generator=world.g)
            out = backend.forward_decode(q, world.keys[fb.out_cache_loc], world.vals[fb.out_cache_loc], layer, fb)
            assert_close_to(out.view(-1, H, D), world.oracle(q, [1, 2], [1, 1], i), torch.float32)


def test_graph_capture_refused_when_a_layer_provider_syncs():
    """A layer served by a provider that reads the host (the CPU's torch_sdpa and reference) cannot be captured:
    refused at init_cuda_graph_state with the provider's reason, not an obscure capture error later."""
    req_pool, kv_pool = _pools()
    backend = _backend(_runner(req_pool, kv_pool))
    backend._runner(_layers()[0], has_sinks=False)  # a configured layer (the CPU picks torch_sdpa)
    with pytest.raises(ValueError, match="torch_sdpa: reads the step's lengths on the host"):
        backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
