"""MLA (DeepSeek-V2/V3) through vLLM 0.32's MLA backend interface with this project's core.

In process: the impl's do_kv_cache_update / forward_mqa / forward_mha (new sequences, and prefill rows on a
cached context) against the naive MLA of tests/support/naive_mla.py (DeepSeek-V2 paper, un-absorbed), at the real
latent width (512 + 64), for model-dtype and FP8 caches; platform selection for use_mla.
End to end: the tiny DeepSeek-V2 family through vllm.LLM on the CPU with the plugin, greedy, against
vLLM's own CPU_MLA backend and transformers eager.
"""

import json
import sys
import types

import pytest
import torch
from naive_mla import naive_mla

H, D_C, D_R, D_H, D_V = 4, 512, 64, 16, 16  # the family's dims: kv_lora_rank 512, rope 64, nope 16, v 16
SCALE = (D_H + D_R) ** -0.5
PAGE = 16


class _KvBProj(torch.nn.Module):
    """vLLM's kv_b_proj: c [T, L] -> ([T, H * (nope + v)], bias), per head [W_UK_h; W_UV_h] rows."""

    def __init__(self, w_uk, w_uv):
        super().__init__()
        self.weight = torch.cat([torch.cat([w_uk[h], w_uv[h]]) for h in range(H)])  # [H*(P+V), L]

    def forward(self, x):
        return x @ self.weight.T, None


@pytest.fixture(scope="module")
def vllm_cfg():
    from vllm.config import VllmConfig, set_current_vllm_config

    cfg = VllmConfig()
    cfg.cache_config.block_size = PAGE
    with set_current_vllm_config(cfg):
        yield cfg


def _impl(kv_cache_dtype, w_uk, w_uv):
    from vllm_xpu_attn.vllm.mla import XpuAttnMLAImpl

    return XpuAttnMLAImpl(
        num_heads=H,
        head_size=D_C + D_R,
        scale=SCALE,
        num_kv_heads=1,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype=kv_cache_dtype,
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=None,
        q_lora_rank=None,
        kv_lora_rank=D_C,
        qk_nope_head_dim=D_H,
        qk_rope_head_dim=D_R,
        qk_head_dim=D_H + D_R,
        v_head_dim=D_V,
        kv_b_proj=_KvBProj(w_uk, w_uv),
        indexer=None,
    )


def _cache(kv_cache_dtype, n_blocks):
    """vLLM's per-layer MLA cache after bind_kv_cache: [blocks, block, L+R]; FP8 is allocated as bytes."""
    dt = {"auto": torch.float32, "fp8": torch.uint8}[kv_cache_dtype]
    return torch.zeros(n_blocks, PAGE, D_C + D_R, dtype=dt)


