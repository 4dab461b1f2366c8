"""MLA (DeepSeek-V2/V3) through the SGLang adapter.

In process, with SGLang's own MLATokenToKVPool, ReqToTokenPool, RadixAttention and ForwardBatch:
the two RadixAttentions an MLA layer has (``attn_mha``: the un-absorbed first prefill on the K/V
SGLang decompresses; ``attn_mqa``: absorbed attention over the latent rows, in SGLang's "concat"
form under ``xpu_attn`` and its "split" form under ``intel_xpu``) against the naive MLA written from
the DeepSeek-V2 paper (tests/support/naive_mla.py), for a first prefill, an extend on cached prefixes and
decode, page sizes 1 and 16, an FP8 latent cache, and graph-mode decode with padded rows.

End to end: a tiny DeepSeek-V2 (tests/support/families.py "deepseek-v2", given a YaRN rope because SGLang's
CPU rope only builds DeepSeek-YaRN) served by ``sglang.Engine`` on the CPU with
``--attention-backend xpu_attn``: greedy tokens identical to transformers' eager ones, over a first
prefill (MHA), radix-cache hits and shared-prefix prompts (absorbed extend on a cached prefix),
decode, and chunked prefill with page size 16. The comparison is with transformers only: SGLang
0.5.23's own CPU attention backend cannot run this model. Under ``torch_native`` the first prefill
takes DeepSeek's MHA form and torch_native attends its 80-wide queries over the 576-wide latent
cache instead of the K/V it is given:
``RuntimeError: Expected size for first two dimensions of batch2 tensor to be: [4, 80] but got: [4, 576].``
(torch_native_backend.py:160, asserted below so a fixed SGLang shows up); intel_amx needs the CPU
sgl-kernel build (absent) and triton cannot launch on the CPU platform.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import run_sglang_batch
from naive_mla import naive_mla
from sgl_objects import forward_batch as _fb

H, D_C, D_R, D_H, D_V = 4, 32, 16, 16, 16  # heads, kv_lora_rank, rope, nope, v (small: the oracle loops)
LAT = D_C + D_R
SCALE = (D_H + D_R) ** -0.5 * 1.2  # SGLang's 192-based scale times a YaRN-like mscale: any scale must pass through


@pytest.fixture(autouse=True)
def _no_dcp():
    """MLATokenToKVPool.set_kv_buffer asks SGLang's parallel context whether DCP is on; an engine publishes
    it, an in-process test states it."""
    from sglang.srt.runtime_context import get_parallel

    with get_parallel().override(dcp_enabled=False):
        yield


def _layers(layer_id=0, scale=SCALE):
    """DeepSeek-V2's pair (deepseek_v2.py: attn_mqa / attn_mha), one layer id."""
    from sglang.srt.layers.radix_attention import RadixAttention

    mqa = RadixAttention(H, LAT, scale, num_kv_heads=1, layer_id=layer_id, v_head_dim=D_C)
    mha = RadixAttention(H, D_H + D_R, scale, num_kv_heads=H, layer_id=layer_id, v_head_dim=D_V)
    return mqa, mha


def _setup(page_size=1, kv_dtype=torch.float32, layers=None, width=128):
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool

    from sglang_compat.backend import XpuAttnSGLangBackend

    req_pool = ReqToTokenPool(size=8, max_context_len=width, device="cpu", enable_memory_saver=False)
    kv_pool = MLATokenToKVPool(
        size=1024,
        page_size=page_size,
        dtype=kv_dtype,
        kv_lora_rank=D_C,
        qk_rope_head_dim=D_R,
        layer_num=2,
        device="cpu",
        enable_memory_saver=False,
    )
    layers = layers if layers is not None else _layers()
    hf = SimpleNamespace(kv_lora_rank=D_C, qk_rope_head_dim=D_R, qk_nope_head_dim=D_H, v_head_dim=D_V)
    runner = SimpleNamespace(
        device="cpu",
        page_size=page_size,
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        model_config=SimpleNamespace(is_encoder_decoder=False, hf_text_config=hf),
        dtype=torch.float32,
        kv_cache_dtype=kv_dtype,
        server_args=SimpleNamespace(speculative_eagle_topk=None, speculative_num_draft_tokens=None),
        model=torch.nn.ModuleList(layers),
        attention_chunk_size=None,
        use_mla_backend=True,
    )
    return XpuAttnSGLangBackend(runner), req_pool, kv_pool


