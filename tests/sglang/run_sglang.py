"""Run SGLang's offline Engine once and dump JSON (token ids, top-5 logprobs, backend used).

Usage: python run_sglang.py MODEL_DIR OUT_JSON --backend xpu_attn|torch_native [--max-tokens N]
       [--chunked-prefill-size N] [--prompts-json FILE] [--repeat N] [--page-size N]
       [--then-prompts-json FILE ...]   (more rounds on the same engine, after the repeats: radix-cache hits)
       [--kv-cache-dtype auto|fp8_e4m3] [--teacher-force-json FILE]
       [--speculative-json JSON]   (Engine kwargs, e.g. {"speculative_algorithm": "EAGLE", ...}; per-output
                                    speculative meta_info fields go into "spec")

       python run_sglang.py --batch JOBS_JSON
JOBS_JSON: [{"model": DIR, "out": OUT_JSON, "args": [...], "env": {NAME: VALUE}}, ...]: the runs one after
another in this process, each its own ``sglang.Engine`` (made, used, shut down; its scheduler process inherits
``env`` on top of this process's environment), so this process's imports are paid once (CI time). The log
(the scheduler's included) and error protocol: tests/support/engine_runs.py.
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
    ap.add_argument("--backend", required=True)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--chunked-prefill-size", type=int, default=None)
    ap.add_argument("--prompts-json", default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--page-size", type=int, default=None)
    ap.add_argument("--disable-radix-cache", action="store_true")
    ap.add_argument("--moe-runner-backend", default=None)
    ap.add_argument("--context-length", type=int, default=256)
    ap.add_argument("--then-prompts-json", action="append", default=[])
    ap.add_argument("--kv-cache-dtype", default=None, help="SGLang's kv_cache_dtype (default: SGLang's own, auto)")
    ap.add_argument("--tp", type=int, default=1, help="tp_size (one scheduler process per rank)")
    ap.add_argument(
        "--teacher-force-json",
        default=None,
        help="JSON list of token-id sequences: after generating, score each (input logprobs from "
        "position 0, top-5 and the given token at every position after the first) into "
        "'teacher_forced'",
    )
    ap.add_argument(
        "--whisper",
        action="store_true",
        help="the model is whisper_model.py's: requests are its N_INPUTS audio inputs (float WAV files "
        "written next to OUT_JSON), language en, no text prompt; context length 2048",
    )
    ap.add_argument(
        "--speculative-json",
        default=None,
        help="JSON dict of speculative Engine kwargs (speculative_algorithm, speculative_draft_model_path, "
        "speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens, ...)",
    )
    return ap


def run(a: argparse.Namespace) -> None:
    t0 = time.time()
    import sglang
    from tiny_model import PROMPTS

    prompts = json.load(open(a.prompts_json)) if a.prompts_json else PROMPTS
    audio = None
    if a.whisper:
        audio = whisper_audio_files(Path(a.out).parent)
        prompts, a.context_length = (
            [""] * len(audio),
            2048,
        )  # SGLang's Whisper ignores text prompts; 1,500 encoder tokens lead each row
    # The KV pool: a fixed 65,536-token cap under a high static fraction. SGLang sizes the pool from the host's free
    # memory, measured before the weights load and again after; a low fraction fails start-up when another process
    # on a shared host (CI's background lane) takes memory in between. 65,536 holds 48 requests at 1,024 tokens.
    kw = dict(
        model_path=a.model,
        device="cpu",
        attention_backend=a.backend,
        dtype="float32",
        context_length=a.context_length,
        mem_fraction_static=0.7,
        max_total_tokens=65536,
        disable_cuda_graph=True,
        random_seed=0,
        skip_server_warmup=True,
        log_level="info",
        disable_radix_cache=a.disable_radix_cache,
    )
    if a.chunked_prefill_size:
        kw["chunked_prefill_size"] = a.chunked_prefill_size
    if a.page_size:
        kw["page_size"] = a.page_size
    if a.moe_runner_backend:
        kw["moe_runner_backend"] = a.moe_runner_backend
    if a.kv_cache_dtype:
        kw["kv_cache_dtype"] = a.kv_cache_dtype
    if a.tp > 1:
        kw.update(tp_size=a.tp, disable_custom_all_reduce=True)
    if a.speculative_json:
        kw.update(json.loads(a.speculative_json))
    engine = sglang.Engine(**kw)
    sp = {"temperature": 0.0, "max_new_tokens": a.max_tokens, "ignore_eos": True}
    outs = []
    cached = []
    spec = []
    teacher_forced = None
    try:
        rounds = [prompts] * a.repeat + [json.load(open(f)) for f in a.then_prompts_json]
        for round_prompts in rounds:
            res = engine.generate(
                prompt=round_prompts,
                sampling_params=sp,
                return_logprob=True,
                top_logprobs_num=5,
                **({"audio_data": [[f] for f in audio]} if audio else {}),
            )
            for r in res:
                mi = r["meta_info"]
                cached.append(mi.get("cached_tokens", 0))
                spec.append({k: v for k, v in mi.items() if k.startswith("spec_")})
                outs.append(
                    {
                        "text": r["text"],
                        "token_ids": [t[1] for t in mi["output_token_logprobs"]],
                        "logprobs": [{str(t[1]): t[0] for t in step} for step in mi["output_top_logprobs"]],
                    }
                )
        if a.teacher_force_json:
            seqs = json.load(open(a.teacher_force_json))
            tf_res = engine.generate(
                input_ids=seqs,
                sampling_params={"temperature": 0.0, "max_new_tokens": 1},
                return_logprob=True,
                logprob_start_len=0,
                top_logprobs_num=5,
            )
            teacher_forced = []
            for seq, r in zip(seqs, tf_res):
                mi = r["meta_info"]
                given = mi["input_token_logprobs"]  # (logprob, id, text) per position, from position 0
                # SGLang reports ids >= vocab_size - 1 as 0 (its image-hash clipping); the logprob is the given token's
                assert len(given) == len(seq) and all(g[1] in (t, 0) for g, t in zip(given, seq)), (
                    "input logprobs not from position 0"
                )
                rows = []
                for pos in range(1, len(seq)):  # nothing predicts the first token
                    row = {str(t[1]): t[0] for t in (mi["input_top_logprobs"][pos] or [])}
                    row[str(seq[pos])] = given[pos][0]
                    rows.append(row)
                teacher_forced.append(rows)
    finally:
        engine.shutdown()
    res = {"backend": a.backend, "outputs": outs, "cached_tokens": cached, "wall_s": time.time() - t0}
    if a.speculative_json:
        res["spec"] = spec
    if teacher_forced is not None:
        res["teacher_forced"] = teacher_forced
    json.dump(res, open(a.out, "w"))


def whisper_audio_files(folder: Path) -> list[str]:
    """whisper_model.py's inputs as 32-bit float WAV files (exact samples; SGLang reads audio from files)."""
    import soundfile
    import whisper_model

    paths = []
    for i in range(whisper_model.N_INPUTS):
        paths.append(str(folder / f"whisper-input-{i}.wav"))
        soundfile.write(paths[-1], whisper_model.audio(i), whisper_model.SAMPLE_RATE, subtype="FLOAT")
    return paths


def main():
    if sys.argv[1] == "--batch":
        run_batch(sys.argv[2], lambda argv: run(parser().parse_args(argv)))
        return
    run(parser().parse_args())


if __name__ == "__main__":
    main()
