"""transformers oracle for FP8 KV caches: K/V rounded exactly as the cache stores them (docs/fp8.md).

Test-only (needs transformers; both engine venvs have it). The model runs in fp32 with eager attention;
for an FP8 cache, the attention function rounds every post-RoPE key and value it is given (cached and
current tokens alike, as the engines read them back from the cache):

    x' = float(round_to_nearest_even(saturate(x / s))) * s        (s: the per-tensor scale)

Two pitfalls this avoids (docs/fp8.md): rounding the k_proj output rounds K
*before* RoPE (not what the cache holds), and a custom attention function registered without its mask
function runs non-causally (transformers gives it mask None). Rounding is idempotent, so re-rounding the
cache-concatenated keys on every step changes nothing.

``rounding="trunc"`` emulates vLLM 0.32's CPU backend instead (x * (1/s), saturate, truncate toward
zero: csrc/cpu/cpu_attn_fp8.hpp), for reports only. ``kv_cache_dtype`` None / "auto": full precision.

    python fp8_oracle.py MODEL_DIR [fp8_e4m3|fp8_e5m2|auto] [N]   -> greedy tokens of families.PROMPTS
"""

from __future__ import annotations

import contextlib

import torch

FP8_DTYPES = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def fp8_dtype(kv_cache_dtype: str | None):
    """The torch FP8 dtype of an engine's kv_cache_dtype string; None for full precision."""
    if kv_cache_dtype in (None, "auto"):
        return None
    return FP8_DTYPES[kv_cache_dtype]


def quant_dequant(x: torch.Tensor, dtype, scale: float = 1.0, rounding: str = "rne") -> torch.Tensor:
    """What a read of the FP8 cache returns for ``x``: dequant(quant(x)), in x's dtype.

    rne: IEEE division by the scale, saturation to the finite range (NaN stays NaN), torch's cast (round
    to nearest even) = this backend's ``torch_ops.quantize_fp8`` and SGLang's pool. trunc: vLLM 0.32 CPU."""
    if dtype is None:
        return x
    fmax = torch.finfo(dtype).max
    if rounding == "rne":
        y = (x.float() / scale).clamp(-fmax, fmax)
        r = y.to(dtype)
    elif rounding == "trunc":
        y = (x.float() * (1.0 / scale)).clamp(-fmax, fmax)
        r = y.to(dtype)
        b = r.view(torch.uint8).clone()
        b[r.float().abs() > y.abs()] -= 1  # RNE went away from zero: one code toward zero (sign bit untouched)
        r = b.view(dtype)
    else:
        raise ValueError(f"rounding must be 'rne' or 'trunc', not {rounding!r}")
    return (r.float() * scale).to(x.dtype)


def attn_implementation(
    kv_cache_dtype: str | None, k_scale: float = 1.0, v_scale: float = 1.0, rounding: str = "rne"
) -> str:
    """Register (once) and return the name of an eager attention whose K/V are read as the cache stores them."""
    dtype = fp8_dtype(kv_cache_dtype)
    if dtype is None:
        return "eager"
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.llama.modeling_llama import eager_attention_forward

    name = f"kvcache_{kv_cache_dtype}_{rounding}_k{k_scale!r}_v{v_scale!r}"

    def attention(module, query, key, value, attention_mask, **kw):
        # key/value: post-RoPE, after the cache update (every token the query attends to)
        return eager_attention_forward(
            module,
            query,
            quant_dequant(key, dtype, k_scale, rounding),
            quant_dequant(value, dtype, v_scale, rounding),
            attention_mask,
            **kw,
        )

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, eager_mask)  # REQUIRED: without it the mask is None (non-causal)
    return name