class _World:
    """Each request's latent rows (c_KV, k_R) kept by the test, slots in SGLang's token table."""

    def __init__(self, req_pool, kv_pool, seed, page_size=1, kv_dtype=torch.float32):
        self.g = torch.Generator().manual_seed(seed)
        self.req_pool, self.kv_pool, self.page_size, self.kv_dtype = req_pool, kv_pool, page_size, kv_dtype
        self.w_uk = torch.randn(H, D_H, D_C, generator=self.g) * D_C**-0.5
        self.w_uv = torch.randn(H, D_V, D_C, generator=self.g) * D_C**-0.5
        self.free = (torch.randperm(900, generator=self.g) + 1).tolist()  # slot 0 is SGLang's padding slot
        self.slots: dict[int, list[int]] = {}
        self.c: dict[int, torch.Tensor] = {}
        self.kr: dict[int, torch.Tensor] = {}

    def grow(self, req, n):
        have = self.slots.setdefault(req, [])
        if self.page_size == 1:
            new = [self.free.pop() for _ in range(n)]  # shuffled, non-contiguous slots
        else:  # whole pages: each request owns a page-aligned region (pages 1.. of 16)
            base = 128 * req + self.page_size
            new = list(range(base + len(have), base + len(have) + n))
        self.req_pool.req_to_token[req, len(have) : len(have) + n] = torch.tensor(new, dtype=torch.int32)
        have.extend(new)
        c = torch.randn(n, D_C, generator=self.g)
        kr = torch.randn(n, D_R, generator=self.g)
        self.c[req] = torch.cat([self.c.get(req, c[:0]), c])
        self.kr[req] = torch.cat([self.kr.get(req, kr[:0]), kr])
        return new, c, kr

    def seen(self, req, cached=True):
        """The latent rows as the cache holds them (FP8: the unscaled cast SGLang's pool stores)."""
        c, kr = self.c[req], self.kr[req]
        if cached and self.kv_dtype != torch.float32:
            c, kr = c.to(self.kv_dtype).float(), kr.to(self.kv_dtype).float()
        return c, kr

    def oracle(self, reqs, q_lens, q_nope, q_rope, cached=True):
        outs, at = [], 0
        for r, ql in zip(reqs, q_lens):
            c, kr = self.seen(r, cached)
            outs.append(
                naive_mla(
                    q_nope[at : at + ql],
                    q_rope[at : at + ql],
                    c,
                    kr,
                    self.w_uk,
                    self.w_uv,
                    q_start=c.shape[0] - ql,
                    scale=SCALE,
                )
            )
            at += ql
        return torch.cat(outs)

    def queries(self, n):
        return torch.randn(n, H, D_H, generator=self.g), torch.randn(n, H, D_R, generator=self.g)


def _close(got, want, fp8=False):
    tol = 3e-2 if fp8 else 1e-4
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)


