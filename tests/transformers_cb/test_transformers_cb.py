"""transformers' continuous batching (``generate_batch``) served by this backend, end to end on the CPU.

Oracles, both transformers' own: greedy ``model.generate`` with eager attention (one prompt at a time, no
paging) and ``generate_batch`` with transformers' own CB attention (``sdpa``). Families: Qwen2-style (GQA,
biases), Gemma-2 (alternating sliding-window layers, logit softcap), GPT-OSS (attention sinks, sliding
layers) as tiny random models, and the real SmolLM2-135M-Instruct (tests/support/real_model.py). Prompts longer than
the window and a small ``max_batch_tokens`` (chunked prefill) exercise the window and the extend path.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import transformers  # noqa: E402,F401  (a declared dependency of this suite: missing = a failure, not a skip)
from transformers import AutoModelForCausalLM, GenerationConfig  # noqa: E402

import vllm_xpu_attn.transformers_cb as xa  # noqa: E402
from vllm_xpu_attn.transformers_cb import backend, compat  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))

PROMPT_LENS = (5, 17, 33, 9, 26)
NEW_TOKENS = 12


@pytest.fixture(scope="module", autouse=True)
def registered():
    return xa.register()


def _family(name: str):
    from transformers import Gemma2Config, GptOssConfig, Qwen2Config

    common = dict(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    if name == "qwen2":
        return Qwen2Config(**common)
    if name == "gemma2":
        return Gemma2Config(
            **common,
            head_dim=16,
            sliding_window=8,
            attn_logit_softcapping=20.0,
            final_logit_softcapping=30.0,
            query_pre_attn_scalar=16,
        )
    if name == "gpt_oss":
        cfg = GptOssConfig(
            **dict(common, intermediate_size=64),
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
        )
        return cfg
    raise KeyError(name)


def _model(cfg):
    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    if hasattr(m.model.layers[0].self_attn, "sinks"):  # random sinks large enough to matter
        for layer in m.model.layers:
            torch.nn.init.normal_(layer.self_attn.sinks, std=2.0)
    return m


def _gen_config():
    return GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)


def eager_greedy(model, prompts: list[list[int]]) -> list[list[int]]:
    model.set_attn_implementation("eager")
    out = []
    with torch.no_grad():
        for p in prompts:
            o = model.generate(torch.tensor([p]), generation_config=_gen_config())
            out.append(o[0, len(p) :].tolist())
    return out


def cb_greedy(model, prompts: list[list[int]], impl: str, **cb) -> list[list[int]]:
    model.set_attn_implementation(impl)
    # A small cache and batch, both given: left out, they are sized from free memory (GBs zeroed on the CPU).
    # 5.17 solves max_batch_tokens from all free memory when only num_blocks is given (cache.py:730-733; here
    # 69,926 tokens, a 19 GB footprint); 5.24 defaults to 8192. 256 holds every test's prompts (90 tokens) in one
    # step, as 8192 does. (5.17 on the CPU also needs psutil to see any free memory: ci/venvs.sh.)
    cb = {"num_blocks": 64, "max_batch_tokens": 256, **cb}
    res = model.generate_batch(
        prompts, generation_config=_gen_config(), progress_bar=False, continuous_batching_config=xa.cb_config(**cb)
    )
    order = sorted(res, key=lambda r: int(r.rsplit("_", 1)[-1]))  # req_0, req_1, ...
    failed = [res[r].error for r in order if res[r].error]
    if failed:
        raise RuntimeError(f"{impl}: {len(failed)} requests failed: {failed[0]}")
    return [list(res[r].generated_tokens) for r in order]


def own_cb(model) -> str:
    """transformers' own CB attention: sdpa where the model supports it, else paged|eager (Gemma-2)."""
    return "sdpa" if model._supports_sdpa else "paged|eager"


def _prompts(vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in PROMPT_LENS]


@pytest.mark.parametrize("family", ["qwen2", "gemma2", "gpt_oss"])
def test_tiny_families_match_eager_and_own_cb(family):
    model = _model(_family(family))
    prompts = _prompts(model.config.vocab_size)
    ref = eager_greedy(model, prompts)
    own = cb_greedy(model, prompts, own_cb(model), page_size=16)
    ours = cb_greedy(model, prompts, xa.NAME, page_size=16)
    chunked = cb_greedy(model, prompts, xa.NAME, page_size=16, max_batch_tokens=16)  # prefill in chunks
    assert own == ref, "transformers' own CB differs from its eager attention (the oracle itself)"
    assert ours == ref
    assert chunked == ref