@contextlib.contextmanager
def one_thread():
    """The tiny model's forward is ~1 ms on one thread and ~30x slower on two busy cores (thread contention)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


class Oracle:
    """One tiny model loaded once; ``use(...)`` picks the KV format, then greedy / teacher-forced runs."""

    def __init__(self, path: str):
        import transformers as tf

        self.tok = tf.AutoTokenizer.from_pretrained(path)
        self.model = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
        self.model.eval()
        self.impl = "eager"

    def use(self, kv_cache_dtype: str | None, k_scale: float = 1.0, v_scale: float = 1.0, rounding: str = "rne"):
        self.impl = attn_implementation(kv_cache_dtype, k_scale, v_scale, rounding)
        self.model.set_attn_implementation(self.impl)
        return self

    def encode(self, prompts: list[str]) -> list[list[int]]:
        return [self.tok(p).input_ids for p in prompts]  # no BOS (the tiny tokenizer adds none), as the engines

    @torch.no_grad()
    def logprobs(self, ids: list[int]) -> torch.Tensor:
        """log_softmax of the next-token logits at every position of one full forward (fp32, [len, vocab])."""
        with one_thread():
            return self.model(torch.tensor([ids]), use_cache=False).logits[0].float().log_softmax(-1)

    def greedy(self, prompt_ids: list[int], n: int) -> tuple[list[int], list[float]]:
        """n greedy tokens (a full forward per step: every key read rounded, no cache involved) and the
        top-1 minus top-2 logprob margin at each step (small margins are near-ties)."""
        ids, out, margins = list(prompt_ids), [], []
        for _ in range(n):
            top = self.logprobs(ids)[-1].topk(2)
            ids.append(int(top.indices[0]))
            out.append(ids[-1])
            margins.append(float(top.values[0] - top.values[1]))
        return out, margins

    def teacher_forced(self, prompt_ids: list[int], cont: list[int]) -> torch.Tensor:
        """[len(cont), vocab] logprobs predicting each token of ``cont`` after prompt + cont[:i]."""
        lp = self.logprobs(list(prompt_ids) + list(cont))
        return lp[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(cont)]


def max_dlogprob(engine_logprobs: list[dict], rows: torch.Tensor) -> float:
    """Largest |engine - oracle| over the engine's reported (top-k) logprobs of each step, the oracle
    teacher-forced on the same tokens (``rows`` from Oracle.teacher_forced)."""
    worst = 0.0
    for step, d in enumerate(engine_logprobs):
        for tok, lp in d.items():
            worst = max(worst, abs(float(lp) - float(rows[step, int(tok)])))
    return worst


def score(oracle: Oracle, prompt_ids: list[list[int]], outputs: list[dict]) -> dict:
    """An engine run's outputs ({"token_ids", "logprobs"} per prompt) against the oracle's current setting.

    agree: prompts whose greedy tokens are identical; diverged: (prompt, first differing step, the oracle's
    top-1 minus top-2 margin there); tf_max / tf: max |dlogprob| over the engine's top-k logprobs, the oracle
    teacher-forced on the engine's own tokens (overall / per prompt)."""
    agree, diverged, tf = 0, [], []
    for i, (ids, out) in enumerate(zip(prompt_ids, outputs)):
        toks = out["token_ids"]
        ref, margins = oracle.greedy(ids, len(toks))
        if ref == toks:
            agree += 1
        else:
            k = next(j for j, (a, b) in enumerate(zip(ref, toks)) if a != b)
            diverged.append((i, k, margins[k]))
        tf.append(max_dlogprob(out["logprobs"], oracle.teacher_forced(ids, toks)))
    return {"agree": agree, "n": len(outputs), "diverged": diverged, "tf_max": max(tf), "tf": tf}


def engine_tf_diff(prompt_ids: list[list[int]], outputs: list[dict], teacher_forced: list[list[dict]]) -> float:
    """Max |dlogprob| between one run's step logprobs and another engine's teacher-forced logprobs of the same
    sequences (prompt + the first run's tokens), over the tokens both report at a step."""
    worst = 0.0
    for ids, out, rows in zip(prompt_ids, outputs, teacher_forced):
        assert len(rows) == len(ids) + len(out["token_ids"]) - 1, "teacher-forced rows do not cover the sequence"
        for step, d in enumerate(out["logprobs"]):
            other = rows[len(ids) - 1 + step]
            assert str(out["token_ids"][step]) in other
            worst = max([worst] + [abs(lp - other[t]) for t, lp in d.items() if t in other])
    return worst


# What both engines' FP8 end-to-end tests assert (tests/vllm/test_vllm_fp8.py has the reasoning): teacher-forced
# max |dlogprob| vs the rounded oracle below FP8_TOL (observed ~1e-5: fp32 noise), at most MAX_NEAR_TIES greedy
# divergences, each at a near-tie; a wrong rounding must exceed SENSITIVITY on these prompts (else the test is blind).
FP8_TOL = 1e-3
SENSITIVITY = 50 * FP8_TOL
MAX_NEAR_TIES = 1
KV_DTYPES = ["fp8_e4m3", "fp8_e5m2"]


def fmt_score(s: dict) -> str:
    """One line for a ``score`` result: greedy agreement, the teacher-forced diff, where it diverged."""
    near = ", ".join(f"p{i}@{k} margin {m:.1e}" for i, k, m in s["diverged"])
    return f"{s['agree']}/{s['n']} greedy, teacher-forced max |dlogprob| {s['tf_max']:.2e}" + (
        f" (diverged: {near})" if 0 < len(s["diverged"]) <= 2 else ""
    )


def assert_matches_rounded(rounded: dict, full: dict) -> None:
    """The engine's tokens against the rounded oracle (``rounded``) within FP8_TOL with only near-tie
    divergences, and the full-precision oracle (``full``) far off: the prompts see the rounding."""
    assert rounded["tf_max"] < FP8_TOL, rounded["tf"]
    near = [d for d in rounded["diverged"] if d[2] < 2 * FP8_TOL]
    assert near == rounded["diverged"] and len(near) <= MAX_NEAR_TIES, rounded["diverged"]
    assert full["tf_max"] > SENSITIVITY and full["agree"] < full["n"], full


def agreement(a: list[dict], b: list[dict]) -> int:
    """Prompts whose greedy tokens are identical in two runs."""
    return sum(x["token_ids"] == y["token_ids"] for x, y in zip(a, b))


def step_logprob_diff(a: list[dict], b: list[dict]) -> float:
    """Max |dlogprob| between two runs with identical tokens, over the top-k tokens both report."""
    return max(
        abs(lp - y[t])
        for x, yy in zip(a, b)
        for d, y in zip(x["logprobs"], yy["logprobs"])
        for t, lp in d.items()
        if t in y
    )


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from families import PROMPTS

    o = Oracle(sys.argv[1]).use(sys.argv[2] if len(sys.argv) > 2 else "fp8_e4m3")
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    print(json.dumps([o.greedy(p, n)[0] for p in o.encode(PROMPTS)]))