def _mha_prefill(backend, world, mha, reqs, lens):
    """DeepSeek's first prefill: the model writes the latent rows, then attn_mha(q, k, v, save_kv_cache=False)."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    locs, cs, krs = [], [], []
    for r, n in zip(reqs, lens):
        loc, c, kr = world.grow(r, n)
        locs += loc
        cs.append(c)
        krs.append(kr)
    c, kr, loc = torch.cat(cs), torch.cat(krs), torch.tensor(locs)
    fb = _fb(ForwardMode.EXTEND, reqs, lens, loc, lens, [0] * len(reqs))
    backend.init_forward_metadata(fb)
    world.kv_pool.set_kv_buffer(mha, loc, torch.cat([c, kr], -1)[:, None], None)  # forward_mha.py:619-626 (CPU)
    q_nope, q_rope = world.queries(len(locs))
    k = torch.cat([torch.einsum("hnc,tc->thn", world.w_uk, c), kr[:, None].expand(-1, H, -1)], -1)
    v = torch.einsum("hvc,tc->thv", world.w_uv, c)
    q = torch.cat([q_nope, q_rope], -1).reshape(len(locs), -1)
    out = backend.forward_extend(q, k, v, mha, fb, save_kv_cache=False)
    assert out.shape == (len(locs), H * D_V)
    # the MHA prefill attends the K/V it is given (the model's, never quantised), not the cache
    _close(out.view(-1, H, D_V), world.oracle(reqs, lens, q_nope, q_rope, cached=False))


def _absorbed(backend, world, mqa, fb, reqs, q_lens, new_rows, form):
    """attn_mqa as deepseek's forward_absorb_core calls it; returns (out [T, H, D_C] @ W_UV, the oracle)."""
    c, kr = new_rows
    q_nope, q_rope = world.queries(sum(q_lens))
    q_lat = torch.einsum("thn,hnc->thc", q_nope, world.w_uk)  # q_nope W_UK
    if form == "concat":  # xpu_attn (and triton, torch_native): q [T, H*576], k [T, 1, 576], v = k_nope
        q = torch.cat([q_lat, q_rope], -1).reshape(q_lat.shape[0], -1)
        k = torch.cat([c, kr], -1)[:, None]
        out = (backend.forward_decode if fb.forward_mode.is_decode() else backend.forward_extend)(
            q, k, c[:, None], mqa, fb, save_kv_cache=True
        )
    else:  # intel_xpu: q_nope_out, k_nope with q_rope/k_rope kwargs
        fwd = backend.forward_decode if fb.forward_mode.is_decode() else backend.forward_extend
        out = fwd(
            q_lat.reshape(q_lat.shape[0], -1),
            c[:, None],
            c[:, None],
            mqa,
            fb,
            save_kv_cache=True,
            q_rope=q_rope.reshape(q_rope.shape[0], -1),
            k_rope=kr[:, None],
        )
    assert out.shape == (sum(q_lens), H * D_C)
    got = torch.einsum("thc,hvc->thv", out.view(-1, H, D_C).double(), world.w_uv.double())
    return got, world.oracle(reqs, q_lens, q_nope, q_rope)


