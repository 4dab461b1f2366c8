"""Where the torch_sdpa engine path spends a layer on the CPU (issue #48): per step plan, per layer write_kv and
forward, timed with perf_counter, then torch.profiler's per-op self time over the same steps.

    PYTHONPATH=. .venvs/core/bin/python benchmarks/lab/profile_cpu_sdpa.py [--cases 1x128 8x512 8x2048 32x2048]
        [--prefill 1x128 1x512 4x512] [--profile]

A case is BATCHxKEYS, KEYS one length for every sequence ("8x48") or LO-HI spread evenly over the batch
("32x30-70": the lengths of vLLM's short chat prompts mid-decode).

SmolLM2-135M's shape (9 / 3 heads, D 64, fp32, page 128), 30 layers, caches per layer. Decode: one new token per
sequence after ``ctx - 1`` keys. Prefill: ``ctx`` new tokens per sequence, empty cache. Measures, never asserts.
"""

from __future__ import annotations

import argparse
import time

import torch

from vllm_xpu_attn.core import LayerRunner, LayerSpec, Mode, StepInputs, plan_step

HQ, HKV, D, PAGE, LAYERS = 9, 3, 64, 128, 30


def _lengths(batch: int, ctx: str) -> list[int]:
    """Each sequence's keys: ``ctx`` ("48") for all, or "LO-HI" spread evenly from LO to HI over the batch."""
    lo, _, hi = ctx.partition("-")
    lo, hi = int(lo), int(hi or lo)
    return [lo + (hi - lo) * i // max(1, batch - 1) for i in range(batch)]


def _cache_pair(pages: int, g: torch.Generator, paired: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's K and V caches [pages, PAGE, HKV, D]: dense, or (``paired``) the halves of vLLM's
    [pages, PAGE, HKV, K | V] pages."""
    if paired:
        kv = torch.randn(pages, PAGE, HKV, 2 * D, generator=g)
        return kv[..., :D], kv[..., D:]
    return torch.randn(pages, PAGE, HKV, D, generator=g), torch.randn(pages, PAGE, HKV, D, generator=g)


def _case(batch: int, ctx: str, prefill: bool, paired: bool = False) -> dict:
    """A decode (or prefill) step's inputs and per-layer caches, pages shuffled."""
    g = torch.Generator().manual_seed(0)
    lens = _lengths(batch, ctx)
    per = -(-max(lens) // PAGE)
    pages = batch * per + 1
    table = (torch.randperm(pages - 1, generator=g)[: batch * per] + 1).view(batch, per).to(torch.int32)
    nqs = lens if prefill else [1] * batch
    pos = torch.cat([torch.arange(n - nq, n) for n, nq in zip(lens, nqs)])
    rows = torch.arange(batch).repeat_interleave(torch.tensor(nqs))
    slots = table.long()[rows, pos // PAGE] * PAGE + pos % PAGE
    caches = [_cache_pair(pages, g, paired) for _ in range(LAYERS)]
    t = sum(nqs)
    inp = dict(
        mode=Mode.PREFILL if prefill else Mode.DECODE,
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        max_seqlen_k=max(lens),
        num_tokens=t,
        page_size=PAGE,
        page_table=table,
    )
    if prefill:
        cu = torch.tensor([0] + nqs).cumsum(0).to(torch.int32)
        inp.update(cu_seqlens_q=cu, max_seqlen_q=max(nqs))
    return dict(
        inp=inp,
        caches=caches,
        slots=slots,
        q=torch.randn(t, HQ, D, generator=g),
        k=torch.randn(t, HKV, D, generator=g),
        v=torch.randn(t, HKV, D, generator=g),
    )


CLOCK = time.perf_counter


def _parts(c: dict, runner: LayerRunner, reps: int) -> dict:
    """us per step in plan_step, and per layer in write_kv and forward (medians over ``reps`` steps)."""
    out = torch.empty_like(c["q"])
    clock = CLOCK
    t_plan, t_write, t_fwd = [], [], []
    for _ in range(reps):
        t0 = clock()
        plan = plan_step(StepInputs(**c["inp"]))
        t1 = clock()
        w = f = 0.0
        for kc, vc in c["caches"]:
            a = clock()
            runner.write_kv(c["k"], c["v"], kc, vc, c["slots"])
            b = clock()
            runner.forward(plan, c["q"], kc, vc, out)
            f += clock() - b
            w += b - a
        t_plan.append(t1 - t0)
        t_write.append(w / LAYERS)
        t_fwd.append(f / LAYERS)
    med = lambda xs: sorted(xs)[len(xs) // 2] * 1e6  # noqa: E731
    return {"plan_us": med(t_plan), "write_us_per_layer": med(t_write), "forward_us_per_layer": med(t_fwd)}


def _profile(c: dict, runner: LayerRunner, reps: int, top: int) -> str:
    out = torch.empty_like(c["q"])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            plan = plan_step(StepInputs(**c["inp"]))
            for kc, vc in c["caches"]:
                runner.write_kv(c["k"], c["v"], kc, vc, c["slots"])
                runner.forward(plan, c["q"], kc, vc, out)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="*", default=["1x128", "8x512", "8x2048", "32x2048"])
    ap.add_argument("--prefill", nargs="*", default=["1x128", "1x512", "4x512"])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="also torch.profiler's per-op table")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument(
        "--cpu-clock",
        action="store_true",
        help="time.thread_time (this thread's CPU time: steadier on a shared machine, with one torch thread)",
    )
    ap.add_argument("--paired", action="store_true", help="vLLM's cache layout: K and V halves of [P, page, H, 2D]")
    a = ap.parse_args()
    global CLOCK
    if a.cpu_clock:
        CLOCK = time.thread_time
    spec = LayerSpec(
        num_q_heads=HQ, num_kv_heads=HKV, head_dim=D, scale=D**-0.5, dtype=torch.float32, kv_dtype=torch.float32
    )
    runner = LayerRunner(spec, "cpu", PAGE)
    for kind, names in (("decode", a.cases), ("prefill", a.prefill)):
        for name in names:
            b, ctx = name.split("x")
            b = int(b)
            c = _case(b, ctx, kind == "prefill", a.paired)
            reps = max(3, a.reps if sum(_lengths(b, ctx)) <= 16384 else a.reps // 4)
            _parts(c, runner, 2)  # warm-up
            parts = _parts(c, runner, reps)
            print(f"{kind} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()), flush=True)
            if a.profile:
                print(_profile(c, runner, max(2, reps // 4), a.top), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
