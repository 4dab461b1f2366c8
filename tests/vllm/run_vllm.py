"""Run vLLM once (in its own process: the platform is chosen per process) and dump JSON.

Usage: python run_vllm.py MODEL_DIR OUT_JSON [--max-tokens N] [--max-num-batched-tokens N]
       [--prefix-caching] [--num-gpu-blocks N] [--prompts-json FILE] [--block-size N] [--native-rope] [--stagger N]
       [--kv-cache-dtype auto|fp8_e4m3|fp8_e5m2] [--teacher-force-json FILE] [--tp N]
Prints nothing but vLLM's logs; writes {"backend": ..., "outputs": [{"token_ids", "logprobs"}...]}.

       python run_vllm.py --batch JOBS_JSON
JOBS_JSON: [{"model": DIR, "out": OUT_JSON, "args": [...]}, ...]: the runs one after another in this process,
each its own ``LLM`` (made, used, dropped), so vLLM's import and platform set-up are paid once (CI time).
The log and error protocol: tests/support/engine_runs.py.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "support"))  # tests/support/
from engine_runs import run_batch  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-num-batched-tokens", type=int, default=None)
    ap.add_argument("--prefix-caching", action="store_true")
    ap.add_argument("--num-gpu-blocks", type=int, default=None)
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--prompts-json", default=None)
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument(
        "--native-rope",
        action="store_true",
        help="rotary embedding in torch (custom_ops -rotary_embedding): vLLM's CPU rotary op garbles MLA's 3-D q",
    )
    ap.add_argument(
        "--stagger",
        type=int,
        default=0,
        help="prompt i generates max_tokens - stagger * (i %% 3) tokens (requests finish apart: mixed steps)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="generate the prompts this many times (prefix-cache hits)")
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size (> 1: distributed_executor_backend 'mp')")
    ap.add_argument("--kv-cache-dtype", default=None, help="vLLM's kv_cache_dtype (default: vLLM's own, auto)")
    ap.add_argument(
        "--attention-backend",
        default=None,
        help="vLLM's attention_backend (an oracle run names its backend where the host would pick another: "
        "on an AMX host vLLM picks AMX_MLA for MLA models)",
    )
    ap.add_argument(
        "--teacher-force-json",
        default=None,
        help="JSON list of token-id sequences: after generating, score each with prompt_logprobs=5 "
        "(top-5 and the given token at every position after the first) into 'teacher_forced'",
    )
    ap.add_argument(
        "--whisper",
        action="store_true",
        help="the model is whisper_model.py's: prompts are its N_INPUTS audio inputs (encoder) with "
        "DECODER_PROMPT (decoder); max_model_len 448",
    )
    ap.add_argument(
        "--speculative-config",
        default=None,
        help='vLLM\'s speculative_config as JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 3}\'',
    )
    return ap


def run(a: argparse.Namespace) -> None:
    t0 = time.time()
    from vllm import LLM, SamplingParams

    from vllm_xpu_attn.core import served

    served_before = served()  # the process's counts so far (batch mode: earlier runs)

    from tiny_model import PROMPTS

    prompts = json.load(open(a.prompts_json)) if a.prompts_json else PROMPTS
    if a.whisper:
        prompts = whisper_prompts(a.model)
        a.max_model_len = 448  # Whisper's max_target_positions
    kw = dict(
        model=a.model,
        dtype="float32",
        seed=0,
        max_model_len=a.max_model_len,
        enforce_eager=True,
        enable_prefix_caching=a.prefix_caching,
        disable_log_stats=False,
    )
    if a.max_num_batched_tokens:
        kw.update(max_num_batched_tokens=a.max_num_batched_tokens, enable_chunked_prefill=True)
    if a.num_gpu_blocks:
        kw["num_gpu_blocks_override"] = a.num_gpu_blocks
    if a.block_size:
        kw["block_size"] = a.block_size
    if a.max_num_seqs:
        kw["max_num_seqs"] = a.max_num_seqs
    if a.kv_cache_dtype:
        kw["kv_cache_dtype"] = a.kv_cache_dtype
    if a.attention_backend:
        kw["attention_backend"] = a.attention_backend
    if a.tp > 1:
        kw.update(tensor_parallel_size=a.tp, distributed_executor_backend="mp")
    if a.speculative_config:
        kw["speculative_config"] = json.loads(a.speculative_config)
    if a.native_rope:
        kw["compilation_config"] = {"custom_ops": ["all", "-rotary_embedding"]}
    llm = LLM(**kw)
    sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, logprobs=5, ignore_eos=True)
    if a.stagger:
        sp = [
            SamplingParams(temperature=0.0, max_tokens=a.max_tokens - a.stagger * (i % 3), logprobs=5, ignore_eos=True)
            for i in range(len(prompts))
        ]
    outs = []
    for _ in range(a.repeat):
        outs += llm.generate(prompts, sp)
    teacher_forced = None
    if a.teacher_force_json:
        seqs = json.load(open(a.teacher_force_json))
        tf = llm.generate(
            [{"prompt_token_ids": list(s)} for s in seqs],
            SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=5),
        )
        teacher_forced = [[{str(k): v.logprob for k, v in lp.items()} for lp in o.prompt_logprobs[1:]] for o in tf]
    kv_scales = None
    if a.kv_cache_dtype:  # the (k_scale, v_scale) pairs the attention layers hold (1.0 without checkpoint scales)
        try:
            kv_scales = llm.apply_model(
                lambda model: sorted(
                    {
                        (float(m._k_scale), float(m._v_scale))
                        for m in model.modules()
                        if hasattr(m, "_k_scale") and hasattr(m, "_v_scale")
                    }
                )
            )
        except Exception as e:  # record why (e.g. a multi-process engine core that cannot pickle the lambda)
            kv_scales = repr(e)
    metrics = {}
    try:
        for m in llm.get_metrics():
            if any(w in m.name for w in ("prefix_cache", "preempt", "spec_decode")):
                metrics[m.name] = getattr(m, "value", getattr(m, "values", None))
    except Exception as e:  # metrics API moved: record why
        metrics["error"] = repr(e)
    from vllm.platforms import current_platform

    backend = None
    try:  # which providers this backend picked (in-process engine core)
        from vllm_xpu_attn.kernels.api import chosen_providers

        backend = chosen_providers() or None
    except Exception:
        pass
    res = {
        "platform": type(current_platform).__name__,
        "providers": backend,
        # layer calls this run served, by attention kind (in-process engine core; {} under vLLM's own backend)
        "served": {k: n - served_before.get(k, 0) for k, n in served().items() if n > served_before.get(k, 0)},
        "metrics": metrics,
        "outputs": [
            {
                "prompt": o.prompt,
                "prompt_token_ids": list(o.prompt_token_ids),
                "text": o.outputs[0].text,
                "token_ids": list(o.outputs[0].token_ids),
                "logprobs": [{str(k): v.logprob for k, v in lp.items()} for lp in o.outputs[0].logprobs],
            }
            for o in outs
        ],
    }
    res["block_size"] = llm.llm_engine.vllm_config.cache_config.block_size
    res["wall_s"] = time.time() - t0  # engine start-up included
    if teacher_forced is not None:
        res["teacher_forced"] = teacher_forced
    if kv_scales is not None:
        res["kv_scales"] = kv_scales
    json.dump(res, open(a.out, "w"))
    del llm


def whisper_prompts(model: str) -> list[dict]:
    """vLLM's encoder-decoder prompts for whisper_model.py's inputs (what its transcription API builds)."""
    import whisper_model
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    ids = tok.convert_tokens_to_ids(tok.tokenize(whisper_model.DECODER_PROMPT))
    return [
        {
            "encoder_prompt": {
                "prompt": "",
                "multi_modal_data": {"audio": (whisper_model.audio(i), whisper_model.SAMPLE_RATE)},
            },
            "decoder_prompt": {"prompt_token_ids": ids},
        }
        for i in range(whisper_model.N_INPUTS)
    ]


def main():
    if sys.argv[1] == "--batch":
        run_batch(sys.argv[2], lambda argv: run(parser().parse_args(argv)))
        return
    run(parser().parse_args())


if __name__ == "__main__":
    main()