@pytest.mark.parametrize("form", ["concat", "split"])
@pytest.mark.parametrize("page_size", [1, 16])
def test_mla_prefill_extend_with_prefix_and_decode_match_naive_mla(page_size, form):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    mqa, mha = _layers()
    backend, req_pool, kv_pool = _setup(page_size=page_size, layers=[mqa, mha])
    assert set(backend._runners) == {(0, False, "mla"), (0, False, "mha")}
    world = _World(req_pool, kv_pool, seed=page_size + (form == "split"), page_size=page_size)

    # 1. first prefill, no prefix: un-absorbed MHA on SGLang's decompressed K/V
    _mha_prefill(backend, world, mha, [1, 2], [7, 20])

    # 2. extend on cached prefixes (radix hit / next chunk), with a new request beside: absorbed
    reqs, lens = [1, 2, 3], [4, 1, 6]
    prefix = [len(world.slots.get(r, [])) for r in reqs]
    rows = [world.grow(r, n) for r, n in zip(reqs, lens)]
    loc = torch.tensor([s for r in rows for s in r[0]])
    new_rows = (torch.cat([r[1] for r in rows]), torch.cat([r[2] for r in rows]))
    fb = _fb(ForwardMode.EXTEND, reqs, [p + n for p, n in zip(prefix, lens)], loc, lens, prefix)
    backend.init_forward_metadata(fb)
    got, want = _absorbed(backend, world, mqa, fb, reqs, lens, new_rows, form)
    _close(got, want)
    # the MHA layer on a step with a cached prefix must refuse, never drop the prefix
    with pytest.raises(ValueError, match="cached prefix"):
        backend.forward_extend(
            torch.zeros(11, H * (D_H + D_R)),
            torch.zeros(11, H, D_H + D_R),
            torch.zeros(11, H, D_V),
            mha,
            fb,
            save_kv_cache=False,
        )

    # 3. two decode steps
    for _ in range(2):
        rows = [world.grow(r, 1) for r in reqs]
        loc = torch.tensor([r[0][0] for r in rows])
        new_rows = (torch.cat([r[1] for r in rows]), torch.cat([r[2] for r in rows]))
        fb = _fb(ForwardMode.DECODE, reqs, [len(world.slots[r]) for r in reqs], loc)
        backend.init_forward_metadata(fb)
        got, want = _absorbed(backend, world, mqa, fb, reqs, [1, 1, 1], new_rows, form)
        _close(got, want)
    # what the pool holds is what SGLang's own readers see: get_value_buffer = the first kv_lora_rank columns
    slots = torch.tensor(world.slots[3])
    torch.testing.assert_close(kv_pool.get_value_buffer(0)[slots, 0], world.c[3])
    assert {"un-absorbed (MHA) prefill", "absorbed extend", "absorbed decode"} <= backend.mla.paths_seen


