"""One out-of-bounds case per process (tests/test_bad_input_table.py runs it; tests/gpu runs the same cases
under compute-sanitizer): values that, unguarded, read or write outside a tensor. Through the layer path
(LayerSpec -> plan_step -> LayerRunner, Triton; no per-call host checks), as an engine drives it.

Prints ``REFUSED <message>`` when the bad value is reported (at once, or at the next step boundary) and
``NAN-ROWS-OK`` when the affected rows came out NaN (``NO-ROWS`` when the case has no output rows).

    python tests/support/bad_input_oob.py "page id 10**6" [--device cuda]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from vllm_xpu_attn import core

    dev = torch.device(args.device)
    dt = torch.float32 if dev.type == "cpu" else torch.bfloat16
    spec = core.LayerSpec(num_q_heads=4, num_kv_heads=2, head_dim=64, scale=0.125, dtype=dt, kv_dtype=dt)
    runner = core.LayerRunner(spec, dev, 16, override="triton")
    pages = 8
    kc = torch.randn(pages, 16, 2, 64, device=dev, dtype=dt)
    vc = torch.randn(pages, 16, 2, 64, device=dev, dtype=dt)

    def i32(x):
        return torch.tensor(x, dtype=torch.int32, device=dev)

    good = dict(
        mode=core.Mode.DECODE,
        seq_lens=i32([40, 20]),
        max_seqlen_k=40,
        num_tokens=2,
        page_size=16,
        page_table=i32([[0, 1, 2], [3, 4, 5]]),
    )
    rows = None  # the output rows the case expects as NaN
    out = None
    try:
        if args.case == "page id 10**6":
            plan = core.plan_step(core.StepInputs(**{**good, "page_table": i32([[0, 10**6, 2], [3, 4, 5]])}))
            out = runner.forward(plan, torch.randn(2, 4, 64, device=dev, dtype=dt), kc, vc)
            rows = [0]
        elif args.case == "cu_seqlens_q[-1] past q":
            # 3 real query rows, but the last sequence claims rows up to 4096 (a kernel would write past out)
            plan = core.plan_step(
                core.StepInputs(
                    mode=core.Mode.EXTEND,
                    seq_lens=i32([40, 20]),
                    max_seqlen_k=40,
                    num_tokens=3,
                    page_size=16,
                    page_table=good["page_table"],
                    cu_seqlens_q=i32([0, 2, 4096]),
                    max_seqlen_q=64,
                )
            )
            out = runner.forward(plan, torch.randn(3, 4, 64, device=dev, dtype=dt), kc, vc)
            rows = [2]
        elif args.case == "write_kv slot 10**9":
            k = torch.randn(2, 2, 64, device=dev, dtype=dt)
            core.write_kv(runner.decode_provider, k, k.clone(), kc, vc, torch.tensor([3, 10**9], device=dev))
            core.plan_step(core.StepInputs(**good))  # the step boundary
        elif args.case == "token table cut short":
            # SGLang style: token table rows, max_seqlen_k below a real length -> a page table one page short
            table = torch.arange(2 * 48, dtype=torch.int32, device=dev).reshape(2, 48)
            plan = core.plan_step(
                core.StepInputs(
                    mode=core.Mode.DECODE,
                    seq_lens=i32([40, 20]),
                    max_seqlen_k=20,
                    num_tokens=2,
                    page_size=16,
                    token_table=table,
                )
            )
            out = runner.forward(plan, torch.randn(2, 4, 64, device=dev, dtype=dt), kc, vc)
            rows = [0]
        elif args.case == "token_rows past the pool":
            pool = torch.arange(4 * 48, dtype=torch.int32, device=dev).reshape(4, 48) % (pages * 16)
            plan = core.plan_step(
                core.StepInputs(
                    mode=core.Mode.DECODE,
                    seq_lens=i32([40, 20]),
                    max_seqlen_k=40,
                    num_tokens=2,
                    page_size=16,
                    token_table=pool,
                    token_rows=i32([1, 1000]),
                )
            )
            out = runner.forward(plan, torch.randn(2, 4, 64, device=dev, dtype=dt), kc, vc)
            rows = [1]
        else:
            print(f"unknown case {args.case!r}")
            return 2
        for _ in range(2):  # the next step boundary reports it (on a GPU: the one after, its snapshot is async)
            if dev.type == "cuda":
                torch.cuda.synchronize()  # what an engine's sampling does between steps
            core.plan_step(core.StepInputs(**good))
        print("NOT REFUSED")
        return 1
    except ValueError as e:
        print(f"REFUSED {e}")
    if rows is None or out is None:
        print("NO-ROWS")
        return 0
    ok = all(bool(torch.isnan(out[r]).all()) for r in rows)
    others = [r for r in range(out.shape[0]) if r not in rows]
    ok = ok and all(bool(torch.isfinite(out[r]).all()) for r in others)
    print("NAN-ROWS-OK" if ok else f"ROWS WRONG: {out.float().isnan().any(-1).any(-1).tolist()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
