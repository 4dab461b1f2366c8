"""A real model end to end on a GPU through transformers' continuous batching with this backend.

    python tests/gpu/gpu_transformers_cb.py --model DIR --out RESULT.json [--prompts 32] [--tokens 64]

SmolLM2-135M-Instruct (ci/real_model.sh makes DIR), ``--prompts`` chat prompts (tests/support/real_model.py's chat
prompts, then short questions written here), ``--tokens`` greedy tokens each with EOS disabled. Oracle:
transformers' eager attention in fp32 (``model.generate``, one prompt at a time, no paging). Runs, all through
``generate_batch`` with the same CB settings (page 64, no CUDA graphs: this adapter turns them off, so they are
off for transformers' own CB too):

* fp32: this backend (``xpu_attn``) and transformers' own CB attention (``sdpa``): identical sequences / N;
* bf16: both again: identical sequences vs the fp32 oracle, tokens agreeing before the first divergence, and
  max |log p_bf16 - log p_fp32| of the generated tokens over the agreeing prefix (CB's ``return_logprobs``
  against the oracle's teacher-forced fp32 log-probabilities).

Writes RESULT.json and prints a summary; exit 1 if this backend's fp32 run is not identical on every prompt.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))

TOPICS = [
    "a rainbow",
    "a volcano",
    "gravity",
    "a compiler",
    "the moon",
    "photosynthesis",
    "a glacier",
    "a vaccine",
    "an orchestra",
    "a lighthouse",
    "democracy",
    "a spreadsheet",
    "the internet",
    "a hurricane",
    "bread yeast",
    "a microscope",
    "a bridge",
    "an eclipse",
    "a battery",
    "the heart",
    "a desert",
    "a library",
    "a violin",
    "a satellite",
]


def prompt_ids(tok, n: int) -> list[list[int]]:
    import real_model

    chats = [t for kind, t in real_model.PROMPTS if kind == "chat"] + list(real_model.DEMO_QUESTIONS)
    chats += [f"Explain what {t} is in two sentences." for t in TOPICS]
    if n > len(chats):
        raise SystemExit(f"--prompts {n}: at most {len(chats)}")
    return [real_model.chat_ids(tok, t) for t in chats[:n]]


def eager_reference(model, prompts, tokens: int) -> tuple[list[list[int]], list[list[float]]]:
    """fp32 eager greedy (KV cache, argmax) and the teacher-forced log-probability of each token."""
    dev = model.device
    toks, lps = [], []
    with torch.no_grad():
        for ids in prompts:
            out, past, x = [], None, torch.tensor([ids], device=dev)
            for _ in range(tokens):
                r = model(input_ids=x, past_key_values=past, use_cache=True)
                past, nxt = r.past_key_values, int(r.logits[0, -1].argmax())
                out.append(nxt)
                x = torch.tensor([[nxt]], device=dev)
            logits = model(input_ids=torch.tensor([ids + out], device=dev)).logits[
                0, len(ids) - 1 : len(ids) + tokens - 1
            ]
            lp = torch.log_softmax(logits.double(), -1)
            toks.append(out)
            lps.append([float(lp[k, t]) for k, t in enumerate(out)])
    return toks, lps


def cb_run(model, prompts, impl: str, tokens: int, *, page_size: int = 64, logprobs: bool = True, **cb) -> dict:
    from transformers import GenerationConfig

    import vllm_xpu_attn.transformers_cb as xa

    model.set_attn_implementation(impl)
    gen = GenerationConfig(max_new_tokens=tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cfg = xa.cb_config(page_size=page_size, use_cuda_graph=False, return_logprobs=logprobs, **cb)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cfg, progress_bar=False)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    order = sorted(res, key=lambda r: int(r.rsplit("_", 1)[-1]))
    bad = [r for r in order if res[r].error]
    if bad:
        raise RuntimeError(f"{impl}: {len(bad)} requests failed: {res[bad[0]].error}")
    return {
        "tokens": [list(res[r].generated_tokens) for r in order],
        "logprobs": [list(res[r].logprobs) for r in order] if logprobs else None,
        "wall_s": wall,
    }


def compare(run: dict, ref_toks, ref_lps) -> dict:
    same, agree, total, worst = 0, 0, 0, 0.0
    for k, (t, r) in enumerate(zip(run["tokens"], ref_toks)):
        same += t == r
        n = next((i for i, (a, b) in enumerate(zip(t, r)) if a != b), min(len(t), len(r)))
        agree += n
        total += len(r)
        if run["logprobs"]:
            worst = max([worst] + [abs(a - b) for a, b in zip(run["logprobs"][k][:n], ref_lps[k][:n])])
    return {
        "identical": same,
        "of": len(ref_toks),
        "tokens_agreeing": agree,
        "tokens": total,
        "max_abs_dlogprob": worst,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import vllm_xpu_attn.transformers_cb as xa
    from vllm_xpu_attn.transformers_cb import backend

    xa.register()
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="eager")
    model = model.to(a.device).eval()
    prompts = prompt_ids(tok, a.prompts)
    t0 = time.perf_counter()
    ref_toks, ref_lps = eager_reference(model, prompts, a.tokens)
    result = {
        "model": Path(a.model).name,
        "device": torch.cuda.get_device_name() if a.device == "cuda" else a.device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "prompts": len(prompts),
        "prompt_tokens": [len(p) for p in prompts],
        "new_tokens": a.tokens,
        "oracle": "transformers eager attention, fp32, one prompt at a time",
        "eager_s": time.perf_counter() - t0,
        "runs": {},
    }
    for dtype in (torch.float32, torch.bfloat16):
        model = model.to(dtype)
        for impl, name in ((xa.NAME, "xpu_attn"), ("sdpa", "transformers_cb_sdpa")):
            run = cb_run(model, prompts, impl, a.tokens)
            row = compare(run, ref_toks, ref_lps) | {"wall_s": run["wall_s"]}
            if impl == xa.NAME:
                mod = next(m for m in model.modules() if hasattr(m, backend._RUNNER))
                row["providers"] = getattr(mod, backend._RUNNER).providers_used()
            key = f"{str(dtype).split('.')[-1]}/{name}"
            result["runs"][key] = row
            print(
                f"{key:36s} identical {row['identical']}/{row['of']}  tokens agreeing {row['tokens_agreeing']}/"
                f"{row['tokens']}  max|dlogprob| {row['max_abs_dlogprob']:.3g}  {row['wall_s']:.1f}s  "
                f"{row.get('providers', '')}",
                flush=True,
            )
    text = tok.decode(result and cb_run(model.to(torch.float32), prompts[:1], xa.NAME, 24, logprobs=False)["tokens"][0])
    result["sample_answer"] = {"prompt": tok.decode(prompts[0]), "answer": text}
    Path(a.out).write_text(json.dumps(result, indent=1))
    ok = result["runs"]["float32/xpu_attn"]["identical"] == len(prompts)
    print("fp32 identical to transformers eager on every prompt" if ok else "FAIL: fp32 differs from eager")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
