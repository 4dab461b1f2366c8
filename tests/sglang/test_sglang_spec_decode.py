"""Speculative decoding end to end in SGLang 0.5.23 (CPU): EAGLE top-k 1 (chain) and top-k 2 (tree), NGRAM (tree).

Greedy output with speculation must equal SGLang + this backend without it and SGLang's torch_native
without it, token for token (top-5 logprobs within the parity tolerance); SGLang's per-request
``spec_*`` meta_info must report accepted drafts; and this backend must have planned the target's
verify steps (and EAGLE's draft extend / draft decode steps): with ``XPU_ATTN_LOG_LEVEL=DEBUG``
the adapter logs one line per planned step, counted here.

SGLang has no EAGLE draft backend for torch_native (speculative/draft_utils.py's backend maps have no
entry for it, so it would raise "EAGLE is not supported in decode attention backend torch_native"), so
the speculative runs are this backend's only; the non-speculative ones are compared with torch_native.

On this CPU-only machine SGLang's CUDA wheel takes its CUDA paths, and speculative decoding reaches
Triton kernels (no Triton driver: "RuntimeError: 0 active drivers ([]). There should only be one.")
and sgl-kernel CUDA ops (EAGLE tree build, verify, cache slots; NGRAM's tree reconstruction). The
speculative runs therefore put tests/sglang/spec_cpu_shims on PYTHONPATH and set TRITON_INTERPRET=1:
SGLang's own Triton kernels for those steps run in Triton's interpreter (its XPU code path); nothing
in the attention path is replaced. See that directory's sitecustomize.py.
"""

import json
import os
import re
from pathlib import Path

import pytest
from conftest import STUBS, assert_parity, run_sglang_batch
from spec_models import SPEC_PROMPTS as PROMPTS
from spec_models import make_eagle_draft, make_spec_target

SHIMS = str(Path(__file__).parent / "spec_cpu_shims")
CONFIGS = {
    # EAGLE chain: 3 draft steps, 4 tokens verified per request
    "eagle-topk1": (
        {
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
        },
        1,
    ),
    # EAGLE tree: 2 branches per step, 6 of the tree's tokens verified (tree mask, cascade)
    "eagle-topk2": (
        {
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 2,
            "speculative_num_draft_tokens": 6,
        },
        2,
    ),
    # NGRAM: SGLang sets top-k to its BFS breadth (10) itself; the prompts run twice, so round 2 finds
    # round 1's continuations in the corpus (long accepted paths through the tree)
    "ngram": ({"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 6}, 10),
}
STEP = re.compile(
    r"xpu_attn \(SGLang\): step role=(\w+) forward_mode=(\w+) plan=(\w+) bs=(\d+) tokens=(\d+) "
    r"max_q=(\d+) topk=(\d+) num_draft=(\d+) step_id=(\d+) tree_mask=(\w+)"
)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    """Every run of this file in one SGLang process, each its own Engine: both backends without speculation,
    then this backend under each speculative configuration (per-step DEBUG lines on; SGLang's own speculative
    kernels through the CPU shims, in its scheduler processes)."""
    root = tmp_path_factory.mktemp("spec")
    target = make_spec_target(root / "target", seed=1)
    draft = make_eagle_draft(target, root / "eagle", "sglang")
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PROMPTS))
    args = ["--max-tokens", "32", "--prompts-json", prompts]
    jobs = {"base": (target, "torch_native", args), "ours": (target, "xpu_attn", args)}
    spec_env = {"PYTHONPATH": STUBS + os.pathsep + SHIMS, "TRITON_INTERPRET": "1", "XPU_ATTN_LOG_LEVEL": "DEBUG"}
    for name, (cfg, _) in CONFIGS.items():
        cfg = dict(cfg)
        if cfg["speculative_algorithm"] == "EAGLE":
            cfg["speculative_draft_model_path"] = draft
        rounds = 2 if name == "ngram" else 1
        jobs[name] = (
            target,
            "xpu_attn",
            [*args, "--repeat", rounds, "--speculative-json", json.dumps(cfg)],
            None,
            spec_env,
        )
    return run_sglang_batch(jobs, root, name="spec")