def test_mla_graph_mode_decode_with_padded_rows(monkeypatch):
    """init_cuda_graph_state + the in-graph plan (static key bound) for MLA decode, padded rows included.

    The CPU's providers (torch_sdpa, the reference) read lengths on the host, so capture is refused with them.
    The plan's replayability is what is checked here (real capture of the Triton kernels: tests/gpu), so the
    CPU provider is then declared graph-safe for the test; the MHA-prefill provider, which never runs in a
    graph, must not block capture even when it is not graph-safe."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from vllm_xpu_attn.kernels.api import get_provider
    from vllm_xpu_attn.kernels.providers.cpu_sdpa import TorchSdpaProvider
    from vllm_xpu_attn.kernels.providers.reference import ReferenceProvider

    mqa, mha = _layers()
    backend, req_pool, kv_pool = _setup(layers=[mqa, mha], width=64)
    with pytest.raises(ValueError, match="torch_sdpa: reads the step's lengths on the host"):
        backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
    monkeypatch.setattr(ReferenceProvider, "graph_capture_reason", None)
    monkeypatch.setattr(TorchSdpaProvider, "graph_capture_reason", None)
    unsafe = SimpleNamespace(name="syncs", graph_capture_reason="reads the host")
    for r in backend._runners.values():
        monkeypatch.setattr(r, "mha_provider", unsafe, raising=True)
    mha_runner = backend._runners[(0, False, "mha")]
    for attr in ("prefill_provider", "decode_provider"):  # the MHA role's paged providers never run either
        monkeypatch.setattr(mha_runner, attr, unsafe)
    backend.init_cuda_graph_state(max_bs=4, max_num_tokens=4)
    for r in backend._runners.values():  # the eager MHA prefill below needs a real provider again
        r.mha_provider = get_provider("reference")
    world = _World(req_pool, kv_pool, seed=9)
    _mha_prefill(backend, world, mha, [1, 2, 3], [5, 9, 2])
    shapes = set()
    for _ in range(3):
        reqs = [1, 2, 3]
        rows = [world.grow(r, 1) for r in reqs]
        fill = backend.get_cuda_graph_seq_len_fill_value()
        fb = _fb(
            ForwardMode.DECODE,
            reqs + [0],
            [len(world.slots[r]) for r in reqs] + [fill],
            torch.tensor([r[0][0] for r in rows] + [0]),
        )
        backend.init_forward_metadata_out_graph(fb, in_capture=True)
        backend.init_forward_metadata_in_graph(fb)
        plan = backend.forward_metadata
        shapes.add((plan.main.page_table.shape, plan.main.max_seqlen_k))
        c = torch.cat([r[1] for r in rows] + [torch.zeros(1, D_C)])
        kr = torch.cat([r[2] for r in rows] + [torch.zeros(1, D_R)])
        q_nope, q_rope = world.queries(4)
        q = torch.cat([torch.einsum("thn,hnc->thc", q_nope, world.w_uk), q_rope], -1).reshape(4, -1)
        out = backend.forward_decode(q, torch.cat([c, kr], -1)[:, None], c[:, None], mqa, fb)
        got = torch.einsum("thc,hvc->thv", out.view(-1, H, D_C)[:3].double(), world.w_uv.double())
        _close(got, world.oracle(reqs, [1, 1, 1], q_nope[:3], q_rope[:3]))
        assert torch.isfinite(out).all(), "the padded row must stay finite"
    assert shapes == {(torch.Size([4, 64]), 64)}, "the graph plan must depend on the batch size only"


def test_mla_fp8_latent_cache():
    """An FP8 pool (uint8 storage, no scale of its own): SGLang stores the unscaled cast; read back with descale 1."""
    fp8 = torch.float8_e4m3fn
    mqa, mha = _layers()
    backend, req_pool, kv_pool = _setup(kv_dtype=fp8, layers=[mqa, mha])
    assert kv_pool.store_dtype == torch.uint8 and backend.mla.fp8
    world = _World(req_pool, kv_pool, seed=4, kv_dtype=fp8)
    _mha_prefill(backend, world, mha, [1], [9])  # its K/V are the model's, unquantised: the oracle's too
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    rows = world.grow(1, 1)
    fb = _fb(ForwardMode.DECODE, [1], [10], torch.tensor(rows[0]))
    backend.init_forward_metadata(fb)
    got, want = _absorbed(backend, world, mqa, fb, [1], [1], (rows[1], rows[2]), "concat")
    _close(got, want, fp8=True)


def test_mla_fp8_with_a_kv_scale_is_refused_at_start_up():
    mqa, mha = _layers()
    mqa.k_scale_float = 0.5
    with pytest.raises(ValueError, match="k_scale 0.5"):
        _setup(kv_dtype=torch.float8_e4m3fn, layers=[mqa, mha])


def test_mla_layers_that_fit_neither_form_are_refused():
    from sglang.srt.layers.radix_attention import RadixAttention

    odd = RadixAttention(H, 40, SCALE, num_kv_heads=1, layer_id=1, v_head_dim=32)
    with pytest.raises(ValueError, match="neither the absorbed form"):
        _setup(layers=[*_layers(), odd])


# ---- end to end -------------------------------------------------------------------------
SUFFIXES = [" and then the", " so the cache", " while"]  # shared-prefix prompts: a cached prefix, several new tokens
N_TOKENS = 24


def _yarn(path: Path) -> None:
    """SGLang's CPU rope (get_rope_cpu) builds only DeepSeek-YaRN: give the tiny model a real YaRN rope
    (factor 4, DeepSeek-V2's mscale 0.707), which SGLang maps to deepseek_yarn and transformers to yarn;
    its mscale also enters the attention scale (layer.scaling), so that is checked end to end too."""
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["rope_parameters"] = {
        "rope_theta": 10000.0,
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 256,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    }
    cfg_path.write_text(json.dumps(cfg, indent=2))


def _hf_greedy(path: Path, prompts: list, out: Path) -> list:
    """transformers' eager greedy tokens (tests/support/families.py greedy) for these prompts, in a subprocess."""
    tests = Path(__file__).resolve().parent.parent / "support"
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import families; "
        "families.PROMPTS[:] = json.load(open(sys.argv[2])); "
        "json.dump(families.greedy(sys.argv[3], int(sys.argv[4])), open(sys.argv[5], 'w'))"
    )
    pj = out.with_suffix(".prompts.json")
    pj.write_text(json.dumps(prompts))
    subprocess.run(
        [sys.executable, "-c", code, str(tests), str(pj), str(path), str(N_TOKENS), str(out)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory):
    import families

    root = tmp_path_factory.mktemp("mla")
    path = root / "deepseek-v2"
    subprocess.run(
        [sys.executable, str(Path(families.__file__)), "make", str(path), "deepseek-v2", "0"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    _yarn(path)
    prompts = list(families.PROMPTS)
    shared = [prompts[i] + SUFFIXES[i % len(SUFFIXES)] for i in range(0, len(prompts), 2)]
    (root / "prompts.json").write_text(json.dumps(prompts))
    (root / "shared.json").write_text(json.dumps(shared))
    return {
        "path": str(path),
        "root": root,
        "prompts": root / "prompts.json",
        "shared": root / "shared.json",
        "hf": _hf_greedy(path, prompts, root / "hf.json"),
        "hf_shared": _hf_greedy(path, shared, root / "hf2.json"),
    }


@pytest.fixture(scope="module")
def e2e(deepseek):
    """The runs below in one SGLang process (each its own Engine), SGLang's refusal last (it may end the process)."""
    d = deepseek
    jobs = {
        "radix": (
            d["path"],
            "xpu_attn",
            [
                "--max-tokens",
                N_TOKENS,
                "--prompts-json",
                d["prompts"],
                "--repeat",
                2,
                "--then-prompts-json",
                d["shared"],
            ],
        ),
        "chunked": (
            d["path"],
            "xpu_attn",
            ["--max-tokens", N_TOKENS, "--prompts-json", d["prompts"], "--chunked-prefill-size", 16, "--page-size", 16],
        ),
        "torch_native": (d["path"], "torch_native", ["--max-tokens", 2, "--prompts-json", d["shared"]]),
    }
    return run_sglang_batch(jobs, d["root"], name="mla")


def test_deepseek_v2_e2e_matches_transformers_with_radix_hits(deepseek, e2e):
    """One engine: the 12 prompts (MHA prefill + absorbed decode), the same 12 again (radix hits: absorbed
    extend on a cached prefix), then 6 prompts extending cached ones by a few tokens (multi-token extend)."""
    ours = e2e["radix"]
    log = ours["log"]
    for path in ("un-absorbed (MHA) prefill", "absorbed extend", "absorbed decode"):
        assert f"xpu_attn (SGLang): MLA {path} runs through this backend" in log, f"the {path} path never ran"
    got = [o["token_ids"] for o in ours["outputs"]]
    cached = ours["cached_tokens"]
    n = len(deepseek["hf"])
    assert len(got) == 2 * n + len(deepseek["hf_shared"])
    assert all(c > 0 for c in cached[n:]), f"rounds 2 and 3 must hit the radix cache: {cached}"
    assert got[:n] == deepseek["hf"], "first round differs from transformers"
    assert got[n : 2 * n] == deepseek["hf"], "radix-cache round differs from transformers"
    assert got[2 * n :] == deepseek["hf_shared"], "shared-prefix round differs from transformers"


def test_deepseek_v2_e2e_chunked_prefill_page_16(deepseek, e2e):
    """Chunked prefill (16 tokens) with page size 16: later chunks are absorbed extends on the earlier ones."""
    ours = e2e["chunked"]
    assert "page size 16" in ours["log"] and "MLA absorbed extend runs" in ours["log"]
    assert [o["token_ids"] for o in ours["outputs"]] == deepseek["hf"]


def test_sglang_torch_native_cannot_serve_deepseek_mla_on_cpu(e2e):
    """The reason the e2e comparison is with transformers only (see the module docstring)."""
    with pytest.raises(AssertionError, match=r"batch2 tensor to be: \[4, 80\] but got: \[4, 576\]"):
        e2e["torch_native"]