def test_one_plan_per_step(monkeypatch):
    model = _model(_family("qwen2"))
    plans, steps = [], []
    original = backend.plan_step
    monkeypatch.setattr(backend, "plan_step", lambda inp: plans.append(inp.mode) or original(inp))
    hook = model.model.register_forward_hook(lambda *a: steps.append(1))
    try:
        cb_greedy(model, _prompts(256), xa.NAME, page_size=16)
    finally:
        hook.remove()
    assert len(steps) >= NEW_TOKENS and len(plans) == len(steps)  # not steps x layers
    assert {m.value for m in plans} >= {"decode", "mixed"}


def test_real_model_smollm2():
    import real_model

    path = real_model.model_dir()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    prompts = real_model.prompt_ids(tok, [p for p in real_model.PROMPTS if p[0] == "chat"][:6])
    ref = eager_greedy(model, prompts)
    ours = cb_greedy(model, prompts, xa.NAME, page_size=32, max_batch_tokens=256)
    own = cb_greedy(model, prompts, "sdpa", page_size=32, max_batch_tokens=256)
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    cut = lambda t: t[: next((i + 1 for i, x in enumerate(t) if x in eos), len(t))]  # noqa: E731 (CB stops at EOS)
    ref, ours, own = ([cut(t) for t in r] for r in (ref, ours, own))
    same = sum(a == b for a, b in zip(ours, ref))
    assert own == ref
    assert same == len(prompts), f"identical to transformers eager: {same}/{len(prompts)}"


def test_version_outside_range_refused(monkeypatch):
    monkeypatch.delenv("XPU_ATTN_ALLOW_UNTESTED", raising=False)
    monkeypatch.setattr(compat, "version", lambda: "5.16.0")
    with pytest.raises(
        ValueError,
        match=r"supports transformers 5\.17 through 5\.25.*installed: transformers "
        r"5\.16\.0.*XPU_ATTN_ALLOW_UNTESTED=1",
    ):
        xa.register()


def test_untested_version_served_with_one_warning_when_allowed(monkeypatch):
    """Allowed, an untested release is served and said once per process, however often it is checked."""
    import logging

    monkeypatch.setattr(compat, "version", lambda: "5.26.0")
    monkeypatch.setattr(compat, "_warned", set())
    monkeypatch.setenv("XPU_ATTN_ALLOW_UNTESTED", "1")
    lines = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda r: lines.append(r.getMessage())
    logging.getLogger("vllm_xpu_attn").addHandler(handler)  # on the logger: setup_logging may stop propagation
    try:
        assert compat.check_version() == "5.26.0"
        assert compat.check_version() == "5.26.0"  # register() and the doctor both ask
    finally:
        logging.getLogger("vllm_xpu_attn").removeHandler(handler)
    assert len(lines) == 1 and "untested transformers 5.26.0" in lines[0] and "5.17 through 5.25" in lines[0], lines


def test_mla_model_refused_at_start_up_where_cb_caches_latents():
    """5.25+ caches MLA layers as latents (MLACacheAllocator, no block-table view): refused when CB starts,
    naming the release, instead of NotImplementedError from inside CB's allocator at the first step."""
    from transformers import DeepseekV2Config

    cfg = DeepseekV2Config(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        kv_lora_rank=32,
        q_lora_rank=None,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        n_routed_experts=4,
        num_experts_per_tok=2,
        first_k_dense_replace=2,
        max_position_embeddings=256,
    )
    latent = compat._minor(compat.version()) >= compat.LATENT_CACHE_FROM
    assert (compat.latent_cache_refusal(cfg) is not None) == latent
    if latent:
        model = _model(cfg)
        with pytest.raises(ValueError, match=rf"transformers {compat.version()} caches this model's MLA layers"):
            cb_greedy(model, _prompts(256), xa.NAME, page_size=16)


@pytest.mark.parametrize("case", ["forced_provider", "bidirectional_layer"])
def test_unservable_layer_refused_at_start_up(monkeypatch, case):
    """Refused when CB starts (the manager's construction), with the reason; nothing generated."""
    model = _model(_family("qwen2"))
    if case == "forced_provider":  # Triton has no CPU kernels (its interpreter is for tests only)
        monkeypatch.setenv("XPU_ATTN_KERNEL", "triton")
        match = "triton.*cannot serve"
    else:
        model.model.layers[1].self_attn.is_causal = False
        match = "layer 1 is bidirectional"
    with pytest.raises(ValueError, match=match):
        cb_greedy(model, _prompts(256), xa.NAME, page_size=16)


def test_plain_generate_refused():
    model = _model(_family("qwen2"))
    model.set_attn_implementation(xa.NAME)
    with pytest.raises(ValueError, match="continuous batching"):
        model.generate(torch.tensor([[1, 2, 3]]), generation_config=_gen_config())


def test_doctor_reports_transformers_support():
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "vllm_xpu_attn", "doctor", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    line = next(ln for ln in out.splitlines() if "transformers" in ln)
    assert transformers.__version__ in line and "supported" in line and "needs" not in line