def steps(log: str) -> list[dict]:
    keys = ("role", "forward_mode", "plan", "bs", "tokens", "max_q", "topk", "num_draft", "step_id", "tree_mask")
    return [dict(zip(keys, m.groups())) for m in STEP.finditer(log)]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_spec_decode_identical_to_non_spec(spec, name):
    _, topk = CONFIGS[name]
    rounds = 2 if name == "ngram" else 1
    res = spec[name]
    log = res["log"]
    assert "spec_cpu_shims:" in log  # the Triton routing for SGLang's own speculative kernels took effect
    n = len(PROMPTS)
    for r in range(rounds):  # every round identical to both non-speculative runs
        this = dict(res, outputs=res["outputs"][r * n : (r + 1) * n])
        d_ours, d_base = assert_parity(spec["ours"], this), assert_parity(spec["base"], this)
    correct = sum(s.get("spec_num_correct_drafts", 0) for s in res["spec"])
    proposed = sum(s.get("spec_num_proposed_drafts", 0) for s in res["spec"])
    verify_ct = sum(s.get("spec_verify_ct", 0) for s in res["spec"])
    assert proposed > 0 and correct > 0, res["spec"]
    st = steps(log)
    verify = [s for s in st if s["role"] == "target" and s["forward_mode"] == "TARGET_VERIFY"]
    assert verify and all(s["plan"] == "target_verify" for s in verify), "this backend planned no verify step"
    assert all(int(s["topk"]) == topk for s in st), {s["topk"] for s in st}  # as SGLang resolved it
    assert all(s["tree_mask"] == "True" for s in verify) or topk == 1  # trees: verified under SGLang's tree mask
    summary = (
        f"{name}: accepted {correct}/{proposed} drafts ({100 * correct / proposed:.1f}%), "
        f"{len(res['outputs']) * 32 / verify_ct:.2f} tokens per verify; this backend planned {len(verify)} "
        f"target verify steps (top-k {topk})"
    )
    if name == "ngram":
        late = res["spec"][n:]
        assert sum(s["spec_num_correct_drafts"] for s in late) > sum(
            s["spec_num_correct_drafts"] for s in res["spec"][:n]
        )
        assert not [s for s in st if s["role"] == "draft"]
    else:
        draft = [s for s in st if s["role"] == "draft"]
        decode = [s for s in draft if s["plan"] == "draft_decode"]
        extend = [s for s in draft if s["forward_mode"].startswith("DRAFT_EXTEND")]  # DRAFT_EXTEND_V2 in 0.5.23
        assert decode and extend, "this backend did not serve EAGLE's draft decode and draft extend steps"
        assert {int(s["step_id"]) for s in decode} == {0, 1}  # num_steps 3: decode steps 0 and 1 run here
        summary += f", {len(extend)} draft extend and {len(decode)} draft decode steps"
    print(f"{summary}; max logprob diff {d_ours:.1e} vs ours non-spec, {d_base:.1e} vs torch_native")


def test_spec_params_are_read_as_sglang_resolved_them(monkeypatch):
    """SGLang 0.5.23 resolves NGRAM's top-k (its BFS breadth) and default draft counts into its runtime spec
    namespace, leaving the ServerArgs fields None: the backend must read that (else an NGRAM tree is
    verified as a causal chain, its tree mask ignored)."""
    from types import SimpleNamespace

    import sglang.srt.runtime_context as rc

    from sglang_compat.compat import spec_params

    runner = SimpleNamespace(
        server_args=SimpleNamespace(speculative_eagle_topk=None, speculative_num_draft_tokens=None)
    )
    assert spec_params(runner) == (0, 0)  # not published (no engine in this process): the ServerArgs fields
    runner.server_args.speculative_eagle_topk, runner.server_args.speculative_num_draft_tokens = 2, 6
    assert spec_params(runner) == (2, 6)
    monkeypatch.setattr(
        rc, "get_spec", lambda: SimpleNamespace(speculative_eagle_topk=10, speculative_num_draft_tokens=12)
    )
    runner.server_args.speculative_eagle_topk = runner.server_args.speculative_num_draft_tokens = None
    assert spec_params(runner) == (10, 12)  # what SGLang chose for NGRAM
