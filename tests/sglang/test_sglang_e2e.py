"""End to end in the real SGLang (CPU): xpu_attn vs SGLang's torch_native, fp32, greedy.

Gemma-3 carries the sliding window here: SGLang runs Mistral as a Llama without its window, so a
Mistral parity run would not exercise one (both backends agree, and neither matches transformers)."""

import json
import sys

import pytest
import whisper_model
from conftest import assert_parity, run_sglang_batch

SHARED = (
    "a paged attention kernel reads keys and values from pages of a cache. intel gpus run vllm and sglang "
    "with this backend. sliding windows, sinks, softcap and alibi change which keys a query sees. "
)
SUFFIXES = ["the quick", "once upon", "one token", "model", "pages of", "intel", "a query", "the lazy dog"]


ARCHS = ["llama", "gemma3"]
CHUNKED = ["--max-tokens", "32", "--chunked-prefill-size", "16"]
WHISPER_PAGES = (32,)  # Whisper's 1,500 encoder positions end mid-page, the decoder's tokens start there
# chunked prefill off: SGLang 0.5.23's scheduler asserts (prepare_encoder_info_extend, "Expected 8, got -404") when a
# chunk splits an encoder-decoder prompt, whichever attention backend runs
WHISPER = ["--whisper", "--max-tokens", "32", "--chunked-prefill-size", "-1"]


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    return whisper_model.build(tmp_path_factory.mktemp("whisper"), sys.executable)


@pytest.fixture(scope="module")
def runs(models, whisper, tmp_path_factory):
    """Every run of this file in one SGLang process, each its own Engine: {tag: result}."""
    root = tmp_path_factory.mktemp("sglang-e2e")
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps([SHARED + s for s in SUFFIXES]))
    radix = ["--max-tokens", "32", "--prompts-json", prompts, "--repeat", "2"]
    jobs = {}
    for arch in ARCHS:
        jobs.update(
            {
                f"{arch}/radix/own": (models[arch], "torch_native", radix),
                f"{arch}/radix/ours": (models[arch], "xpu_attn", radix),
                f"{arch}/radix/reference": (models[arch], "xpu_attn", radix, "reference"),
            }
        )
    jobs.update(
        {
            "gemma3/chunked/own": (models["gemma3"], "torch_native", CHUNKED),
            "gemma3/chunked/ours": (models["gemma3"], "xpu_attn", CHUNKED),
        }
    )
    for page in WHISPER_PAGES:
        for side, backend in (("own", "torch_native"), ("ours", "xpu_attn")):
            jobs[f"whisper/page{page}/{side}"] = (whisper["path"], backend, [*WHISPER, "--page-size", page])
    return run_sglang_batch(jobs, root, name="e2e")


@pytest.mark.parametrize("arch", ARCHS)
def test_parity_with_radix_prefix_hits(runs, arch):
    """8 varied prompts sharing a long prefix, sent twice: the second round hits the radix cache."""
    base, ours = runs[f"{arch}/radix/own"], runs[f"{arch}/radix/ours"]
    assert "xpu_attn (SGLang): providers {'prefill': 'torch_sdpa', 'decode': 'torch_sdpa'}" in ours["log"]
    assert sum(ours["cached_tokens"][len(SUFFIXES) :]) > 0, ours["cached_tokens"]  # prefix hits in round 2
    print(f"{arch}/radix: cached {ours['cached_tokens']}, max diff {assert_parity(base, ours):.2e}")
    # the reference (the oracle, CPU's second choice) stays covered end to end: forced
    ref = runs[f"{arch}/radix/reference"]
    assert "xpu_attn (SGLang): providers {'prefill': 'reference', 'decode': 'reference'}" in ref["log"]
    assert "forced by XPU_ATTN_KERNEL" in ref["log"]
    assert sum(ref["cached_tokens"][len(SUFFIXES) :]) > 0, ref["cached_tokens"]
    print(f"{arch}/radix/forced reference: max diff {assert_parity(base, ref):.2e}")


def test_parity_chunked_prefill(runs):
    """Built-in prompts of varied length, prefill split into chunks of 16 tokens."""
    base, ours = runs["gemma3/chunked/own"], runs["gemma3/chunked/ours"]
    print(f"gemma3/chunked: max diff {assert_parity(base, ours):.2e}")


@pytest.mark.parametrize("page", WHISPER_PAGES)
def test_whisper_cross_attention(runs, whisper, page):
    """Encoder-decoder end to end: a tiny Whisper transcribing 8 audio inputs of different lengths, batched; this
    backend serves the decoder's self-attention and the cross-attention over 1,500 encoder positions: greedy ids
    identical to transformers' eager attention and to SGLang's torch_native."""
    base, ours = runs[f"whisper/page{page}/own"], runs[f"whisper/page{page}/ours"]
    for kind in ("decoder", "cross"):
        assert f"vllm-xpu-attn served its first {kind} attention call" in ours["log"], kind
        assert f"vllm-xpu-attn served its first {kind} attention call" not in base["log"]
    assert f"'page_size': {page}," in ours["log"]
    got = [o["token_ids"] for o in ours["outputs"]]
    assert len(got) == whisper_model.N_INPUTS and all(len(g) == 32 for g in got)
    assert len({tuple(g) for g in got}) == whisper_model.N_INPUTS  # the audio reaches the decoder (cross-attention)
    assert got == whisper["hf"], "greedy ids differ from transformers' eager attention"
    print(f"whisper page {page}: max logprob diff vs torch_native {assert_parity(base, ours):.2e}")
