"""End to end in the real SGLang (CPU): xpu_attn vs SGLang's torch_native, fp32, greedy.

Gemma-3 carries the sliding window here: SGLang runs Mistral as a Llama without its window, so a
Mistral parity run would not exercise one (both backends agree, and neither matches transformers)."""

import json

import pytest

from conftest import assert_parity, run_sglang

SHARED = ("a paged attention kernel reads keys and values from pages of a cache. intel gpus run vllm and sglang "
          "with this backend. sliding windows, sinks, softcap and alibi change which keys a query sees. ")
SUFFIXES = ["the quick", "once upon", "one token", "model", "pages of", "intel", "a query", "the lazy dog"]


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_parity_with_radix_prefix_hits(models, tmp_path, arch):
    """8 varied prompts sharing a long prefix, sent twice: the second round hits the radix cache."""
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps([SHARED + s for s in SUFFIXES]))
    args = ["--max-tokens", "32", "--prompts-json", prompts, "--repeat", "2"]
    base = run_sglang(models[arch], tmp_path, "torch_native", args, tag="radix")
    ours = run_sglang(models[arch], tmp_path, "xpu_attn", args, tag="radix")
    assert "xpu_attn (SGLang): providers {'prefill': 'torch_sdpa', 'decode': 'torch_sdpa'}" in ours["log"]
    assert sum(ours["cached_tokens"][len(SUFFIXES):]) > 0, ours["cached_tokens"]  # prefix hits in round 2
    print(f"{arch}/radix: cached {ours['cached_tokens']}, max diff {assert_parity(base, ours):.2e}")
    # the reference (the oracle, CPU's second choice) stays covered end to end: forced
    ref = run_sglang(models[arch], tmp_path, "xpu_attn", args, tag="radix", kernel="reference")
    assert "xpu_attn (SGLang): providers {'prefill': 'reference', 'decode': 'reference'}" in ref["log"]
    assert "forced by VLLM_XPU_ATTN_KERNEL" in ref["log"]
    assert sum(ref["cached_tokens"][len(SUFFIXES):]) > 0, ref["cached_tokens"]
    print(f"{arch}/radix/forced reference: max diff {assert_parity(base, ref):.2e}")


@pytest.mark.parametrize("arch", ["gemma3"])
def test_parity_chunked_prefill(models, tmp_path, arch):
    """Built-in prompts of varied length, prefill split into chunks of 16 tokens."""
    args = ["--max-tokens", "32", "--chunked-prefill-size", "16"]
    base = run_sglang(models[arch], tmp_path, "torch_native", args, tag="chunked")
    ours = run_sglang(models[arch], tmp_path, "xpu_attn", args, tag="chunked")
    print(f"{arch}/chunked: max diff {assert_parity(base, ours):.2e}")
