"""Real weights in the real SGLang 0.5.23 (CPU): SmolLM2-135M-Instruct (ci/real_model.sh) on the 16 prompts of
tests/support/real_model.py (chat and plain, 5 to ~2,400 tokens, two sharing a ~650-token prefix), greedy 32 tokens,
against two independent oracles: transformers' eager attention in fp32 and SGLang's own torch_native backend.

One SGLang process per backend (tests/support/real_model_engine.py) makes one Engine per configuration in turn, each
with chunked prefill (chunked_prefill_size 256: the long prompts are prefilled in several chunks) and the
radix cache on:
- fp32: xpu_attn identical to torch_native on every prompt (log-probabilities within LOGPROB_TOL), identical
  to transformers except where torch_native diverges from it too (each such case printed with transformers'
  top-2 gap), max |dlogprob| vs transformers < TF_TOL; the shared-prefix prompts generated again are served
  from the radix cache (cached tokens asserted) and give the same tokens.
- bf16, teacher-forced on the fp32 transformers reference: xpu_attn's max |dlogprob| <= 1.5x torch_native's and
  its agreement >= torch_native's minus one prompt (per prompt, near ties excused, and per teacher-forced step:
  tests/support/real_model.py no_worse).
- FP8 KV cache (fp8_e4m3; SGLang keeps scale 1.0 without checkpoint scales), on the fp32 reference: both
  backends side by side (printed), and xpu_attn no worse than torch_native by the bf16 rule.
- NGRAM speculative decoding (SGLang's tree drafts; its speculative kernels in Triton's interpreter through
  tests/sglang/spec_cpu_shims, as tests/sglang/test_sglang_spec_decode.py explains), xpu_attn: greedy tokens
  identical to the fp32 runs of both backends, drafts accepted.
- SGLang's OpenAI-compatible server with xpu_attn: a greedy chat completion, streamed and not, answers what
  transformers answers.
The bf16, FP8 and NGRAM runs use the 8 SUBSET prompts (the first four chat and the first four plain ones,
35-40 and 5-18 tokens) to keep the file within its CI time allowance; fp32 uses all 16.
"""

from types import SimpleNamespace

import pytest
import real_model as rm
from conftest import sglang_env
from parity import LOGPROB_TOL
from real_model_engine import launch, ok

TF_TOL = 5e-4  # engine vs transformers, fp32 (observed ~5e-5)
BUDGET = 256
SUBSET = [0, 1, 2, 3, 10, 11, 12, 13]  # bf16 / FP8 / n-gram: the first four chat and the first four plain prompts


def report(capsys, msg: str) -> None:
    with capsys.disabled():
        print(f"\n[real sglang] {msg}", flush=True)


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
    root = tmp_path_factory.mktemp("real-sglang")
    own = launch("sglang", "own", model, ref["ids"], common, root, sglang_env())
    ours = launch(
        "sglang",
        "ours",
        model,
        ref["ids"],
        common + [{"name": "ngram", "budget": BUDGET, "subset": SUBSET, "spec": "ngram"}],
        root,
        sglang_env(),
    )
    print(f"SGLang processes: torch_native {own['wall_s']:.0f} s, xpu_attn {ours['wall_s']:.0f} s")
    return SimpleNamespace(model=model, ref=ref, own=own, ours=ours)


def sub(ref: dict, idx) -> dict:
    return {k: [ref[k][i] for i in idx] for k in ("ids", "tokens", "tf", "gap")}


