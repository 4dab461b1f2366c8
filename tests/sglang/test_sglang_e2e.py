"""End to end in the real SGLang (CPU): xpu_attn vs SGLang's torch_native, fp32, greedy.

Gemma-3 carries the sliding window here: SGLang runs Mistral as a Llama without its window, so a
Mistral parity run would not exercise one (both backends agree, and neither matches transformers)."""

import json

import pytest

from conftest import assert_parity, run_sglang_batch

SHARED = ("a paged attention kernel reads keys and values from pages of a cache. intel gpus run vllm and sglang "
          "with this backend. sliding windows, sinks, softcap and alibi change which keys a query sees. ")
SUFFIXES = ["the quick", "once upon", "one token", "model", "pages of", "intel", "a query", "the lazy dog"]


ARCHS = ["llama", "gemma3"]
CHUNKED = ["--max-tokens", "32", "--chunked-prefill-size", "16"]


@pytest.fixture(scope="module")
def runs(models, tmp_path_factory):
    """Every run of this file in one SGLang process, each its own Engine: {tag: result}."""
    root = tmp_path_factory.mktemp("sglang-e2e")
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps([SHARED + s for s in SUFFIXES]))
    radix = ["--max-tokens", "32", "--prompts-json", prompts, "--repeat", "2"]
    jobs = {}
    for arch in ARCHS:
        jobs.update({f"{arch}/radix/own": (models[arch], "torch_native", radix),
                     f"{arch}/radix/ours": (models[arch], "xpu_attn", radix),
                     f"{arch}/radix/reference": (models[arch], "xpu_attn", radix, "reference")})
    jobs.update({"gemma3/chunked/own": (models["gemma3"], "torch_native", CHUNKED),
                 "gemma3/chunked/ours": (models["gemma3"], "xpu_attn", CHUNKED)})
    return run_sglang_batch(jobs, root, name="e2e")


@pytest.mark.parametrize("arch", ARCHS)
def test_parity_with_radix_prefix_hits(runs, arch):
    """8 varied prompts sharing a long prefix, sent twice: the second round hits the radix cache."""
    base, ours = runs[f"{arch}/radix/own"], runs[f"{arch}/radix/ours"]
    assert "xpu_attn (SGLang): providers {'prefill': 'torch_sdpa', 'decode': 'torch_sdpa'}" in ours["log"]
    assert sum(ours["cached_tokens"][len(SUFFIXES):]) > 0, ours["cached_tokens"]  # prefix hits in round 2
    print(f"{arch}/radix: cached {ours['cached_tokens']}, max diff {assert_parity(base, ours):.2e}")
    # the reference (the oracle, CPU's second choice) stays covered end to end: forced
    ref = runs[f"{arch}/radix/reference"]
    assert "xpu_attn (SGLang): providers {'prefill': 'reference', 'decode': 'reference'}" in ref["log"]
    assert "forced by VLLM_XPU_ATTN_KERNEL" in ref["log"]
    assert sum(ref["cached_tokens"][len(SUFFIXES):]) > 0, ref["cached_tokens"]
    print(f"{arch}/radix/forced reference: max diff {assert_parity(base, ref):.2e}")


def test_parity_chunked_prefill(runs):
    """Built-in prompts of varied length, prefill split into chunks of 16 tokens."""
    base, ours = runs["gemma3/chunked/own"], runs["gemma3/chunked/ours"]
    print(f"gemma3/chunked: max diff {assert_parity(base, ours):.2e}")
