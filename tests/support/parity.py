"""Engine parity check shared by the vLLM and SGLang suites."""

LOGPROB_TOL = 2e-4  # fp32 on both sides; observed max |diff| ~1e-5 in both engines


def assert_parity(base: dict, ours: dict) -> float:
    """>= 8 prompts, >= 32 greedy tokens each: identical token ids, top-5 logprobs within LOGPROB_TOL.

    Returns the largest logprob difference seen."""
    assert len(base["outputs"]) == len(ours["outputs"]) >= 8
    worst = 0.0
    for i, (a, b) in enumerate(zip(base["outputs"], ours["outputs"])):
        assert len(a["token_ids"]) >= 32
        assert a["token_ids"] == b["token_ids"], f"prompt {i}: token ids differ\n{a['token_ids']}\n{b['token_ids']}"
        for step, (la, lb) in enumerate(zip(a["logprobs"], b["logprobs"])):
            for tok, lp in la.items():
                if tok in lb:
                    worst = max(worst, abs(lp - lb[tok]))
                    assert abs(lp - lb[tok]) <= LOGPROB_TOL, f"prompt {i} step {step} token {tok}: {lp} vs {lb[tok]}"
    return worst