def _stored(x, kv_cache_dtype, scale):
    """What the cache holds for x, read back in fp32 (the oracle's view of cached keys)."""
    if kv_cache_dtype == "fp8":
        return (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale
    return x


def _metadata(num_decodes, dec_lens, dec_table, prefill=None, n_tokens=0):
    from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadata

    from vllm_xpu_attn.vllm.mla import XpuAttnMLADecodeMetadata, decode_plan

    decode = None
    if num_decodes:
        table = torch.tensor(dec_table, dtype=torch.int32)
        seq = torch.tensor(dec_lens, dtype=torch.int32)
        qsl = torch.arange(num_decodes + 1, dtype=torch.int32)
        decode = XpuAttnMLADecodeMetadata(
            block_table=table,
            seq_lens=seq,
            dcp_tot_seq_lens=None,
            plan=decode_plan(table, seq, max(dec_lens), qsl, num_decodes, PAGE),
        )
    return MLACommonMetadata(
        num_reqs=0,
        max_query_len=0,
        max_seq_len=0,
        num_actual_tokens=n_tokens,
        query_start_loc=torch.zeros(1, dtype=torch.int32),
        slot_mapping=torch.zeros(0, dtype=torch.long),
        num_decodes=num_decodes,
        num_decode_tokens=num_decodes,
        num_prefills=0 if prefill is None else 1,
        head_dim=None,
        prefill=prefill,
        decode=decode,
    )


def _prefill(q_lens, ctx_lens, table):
    from vllm.model_executor.layers.attention.mla_attention import MLACommonPrefillMetadata as P

    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    ctx = None
    if any(ctx_lens):
        ctx = P.ChunkedContextMetadata(
            context_lens=torch.tensor(ctx_lens, dtype=torch.int32),
            workspace=None,
            chunks=[],
            context_lens_list=list(ctx_lens),
            empty_token_slices=[],
        )
    return P(
        block_table=torch.tensor(table, dtype=torch.int32),
        query_start_loc=cu,
        max_query_len=max(q_lens),
        chunked_context=ctx,
        query_lens_cpu=torch.tensor(q_lens),
    )


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_impl_matches_naive_mla(vllm_cfg, kv_cache_dtype):
    """Three steps of four requests on one cache (page 16, shuffled pages), as vLLM's MLA layer calls the impl:
    1) prefill A (20 tokens) and B (7); 2) decode A and B, and prefill C (5 new) on a 33-token context written
    earlier; 3) decode A, B, C. Decode output goes through the layer's W_UK absorption / W_UV projection."""
    g = torch.Generator().manual_seed(0)
    w_uk = torch.randn(H, D_H, D_C, generator=g) * D_C**-0.5
    w_uv = torch.randn(H, D_V, D_C, generator=g) * D_C**-0.5
    impl = _impl(kv_cache_dtype, w_uk, w_uv)
    assert impl.runner.providers_used()["decode"] == "torch_sdpa"
    k_scale = torch.tensor([0.5 if kv_cache_dtype == "fp8" else 1.0])
    layer = types.SimpleNamespace(_k_scale=k_scale)
    cache = _cache(kv_cache_dtype, 24)
    perm = torch.randperm(24, generator=g).tolist()
    tables = {"A": perm[0:4], "B": perm[4:7], "C": perm[7:11]}
    total = {"A": 22, "B": 9, "C": 39}  # tokens each request ends with
    c_kv = {r: torch.randn(n, D_C, generator=g) for r, n in total.items()}
    k_pe = {r: torch.randn(n, D_R, generator=g) for r, n in total.items()}
    q_nope = {r: torch.randn(n, H, D_H, generator=g) for r, n in total.items()}
    q_pe = {r: torch.randn(n, H, D_R, generator=g) for r, n in total.items()}

    def slots(r, lo, hi):
        pos = torch.arange(lo, hi)
        return torch.tensor(tables[r])[pos // PAGE] * PAGE + pos % PAGE

    def write(rows):  # rows: [(req, lo, hi)] in batch order; one padded token (slot -1) at the end
        kv = torch.cat([c_kv[r][lo:hi] for r, lo, hi in rows] + [torch.randn(1, D_C)])
        pe = torch.cat([k_pe[r][lo:hi] for r, lo, hi in rows] + [torch.randn(1, D_R)])
        sm = torch.cat([slots(r, lo, hi) for r, lo, hi in rows] + [torch.tensor([-1])])
        impl.do_kv_cache_update(kv, pe[:, None, :], cache, sm, kv_cache_dtype, k_scale)

    def want(r, lo, hi, new_raw):
        """naive MLA for request r's queries lo..hi-1; keys 0..hi-1 as the cache holds them (new_raw: the
        prefill's own tokens unquantized, as vLLM's MHA prefill computes them)."""
        ckv = _stored(c_kv[r][:hi], kv_cache_dtype, k_scale)
        kpe = _stored(k_pe[r][:hi], kv_cache_dtype, k_scale)
        if new_raw:
            ckv[lo:hi], kpe[lo:hi] = c_kv[r][lo:hi], k_pe[r][lo:hi]
        return naive_mla(q_nope[r][lo:hi], q_pe[r][lo:hi], ckv, kpe, w_uk, w_uv, q_start=lo, scale=SCALE)

    def mqa(reqs, pos):
        """The layer's decode: absorb W_UK, forward_mqa, apply W_UV."""
        ql = torch.stack([torch.einsum("hp,hpl->hl", q_nope[r][pos[r]], w_uk) for r in reqs])
        qp = torch.stack([q_pe[r][pos[r]] for r in reqs])
        md = _metadata(
            len(reqs),
            [pos[r] + 1 for r in reqs],
            [tables[r] + [0] * (4 - len(tables[r])) for r in reqs],
            n_tokens=len(reqs),
        )
        o, lse = impl.forward_mqa((ql, qp), cache, md, layer)
        assert lse is None and o.shape == (len(reqs), H, D_C)
        return torch.einsum("bhl,hvl->bhv", o.double(), w_uv.double())

    def mha(reqs, q_rng, ctx_lens):
        q = torch.cat([torch.cat([q_nope[r][lo:hi], q_pe[r][lo:hi]], -1) for r, (lo, hi) in zip(reqs, q_rng)])
        kv = torch.cat([c_kv[r][lo:hi] for r, (lo, hi) in zip(reqs, q_rng)])
        pe = torch.cat([k_pe[r][lo:hi] for r, (lo, hi) in zip(reqs, q_rng)])
        pre = _prefill([hi - lo for lo, hi in q_rng], ctx_lens, [tables[r] + [0] * (4 - len(tables[r])) for r in reqs])
        out = torch.full((q.shape[0], H * D_V), float("nan"))
        impl.forward_mha(q, kv, pe[:, None, :], cache, _metadata(0, [], [], prefill=pre), k_scale, out)
        return out.view(-1, H, D_V).double()

    tol = dict(atol=2e-4, rtol=2e-4)
    # C's context (33 tokens) was written by an earlier step
    write([("C", 0, 33)])
    # step 1: prefill A[0:20], B[0:7]
    write([("A", 0, 20), ("B", 0, 7)])
    got = mha(["A", "B"], [(0, 20), (0, 7)], [0, 0])
    torch.testing.assert_close(got[:20], want("A", 0, 20, True), **tol)
    torch.testing.assert_close(got[20:], want("B", 0, 7, True), **tol)
    # step 2: decodes first (A at 20, B at 7), then C's 5 new tokens on its 33-token context
    write([("A", 20, 21), ("B", 7, 8), ("C", 33, 38)])
    got = mqa(["A", "B"], {"A": 20, "B": 7})
    torch.testing.assert_close(got[0], want("A", 20, 21, False)[0], **tol)
    torch.testing.assert_close(got[1], want("B", 7, 8, False)[0], **tol)
    got = mha(["C"], [(33, 38)], [33])
    torch.testing.assert_close(got, want("C", 33, 38, True), **tol)
    # step 3: decode all three
    write([("A", 21, 22), ("B", 8, 9), ("C", 38, 39)])
    got = mqa(["A", "B", "C"], {"A": 21, "B": 8, "C": 38})
    for i, r in enumerate("ABC"):
        torch.testing.assert_close(got[i], want(r, total[r] - 1, total[r], False)[0], **tol)

    # the comparison bites: without the rope part of the cached keys, decode is far off
    flat = compat_view(cache, kv_cache_dtype)
    flat[..., D_C:] = 0
    bad = mqa(["A"], {"A": 21})
    assert (bad[0] - want("A", 21, 22, False)[0]).abs().max() > 100 * tol["atol"]


def compat_view(cache, kv_cache_dtype):
    from vllm_xpu_attn.vllm import compat

    return compat.mla_cache_view(cache, kv_cache_dtype)


def test_platform_selects_our_mla_backend(vllm_cfg):
    from vllm.v1.attention.selector import AttentionSelectorConfig

    from vllm_xpu_attn.vllm.mla import XpuAttnMLABackend, XpuAttnMLAMetadataBuilder
    from vllm_xpu_attn.vllm.platform import XpuAttnCpuPlatform as P

    cfg = AttentionSelectorConfig(
        head_size=576, dtype=torch.float32, kv_cache_dtype="auto", block_size=16, use_mla=True
    )
    assert P.get_attn_backend_cls(None, cfg) == "vllm_xpu_attn.vllm.mla.XpuAttnMLABackend"
    assert P.get_attn_backend_cls(None, cfg._replace(use_mla=False, head_size=64)).endswith("backend.XpuAttnCpuBackend")
    with pytest.raises(NotImplementedError, match="sparse"):
        P.get_attn_backend_cls(None, cfg._replace(use_sparse=True))
    with pytest.raises(ValueError, match="kv_cache_dtype not supported"):
        P.get_attn_backend_cls(None, cfg._replace(kv_cache_dtype="fp8_e5m2"))
    with pytest.raises(ValueError, match="head_size not supported"):
        P.get_attn_backend_cls(None, cfg._replace(head_size=48))
    assert XpuAttnMLABackend.is_mla() and XpuAttnMLABackend.get_builder_cls() is XpuAttnMLAMetadataBuilder
    assert "fp8_e5m2" not in XpuAttnMLABackend.supported_kv_cache_dtypes


def test_impl_refuses_what_it_cannot_serve(vllm_cfg):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(H, D_H, D_C, generator=g)
    with pytest.raises(NotImplementedError, match="sparse MLA"):
        from vllm_xpu_attn.vllm.mla import XpuAttnMLAImpl

        XpuAttnMLAImpl(
            num_heads=H,
            head_size=576,
            scale=SCALE,
            num_kv_heads=1,
            alibi_slopes=None,
            sliding_window=None,
            kv_cache_dtype="auto",
            logits_soft_cap=None,
            attn_type="decoder",
            kv_sharing_target_layer_name=None,
            q_lora_rank=None,
            kv_lora_rank=D_C,
            qk_nope_head_dim=D_H,
            qk_rope_head_dim=D_R,
            qk_head_dim=D_H + D_R,
            v_head_dim=D_V,
            kv_b_proj=_KvBProj(w, w),
            indexer=object(),
        )
    with pytest.raises(NotImplementedError, match="fp8_e5m2"):
        _impl("fp8_e5m2", w, w)
    with pytest.raises(NotImplementedError, match="use 'auto'"):  # fp32 model, bf16 cache: the core needs q's dtype
        _impl("bfloat16", w, w)


# ---- end to end --------------------------------------------------------------------------------------------
N_TOKENS = 32


@pytest.fixture(scope="module")
def dsv2(tmp_path_factory):
    """The tiny DeepSeek-V2 family model and transformers' eager greedy tokens (in this venv's transformers)."""
    from families import build_all

    return build_all(tmp_path_factory.mktemp("mla"), sys.executable, families=("deepseek-v2",))["deepseek-v2"]


E2E = {  # one batch of all 12 prompts; 3 at a time finishing apart (steps mixing decodes and a prefill)
    "batch": [],
    "mixed": ["--max-num-seqs", 3, "--stagger", 5],
}


@pytest.fixture(scope="module")
def e2e(dsv2, tmp_path_factory):
    """Both settings in two vLLM processes (ours, CPU_MLA), "batch" first: our MLA paths log once a process."""
    from conftest import run_vllm_batch
    from families import PROMPTS

    root = tmp_path_factory.mktemp("mla-e2e")
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    jobs = {
        setting: (
            dsv2["path"],
            ["--max-tokens", N_TOKENS, "--prompts-json", prompts, "--max-model-len", 256, "--native-rope", *extra],
        )
        for setting, extra in E2E.items()
    }
    # the oracle is vLLM's CPU_MLA by name: on an AMX host vLLM would pick AMX_MLA, whose packed weights refuse the
    # tiny model's 16-wide heads ("invalid weight input features 16")
    own_jobs = {t: (m, [*args, "--attention-backend", "CPU_MLA"]) for t, (m, args) in jobs.items()}
    return {
        "ours": run_vllm_batch(jobs, root, ours=True, name="dsv2"),
        "own": run_vllm_batch(own_jobs, root, ours=False, name="dsv2"),
    }


@pytest.mark.parametrize("setting", list(E2E))
def test_e2e_tiny_deepseek_v2_matches_cpu_mla_and_transformers(dsv2, e2e, setting):
    """Greedy for the 12 family prompts, custom_ops ["all", "-rotary_embedding"] (vLLM's CPU rotary op garbles
    MLA's 3-D q): ours == vLLM's CPU_MLA == transformers eager, token for token; the log shows our MLA backend
    ran decode, prefill and the cache writes, with CPU_MLA not used."""
    from families import PROMPTS, agreement

    ours, own = e2e["ours"][setting], e2e["own"][setting]
    log = ours["log"]
    assert ours["platform"] == "XpuAttnCpuPlatform"
    plog = ours["process_log"]  # the routing and the paths below log once a process
    assert "routes MLA attention to vllm_xpu_attn.vllm.mla.XpuAttnMLABackend" in plog
    assert log.count("vllm-xpu-attn: MLA layer ") == 2, "both MLA layers must be ours"
    for path in (
        "MLA decode (forward_mqa) via core forward_mla",
        "MLA prefill (forward_mha) via core forward_mla_mha",
        "MLA cache write via core write_latent",
    ):
        assert f"vllm-xpu-attn: {path}" in plog, path
    assert ("vllm-xpu-attn: MLA mixed step" in log) == (setting == "mixed")
    assert "Using CPU_MLA backend" not in plog and "Using CPU_MLA backend" in own["process_log"]
    got = [o["token_ids"] for o in ours["outputs"]]
    base = [o["token_ids"] for o in own["outputs"]]
    assert [len(t) for t in got] == [N_TOKENS - (5 * (i % 3) if setting == "mixed" else 0) for i in range(12)]
    hf = [h[: len(t)] for h, t in zip(dsv2["hf"], got)]
    worst = max(
        abs(lp - lb[t])
        for a, b in zip(ours["outputs"], own["outputs"])
        for la, lb in zip(a["logprobs"], b["logprobs"])
        for t, lp in la.items()
        if t in lb
    )
    print(
        f"deepseek-v2 {setting} ({len(PROMPTS)} prompts, <= {N_TOKENS} tokens): ours vs CPU_MLA "
        f"{agreement(base, got)}/12, ours vs transformers {agreement(hf, got)}/12, CPU_MLA vs transformers "
        f"{agreement(hf, base)}/12; max |logprob diff| ours vs CPU_MLA {worst:.2e}; ours {ours['wall_s']:.0f}s, "
        f"CPU_MLA {own['wall_s']:.0f}s"
    )
    assert got == base, "ours vs vLLM CPU_MLA"
    assert worst <= 2e-4
    assert got == hf, "ours vs transformers eager"


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_cache_write_as_vllm_033_calls_it(vllm_cfg, kv_cache_dtype):
    """vLLM 0.33's MLA layer passes a 7th positional argument, skip_scale (True for an FP8 cache whose scale is
    1.0; mla_attention.py:811-819): the rows written are what the cache must hold (the oracle's own rounding),
    the same with or without it. Also its other hooks: reserve_workspace claims nothing, an interleaved V
    cache is refused."""
    g = torch.Generator().manual_seed(3)
    impl = _impl(kv_cache_dtype, torch.randn(H, D_H, D_C, generator=g), torch.randn(H, D_V, D_C, generator=g))
    kv, pe = torch.randn(5, D_C, generator=g), torch.randn(5, 1, D_R, generator=g)
    slots = torch.tensor([3, 17, 18, 40, -1])
    one = torch.tensor([1.0])
    caches = []
    for skip in (True, False):
        cache = _cache(kv_cache_dtype, 4)
        impl.do_kv_cache_update(kv, pe, cache, slots, kv_cache_dtype, one, skip)  # positional, as vLLM calls it
        caches.append(compat_view(cache, kv_cache_dtype).float().reshape(-1, D_C + D_R))
    want = _stored(torch.cat([kv, pe[:, 0]], -1), kv_cache_dtype, 1.0)
    for got in caches:
        torch.testing.assert_close(got[slots[:4]], want[:4], atol=0, rtol=0)
        assert got[[i for i in range(64) if i not in (3, 17, 18, 40)]].abs().sum() == 0  # slot -1: nothing
    assert impl.reserve_workspace() is None
    with pytest.raises(NotImplementedError, match="interleaved V cache"):
        impl.set_interleaved_v_cache()
