"""Attention alone on the CPU, per layer: this backend's engine path against vLLM's CPU_ATTN kernels, same inputs.

    .venvs/vllm/bin/python benchmarks/bench_cpu_attention.py --out docs/cpu/cpu_attention.json   # + .png beside it
        [--batches 1 8 32] [--contexts 128 512 2048] [--rounds 3] [--layers 30] [--skip-reference]
    python benchmarks/bench_cpu_attention.py --replot docs/cpu/cpu_attention.json   # the PNG, where matplotlib is

Why: the engine-level benchmark (bench_cpu_provider.py) times whole models, where attention is one part of a
step and the engines' other work moves 20-30 % between runs. This one isolates the part this package owns, at
the main job's model shape (SmolLM2-135M: 9 query / 3 KV heads, head dim 64, fp32, 30 layers, page 128: vLLM's
CPU default block size).

What runs, per (batch, context) decode step, each contender over ``--layers`` layers (own caches per layer):
  ours      the engine path: ``plan_step`` once per step, then per layer ``LayerRunner.write_kv`` (this step's
            K/V into the paged cache) + ``LayerRunner.forward`` (torch_sdpa, the CPU default provider).
  ours_ref  the same with the reference provider forced (the oracle; slow, for scale).
  cpu_attn  vLLM's CPU backend as its impl calls it: ``cpu_attn_get_scheduler_metadata`` once per step, then per
            layer ``cpu_attn_reshape_and_cache`` + ``cpu_attention_with_kv_cache`` over its own cache layout
            ([blocks, Hkv, block, 2 x D]).
Rounds alternate the contenders (ABAB) in one process; reported: median ms per step (all layers) and per layer,
and ours / cpu_attn. Every contender's output is checked against the fp32 reference before it is timed.
Measures, never asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

try:
    import torch
except ImportError:  # --replot needs only matplotlib
    torch = None

HQ, HKV, D = 9, 3, 64
PAGE = 128  # vLLM's CPU platform default block size (platforms/cpu.py), which this backend is handed too
DTYPE = torch.float32 if torch is not None else None


def _case(batch: int, ctx: int, layers: int, seed: int = 0) -> dict:
    """Random queries / new K/V for one decode step and a pre-filled cache of ``ctx - 1`` keys per sequence,
    pages shuffled (as an engine's allocator leaves them). Caches per layer, in both layouts."""
    g = torch.Generator().manual_seed(seed)
    pages_per = -(-ctx // PAGE)
    num_pages = batch * pages_per + 1
    perm = torch.randperm(num_pages - 1, generator=g)[: batch * pages_per] + 1  # page 0 unused
    table = perm.view(batch, pages_per).to(torch.int32)
    seq_lens = torch.full((batch,), ctx, dtype=torch.int32)
    pos = seq_lens.long() - 1  # the new token's position
    slots = (table.long().gather(1, (pos // PAGE)[:, None])[:, 0] * PAGE + pos % PAGE)
    caches = []
    for _ in range(layers):
        k = torch.randn(num_pages, PAGE, HKV, D, generator=g, dtype=DTYPE)
        v = torch.randn(num_pages, PAGE, HKV, D, generator=g, dtype=DTYPE)
        caches.append((k, v))
    q = torch.randn(batch, HQ, D, generator=g, dtype=DTYPE)
    k_new = torch.randn(batch, HKV, D, generator=g, dtype=DTYPE)
    v_new = torch.randn(batch, HKV, D, generator=g, dtype=DTYPE)
    return dict(batch=batch, ctx=ctx, table=table, seq_lens=seq_lens, slots=slots, caches=caches, q=q,
                k_new=k_new, v_new=v_new, num_pages=num_pages)


def _reference(c: dict, layer: int) -> torch.Tensor:
    """fp32 attention of each query over its sequence's keys (the cache with this step's K/V written)."""
    k_cache, v_cache = (x.clone() for x in c["caches"][layer])
    flat_k, flat_v = k_cache.view(-1, HKV, D), v_cache.view(-1, HKV, D)
    flat_k[c["slots"]], flat_v[c["slots"]] = c["k_new"], c["v_new"]
    out = torch.empty(c["batch"], HQ, D)
    for b in range(c["batch"]):
        n = int(c["seq_lens"][b])
        idx = (c["table"][b].long()[:, None] * PAGE + torch.arange(PAGE)).flatten()[:n]
        k = flat_k[idx].repeat_interleave(HQ // HKV, dim=1)  # [n, Hq, D]
        v = flat_v[idx].repeat_interleave(HQ // HKV, dim=1)
        s = torch.einsum("hd,nhd->hn", c["q"][b].double(), k.double()) * D ** -0.5
        out[b] = torch.einsum("hn,nhd->hd", s.softmax(-1), v.double()).float()
    return out


def ours_step(c: dict, provider: str | None):
    """A closure running one decode step through the engine path (plan once, write + forward per layer)."""
    from vllm_xpu_attn.core import LayerSpec, LayerRunner, Mode, StepInputs, plan_step

    spec = LayerSpec(num_q_heads=HQ, num_kv_heads=HKV, head_dim=D, scale=D ** -0.5, dtype=DTYPE, kv_dtype=DTYPE)
    runner = LayerRunner(spec, "cpu", PAGE, override=provider)
    caches = [(k.clone(), v.clone()) for k, v in c["caches"]]
    out = torch.empty(c["batch"], HQ, D)

    def step() -> torch.Tensor:
        plan = plan_step(StepInputs(mode=Mode.DECODE, seq_lens=c["seq_lens"], max_seqlen_k=c["ctx"],
                                    num_tokens=c["batch"], page_size=PAGE, page_table=c["table"]))
        for k_cache, v_cache in caches:
            runner.write_kv(c["k_new"], c["v_new"], k_cache, v_cache, c["slots"])
            runner.forward(plan, c["q"], k_cache, v_cache, out)
        return out

    return step, runner.decode_provider.name


def cpu_attn_step(c: dict):
    """vLLM's CPU backend kernels as CPUAttentionBackendImpl.forward / do_kv_cache_update call them."""
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    isa = _get_attn_isa(DTYPE, PAGE, D)  # what CPUAttentionBackendImpl picks for this layer
    # [blocks, Hkv, 2 x block, D] viewed as K and V halves, filled by vLLM's own writer (its ISA may pack rows)
    every = (c["table"].long()[:, :, None] * PAGE + torch.arange(PAGE)).flatten(1)  # [B, pages x page] slots
    keep = torch.arange(every.shape[1])[None, :] < (c["seq_lens"].long() - 1)[:, None]  # the prefilled keys
    slots = every[keep]
    caches = []
    for k, v in c["caches"]:
        kv = torch.zeros(c["num_pages"], HKV, PAGE * 2, D, dtype=DTYPE)
        k_cache, v_cache = kv.chunk(2, dim=2)
        flat_k, flat_v = k.view(-1, HKV, D), v.view(-1, HKV, D)
        ops.cpu_attn_reshape_and_cache(flat_k[slots].contiguous(), flat_v[slots].contiguous(), k_cache, v_cache,
                                       slots, isa, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
        caches.append((k_cache, v_cache))
    qsl = torch.arange(c["batch"] + 1, dtype=torch.int32)
    out = torch.empty(c["batch"], HQ, D)

    def step() -> torch.Tensor:
        meta = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=c["batch"], num_heads=HQ, num_kv_heads=HKV, head_dim=D, seq_lens=c["seq_lens"], dtype=DTYPE,
            query_start_loc=qsl, causal=True, sliding_window_size=-1, isa=isa, enable_kv_split=False,
            dynamic_causal=None, kv_cache_dtype="auto")
        for k_cache, v_cache in caches:
            ops.cpu_attn_reshape_and_cache(c["k_new"], c["v_new"], k_cache, v_cache, c["slots"], isa, k_scale=1.0,
                                           v_scale=1.0, kv_cache_dtype="auto")
            ops.cpu_attention_with_kv_cache(
                query=c["q"], key_cache=k_cache, value_cache=v_cache, output=out, query_start_loc=qsl,
                seq_lens=c["seq_lens"], scale=D ** -0.5, causal=True, alibi_slopes=None, sliding_window=-1,
                block_table=c["table"], softcap=0.0, scheduler_metadata=meta, s_aux=None, dynamic_causal=None,
                k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto")
        return out

    return step, f"CPU_ATTN ({isa})"


def _time(step, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    return (time.perf_counter() - t0) / reps * 1e3


def run(a) -> dict:
    rows = []
    for batch in a.batches:
        for ctx in a.contexts:
            c = _case(batch, ctx, a.layers)
            ref = _reference(c, a.layers - 1)
            steps = {"ours": ours_step(c, None), "ours_ref": ours_step(c, "reference")}
            try:
                steps["cpu_attn"] = cpu_attn_step(c)
            except Exception as e:  # noqa: BLE001 - no vLLM here: ours alone, said in the record
                print(f"cpu_attn unavailable: {type(e).__name__}: {e}")
            if a.skip_reference:
                steps.pop("ours_ref")
            row = {"batch": batch, "context": ctx, "layers": a.layers}
            for name, (step, label) in steps.items():
                err = (step() - ref).abs().max().item()  # warm-up and the check (caches now hold this step's K/V)
                row[f"{name}_max_abs_err"] = err
                row[f"{name}_kernel"] = label
                if err > 1e-4:
                    row[f"{name}_error"] = f"max |out - fp32 reference| {err:.2e} > 1e-4: not timed"
            ms = {n: [] for n in steps if f"{n}_error" not in row}
            reps = max(1, int(a.target_ms / max(1e-3, _time(steps["ours"][0], 1))))
            for _ in range(a.rounds):
                for n in ms:
                    ms[n].append(_time(steps[n][0], reps if n != "ours_ref" else 1))
            for n, v in ms.items():
                row[f"{n}_ms_per_step"] = statistics.median(v)
                row[f"{n}_us_per_layer"] = statistics.median(v) / a.layers * 1e3
                row[f"{n}_rounds_ms"] = v
            if "cpu_attn_ms_per_step" in row:
                row["ours_over_cpu_attn"] = row["ours_ms_per_step"] / row["cpu_attn_ms_per_step"]
            print(json.dumps({k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in row.items()
                              if not k.endswith("rounds_ms")}), flush=True)
            rows.append(row)
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
            "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                        platform.machine()),
            "vllm": _vllm_version(), "shape": {"hq": HQ, "hkv": HKV, "d": D, "page": PAGE, "dtype": "float32"},
            "path": "ours: plan_step + LayerRunner.write_kv/forward (engine path); cpu_attn: vLLM's CPU_ATTN ops",
            "rounds": a.rounds, "rows": rows}


def _vllm_version() -> str | None:
    try:
        import vllm

        return vllm.__version__
    except Exception:  # noqa: BLE001
        return None


def plot(rec: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    rows = rec["rows"]
    labels = [f"{r['batch']}x{r['context']}" for r in rows]
    x = range(len(rows))
    for i, n in enumerate(("ours", "cpu_attn")):
        ax.bar([j + i * 0.4 for j in x], [r.get(f"{n}_us_per_layer", 0) for r in rows], 0.4, label=n)
    ax.set_xticks([j + 0.2 for j in x], labels, rotation=30)
    ax.set_ylabel("us per layer (write + attention)")
    ax.set_title(f"decode attention per layer, SmolLM2 shape, {rec['cpu_count']}-core CPU")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 2048])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=300.0, help="timed work per round and contender")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--replot", metavar="JSON", help="only draw the PNG of an earlier run's JSON (beside it)")
    a = ap.parse_args()
    if a.replot:  # any Python with matplotlib (the engine venvs have none)
        plot(json.loads(Path(a.replot).read_text()), Path(a.replot).with_suffix(".png"))
        return 0
    rec = run(a)
    if a.out:
        Path(a.out).write_text(json.dumps(rec, indent=1))
        plot(rec, Path(a.out).with_suffix(".png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