def test_fp32_parity_with_torch_native_and_transformers(real, capsys):
    own, ours = ok(real.own, "fp32"), ok(real.ours, "fp32")
    assert "xpu_attn (SGLang): providers" in real.ours["log"] and "xpu_attn (SGLang)" not in real.own["log"]
    assert "chunked_prefill_size=256" in real.ours["log"]
    for i, (a, b) in enumerate(zip(own["tokens"], ours["tokens"])):
        assert a == b, f"prompt {i}: xpu_attn differs from torch_native\n{a}\n{b}"
    d_own = max(abs(x - y) for a, b in zip(own["logprobs"], ours["logprobs"]) for x, y in zip(a, b))
    assert d_own <= LOGPROB_TOL, d_own
    s_ours = rm.compare(real.ref, ours["tokens"], logprobs=ours["logprobs"])
    s_own = rm.compare(real.ref, own["tokens"], logprobs=own["logprobs"])
    report(capsys, f"fp32 xpu_attn vs transformers: {rm.fmt(s_ours)}")
    report(capsys, f"fp32 torch_native vs transformers: {rm.fmt(s_own)}")
    report(
        capsys,
        f"fp32 xpu_attn vs torch_native: {len(ours['tokens'])}/{len(own['tokens'])} identical, "
        f"max |dlogprob| {d_own:.2e}",
    )
    assert {d[0] for d in s_ours["diverged"]} <= {d[0] for d in s_own["diverged"]}, s_ours["diverged"]
    assert s_ours["tf_max"] < TF_TOL and s_own["tf_max"] < TF_TOL, (s_ours["tf_max"], s_own["tf_max"])


def test_fp32_radix_cache_hits(real, capsys):
    for res in (real.own, real.ours):
        r = ok(res, "fp32")
        assert r["cache_hits"] > 0, r["cache_hits"]
        assert r["again_tokens"] == [r["tokens"][i] for i in rm.SHARED_PAIR]
    report(
        capsys,
        f"radix cache hits on the shared-prefix prompts sent again (cached tokens): xpu_attn "
        f"{ok(real.ours, 'fp32')['cache_hits']}, torch_native {ok(real.own, 'fp32')['cache_hits']}",
    )


def no_worse(real, capsys, name: str) -> None:
    """tests/support/real_model.py no_worse on the SUBSET prompts."""
    rm.no_worse(
        sub(real.ref, SUBSET),
        ok(real.ours, name),
        ok(real.own, name),
        name=name,
        labels=("xpu_attn", "torch_native"),
        report=lambda msg: report(capsys, msg),
    )


def test_bf16_vs_fp32_reference(real, capsys):
    no_worse(real, capsys, "bf16")


def test_fp8_kv_side_by_side(real, capsys):
    for res in (real.own, real.ours):
        assert "KV Cache is allocated. dtype: torch.float8_e4m3fn" in res["log"]
    no_worse(real, capsys, "fp8")


def test_ngram_speculative_decoding(real, capsys):
    spec = ok(real.ours, "ngram")
    assert "spec_cpu_shims:" in real.ours["log"]  # SGLang's own speculative kernels ran (interpreter)
    for name, res in (("xpu_attn", real.ours), ("torch_native", real.own)):
        base = ok(res, "fp32")["tokens"]
        for k, i in enumerate(SUBSET):
            assert spec["tokens"][k] == base[i], f"prompt {i}: NGRAM speculation changed the tokens vs {name}"
    m = spec["spec"]
    assert m["spec_num_proposed_drafts"] > 0 and m["spec_num_correct_drafts"] > 0, m
    report(
        capsys,
        f"NGRAM: {len(SUBSET)}/{len(SUBSET)} identical to non-speculative xpu_attn and torch_native; "
        f"accepted {m['spec_num_correct_drafts']}/{m['spec_num_proposed_drafts']} drafts, "
        f"{len(SUBSET) * 32 / max(1, m['spec_verify_ct']):.2f} tokens per verify",
    )


def test_openai_server_chat_completion(real, tmp_path, capsys):
    """`python -m sglang.launch_server --attention-backend xpu_attn` serves the model: a greedy chat completion, not
    streamed and streamed, answers what transformers answers, then a clean SIGTERM stop."""
    from real_model_engine import chat_over_http
    from transformers import AutoTokenizer

    want = rm.answer_text(AutoTokenizer.from_pretrained(real.model), real.ref["tokens"][0])  # prompt 0: the question
    assert "Paris" in want
    r = chat_over_http("sglang", real.model, tmp_path, rm.PROMPTS[0][1])
    assert "xpu_attn (SGLang): providers" in r["log"]
    assert r["plain"].strip() == want and r["finish"] == "stop", r["plain"]
    assert r["streamed"].strip() == want and r["chunks"] > 1, r["streamed"]
    assert r["shutdown"]["clean"], r["shutdown"]
    report(
        capsys,
        f"HTTP chat completion (started in {r['startup_s']:.0f} s): {r['plain']!r}; streamed in "
        f"{r['chunks']} chunks: {r['streamed']!r}",
    )
