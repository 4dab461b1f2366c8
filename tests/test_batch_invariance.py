"""Batch-invariant mode (XPU_ATTN_BATCH_INVARIANT=1, SGLang's --enable-deterministic-inference,
vLLM's VLLM_BATCH_INVARIANT=1): a sequence's output is bitwise the same whatever else is in the
batch (alone, in 3, in 17 with a long context and prefill rows) and however its prefill is chunked
(1, 2 or 5 chunks). Triton runs through its interpreter here (and at real sizes on the GPU:
tests/gpu/gpu_check_triton.py); the reference provider is checked too, since it serves the CPU engines.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from vllm_xpu_attn.kernels.api import get_provider  # noqa: E402

pytest.importorskip("triton", reason="triton is a declared test dependency of the core suite")
DEV = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
PAGE, HKV, D = 16, 2, 32
S_LEN = 70  # the sequence under test: 70 keys


class Pool:
    """A paged cache with shuffled pages; sequences get their own pages."""

    def __init__(self, dtype, hq, seed=0, pages=1200):
        self.g = torch.Generator().manual_seed(seed)
        self.dtype, self.hq = dtype, hq
        self.k = torch.randn(pages, PAGE, HKV, D, generator=self.g).to(dtype).to(DEV)
        self.v = torch.randn(pages, PAGE, HKV, D, generator=self.g).to(dtype).to(DEV)
        self.free = torch.randperm(pages, generator=self.g).tolist()
        self.tables = {}

    def seq(self, name, n_keys):
        if name not in self.tables:
            self.tables[name] = [self.free.pop() for _ in range(-(-n_keys // PAGE))]
        return self.tables[name]

    def q(self, n):
        return (torch.randn(n, self.hq, D, generator=self.g) * 2).to(self.dtype).to(DEV)


def call(prov, pool, rows, kw, invariant):
    """rows: [(name, q [n, Hq, D], k_len)] -> outputs per row, one paged call for the whole batch."""
    width = max(len(pool.tables[n]) for n, _, _ in rows)
    table = torch.zeros(len(rows), width, dtype=torch.int32)
    for i, (n, _, _) in enumerate(rows):
        table[i, : len(pool.tables[n])] = torch.tensor(pool.tables[n], dtype=torch.int32)
    q = torch.cat([r[1] for r in rows])
    lens = torch.tensor([r[2] for r in rows], dtype=torch.int32)
    cu = torch.tensor([0] + torch.tensor([r[1].shape[0] for r in rows]).cumsum(0).tolist(), dtype=torch.int32)
    out = prov.flash_attn_with_kvcache(
        q,
        pool.k,
        pool.v,
        table.to(DEV),
        lens.to(DEV),
        cu.to(DEV),
        max(r[1].shape[0] for r in rows),
        batch_invariant=invariant,
        **kw,
    )
    res, at = [], 0
    for r in rows:
        res.append(out[at : at + r[1].shape[0]].clone())
        at += r[1].shape[0]
    return res


def others(pool, n, long_context=False):
    """n other (new) sequences: decode, extend and prefill rows of random lengths (one with 2100 keys)."""
    rows = []
    for i in range(n):
        k_len = 2100 if (long_context and i == 0) else int(torch.randint(1, 120, (1,), generator=pool.g))
        q_len = 1 if i % 3 == 0 else min(k_len, int(torch.randint(1, 9, (1,), generator=pool.g)))
        name = f"o{len(pool.tables)}"
        pool.seq(name, k_len)
        rows.append((name, pool.q(q_len), k_len))
    return rows


CONFIGS = {
    "fp32": (torch.float32, 4, {}),
    "bf16-window-softcap-sinks": (torch.bfloat16, 8, dict(window_size=(24, 0), softcap=8.0)),
    # ALiBi slopes that keep far keys weighing (the bias is a matrix product on Intel and in the interpreter)
    "fp32-alibi": (torch.float32, 8, dict(alibi_slopes=torch.tensor([0.37 / 3**i for i in range(8)], device=DEV))),
}


@pytest.mark.parametrize("provider", ["triton", "reference"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_decode_row_is_bitwise_the_same_in_any_batch(provider, config):
    dtype, hq, kw = CONFIGS[config]
    prov = get_provider(provider)
    pool = Pool(dtype, hq)
    if "softcap" in kw:
        kw = dict(kw, sinks=(torch.randn(hq, generator=pool.g) * 2).to(DEV))
    pool.seq("s", S_LEN)
    q_s = pool.q(1)
    alone = call(prov, pool, [("s", q_s, S_LEN)], kw, True)[0]
    for batch in (3, 17):
        rows = others(pool, batch - 1, long_context=batch == 17)
        if batch == 17:  # decode-only batch with a long context: the one that would be split (split-K)
            rows = [(n, q[:1], k) for n, q, k in rows]
        got = call(prov, pool, rows[: batch // 2] + [("s", q_s, S_LEN)] + rows[batch // 2 :], kw, True)[batch // 2]
        assert torch.equal(got, alone), f"batch {batch}: max |diff| {float((got.float() - alone.float()).abs().max())}"
    if provider == "triton" and config == "fp32":
        # the same decode-only batch without the mode splits the long context, and the bits change:
        # the check above can fail
        free = call(prov, pool, rows[:8] + [("s", q_s, S_LEN)] + rows[8:], kw, False)[8]
        assert not torch.equal(free, alone)


@pytest.mark.parametrize("provider", ["triton", "reference"])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_prefill_is_bitwise_the_same_however_chunked(provider, config):
    dtype, hq, kw = CONFIGS[config]
    prov = get_provider(provider)
    pool = Pool(dtype, hq, seed=1)
    if "softcap" in kw:
        kw = dict(kw, sinks=(torch.randn(hq, generator=pool.g) * 2).to(DEV))
    pool.seq("s", S_LEN)
    prefix, new = 30, S_LEN - 30  # 30 cached tokens, 40 new ones prefilled in chunks
    q_new = pool.q(new)
    results = {}
    for chunks in (1, 2, 5):
        bounds = [round(new * i / chunks) for i in range(chunks + 1)]
        outs = []
        for c in range(chunks):
            a, b = bounds[c], bounds[c + 1]
            rows = others(pool, 2 * c)  # a different batch around every chunk
            outs.append(call(prov, pool, [("s", q_new[a:b], prefix + b)] + rows, kw, True)[0])
        results[chunks] = torch.cat(outs)
    for chunks in (2, 5):
        diff = float((results[chunks].float() - results[1].float()).abs().max())
        assert torch.equal(results[chunks], results[1]), f"{chunks} chunks vs 1: max |diff| {diff}"
