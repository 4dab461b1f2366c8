"""Render every measured figure of README.md and docs/benchmarks.md from the committed records.

    python benchmarks/render_tables.py           # rewrite the docs in place
    python benchmarks/render_tables.py --check   # exit 1 and print a unified diff when a doc differs

Each figure sits between ``<!-- render:NAME -->`` and ``<!-- /render:NAME -->`` in a doc; the text in between
is what ``NAME(records)`` below returns, built only from JSON/JSONL files committed in this repository. Each
block says which code path it measured (the one-call API ``flash_attn_with_kvcache``, the engine path
``plan_step`` + ``LayerRunner.forward``, a provider's ``arm_paged`` + ``launch.run``, or an engine end to end),
on which machine, when, and from which record. Where a record does not say something (a date, a device
name), the block says it is not recorded rather than filling it in.

Standard library only: it runs in CI's core suite (tests/test_rendered_tables.py) without torch.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import statistics
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent

# Paths as each producing script runs them (read from the scripts, named here once).
ONE_CALL = "the one-call API (`TritonProvider.flash_attn_with_kvcache`: plan + launch every call)"
ENGINE_PATH = "the engine path (`plan_step` once per step + `LayerRunner.forward` per layer)"
LAUNCH_PATH = "the provider's launch path (`arm_paged` once, then `launch.run` per call)"

BLOCK = re.compile(r"(<!-- render:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /render:(?P=name) -->)", re.S)


class Records:
    """Committed records, read once each, by path relative to the repository root."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._cache: dict[str, Any] = {}

    def json(self, rel: str) -> Any:
        """The parsed JSON file ``rel``."""
        if rel not in self._cache:
            self._cache[rel] = json.loads((self.root / rel).read_text())
        return self._cache[rel]

    def jsonl(self, rel: str) -> list[dict]:
        """The JSON lines of ``rel`` (blank lines skipped)."""
        if rel not in self._cache:
            lines = (self.root / rel).read_text().splitlines()
            self._cache[rel] = [json.loads(line) for line in lines if line.strip()]
        return self._cache[rel]


# ---------------------------------------------------------------------------------------------- formatting


def sci(x: float) -> str:
    """2.44e-4 -> '2.4e-4' (bf16 differences: two significant digits)."""
    mant, exp = f"{x:.1e}".split("e")
    return "0" if x == 0 else f"{mant}e{int(exp)}"


def rng(values: list[float], fmt: Callable[[float], str]) -> str:
    """'a - b' over the values, or one value when they are all the same once formatted."""
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo} - {hi}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def link(rel: str, base: str) -> str:
    """A markdown link to repository file ``rel`` from a doc in folder ``base`` ('docs' or '')."""
    target = (
        Path(rel).relative_to(base)
        if base and rel.startswith(base + "/")
        else (Path("..") / rel if base else Path(rel))
    )
    return f"[{rel}]({target.as_posix()})"


def when(rec: dict) -> str:
    """The record's run date, or that it has none."""
    return rec["date"] if rec.get("date") else "run date not recorded"


def shape(batch: int, ctx: int) -> str:
    return f"{batch} x {ctx}"


def spaced(case: str) -> str:
    """'decode 64x4096' -> 'decode 64 x 4096' (the records' case names, the docs' spelling)."""
    return re.sub(r"(\d)x(\d)", r"\1 x \2", case)


# ------------------------------------------------------------------------- paged attention (bench_attention.py)

ATTN = "docs/benchmarks-h200.json"


def _engine_rows(rec: dict, phase: str) -> list[dict]:
    """A bench_attention record's rows of ``phase`` through the engine path (its one-call rows left out)."""
    return [x for x in rec[phase] if x.get("path", "engine") == "engine"]


def _attn_caption(r: Records, base: str) -> str:
    rec = r.json(ATTN)
    return (
        f"Path: ours through {ENGINE_PATH} (the record's one-call rows beside); each peer through its engine's own "
        f"call (`benchmarks/peers.py`). "
        f"Machine: {rec['device']}, torch {rec['torch']}, Triton {rec['triton']}, copy {rec['copy_tbps']:.2f} "
        f"TB/s in the same run; {when(rec)}. Record: {link(ATTN, base)}."
    )


def attention_decode(r: Records) -> str:
    """Decode, % of copy bandwidth, ours vs vLLM's / SGLang's Triton kernels and FlexAttention."""
    rec = r.json(ATTN)
    rows = [
        [
            shape(d["batch"], d["context"]),
            f"**{d['triton_pct_copy']:.1f}** / {d['triton_pct_copy_latency']:.1f}",
            f"{d['vllm_unified_pct_copy']:.1f}",
            f"{d['sglang_decode_pct_copy']:.1f}",
            f"{d['flex_paged_tbps']:.2f}",
        ]
        for d in _engine_rows(rec, "decode")
    ]
    return (
        _attn_caption(r, "docs") + "\n\nDecode, % of copy bandwidth (ours: throughput / latency; peers: "
        "throughput):\n\n"
        + table(
            [
                "batch x context",
                "**ours**",
                "vLLM Triton unified",
                "SGLang Triton decode",
                "FlexAttention paged (TB/s, latency)",
            ],
            rows,
        )
    )


def attention_prefill(r: Records) -> str:
    """Prefill, TFLOP/s, ours vs vLLM's kernel, FlexAttention and dense SDPA."""
    rec = r.json(ATTN)
    names = {"1x8192 causal": "1 x 8192", "16x512 on 2048 prefix": "16 x 512 on a 2048 prefix"}
    rows = [
        [
            names.get(p["case"], p["case"]),
            f"**{p['triton_tflops']:.0f}** / {p['triton_tflops_latency']:.0f}",
            f"{p['vllm_unified_tflops']:.0f}",
            f"{p['flex_paged_tflops']:.0f}",
            f"{p['sdpa_cudnn_tflops']:.0f}",
            f"{p['sdpa_flash_tflops']:.0f}",
        ]
        for p in _engine_rows(rec, "prefill")
    ]
    return (
        "Prefill, TFLOP/s (causal, bottom-right aligned; ours: throughput / latency; vLLM: throughput; "
        "FlexAttention and SDPA: latency):\n\n"
        + table(
            [
                "case",
                "**ours**",
                "vLLM Triton unified",
                "FlexAttention paged",
                "SDPA cuDNN (dense)",
                "SDPA flash (dense)",
            ],
            rows,
        )
    )


def attention_agreement(r: Records) -> str:
    """Each peer's max |difference| from our output on the same inputs, per phase."""
    rec = r.json(ATTN)
    parts = []
    for phase, keys in (
        ("decode", ("vllm_unified_max_abs_diff", "sglang_decode_max_abs_diff", "flex_paged_max_abs_diff_vs_triton")),
        ("prefill", ("vllm_unified_max_abs_diff", "flex_paged_max_abs_diff_vs_triton")),
    ):
        names = {
            "vllm_unified_max_abs_diff": "vLLM",
            "sglang_decode_max_abs_diff": "SGLang",
            "flex_paged_max_abs_diff_vs_triton": "FlexAttention",
        }
        vals = [f"{names[k]} {rng([row[k] for row in _engine_rows(rec, phase)], sci)}" for k in keys]
        parts.append(f"{phase} {', '.join(vals)}")
    return (
        "Max |difference| of each peer's bf16 output from ours on the same inputs (one call each, before "
        "timing): " + "; ".join(parts) + "."
    )


# ------------------------------------------------------------ the engine path on the H100 (bench_attention.py)

ATTN_ENGINE = "docs/benchmarks-h100.json"
SPLITK = "benchmarks/lab/h100/splitk_sweep_h100.jsonl"
FP8_H100 = "benchmarks/lab/h100/splitk_fp8_e4m3_h100.jsonl"
FP8_ENGINE = "docs/fp8-engine-h100.json"


def _rows(rec: dict, phase: str, path: str) -> list[dict]:
    return [d for d in rec[phase] if d.get("path") == path]


def attention_engine(r: Records) -> str:
    """Decode and prefill through the engine path (and the one-call API beside it), peers in the same run."""
    rec = r.json(ATTN_ENGINE)
    one = {(d["batch"], d["context"]): d for d in _rows(rec, "decode", "one_call")}
    dec = [
        [
            shape(d["batch"], d["context"]),
            f"**{d['triton_pct_copy']:.1f}** / {d['triton_pct_copy_latency']:.1f}",
            f"{one[(d['batch'], d['context'])]['triton_pct_copy']:.1f}",
            f"{d['vllm_unified_pct_copy']:.1f}",
            f"{d['sglang_decode_pct_copy']:.1f}",
        ]
        for d in _rows(rec, "decode", "engine")
    ]
    one_p = {p["case"]: p for p in _rows(rec, "prefill", "one_call")}
    pre = [
        [
            spaced(p["case"]),
            f"**{p['triton_tflops']:.0f}** / {p['triton_tflops_latency']:.0f}",
            f"{one_p[p['case']]['triton_tflops']:.0f}",
            f"{p['vllm_unified_tflops']:.0f}",
            f"{p['sdpa_cudnn_tflops']:.0f}",
        ]
        for p in _rows(rec, "prefill", "engine")
    ]
    return (
        f"Path: ours through the engine path ({rec['paths']['engine']}), the one-call API beside it; each peer "
        f"through its engine's own call. Machine: {rec['device']}, torch {rec['torch']}, Triton {rec['triton']}, "
        f"copy {rec['copy_tbps']:.2f} TB/s in the same run; {when(rec)}. Record: {link(ATTN_ENGINE, 'docs')}.\n\n"
        "Decode, % of copy bandwidth (ours: throughput / latency; one call and peers: throughput):\n\n"
        + table(
            [
                "batch x context",
                "**ours, engine path**",
                "ours, one call",
                "vLLM Triton unified",
                "SGLang Triton decode",
            ],
            dec,
        )
        + "\n\nPrefill, TFLOP/s (causal, bottom-right aligned; ours: throughput / latency):\n\n"
        + table(["case", "**ours, engine path**", "ours, one call", "vLLM Triton unified", "SDPA cuDNN (dense)"], pre)
        + "\n\n"
        + split_k_tile_note(r)
        + "\n\n"
        + decode_grid(r)
        + "\n\n"
        + fp8_engine(r)
        + "\n\n"
        + fp8_h100_note(r)
    )


def fp8_engine(r: Records, record: str = FP8_ENGINE) -> str:
    """FP8 KV decode through the engine path against the bf16 cache in the same run."""
    rec = r.json(record)
    kinds = ["bf16", "e4m3", "e5m2", "e4m3 per-head"]
    cells: dict[tuple[int, int], dict[str, str]] = {}
    for x in rec["rows"]:
        cell = (
            f"{x['us']:.0f} us, {x['pct_copy']:.1f} %"
            + ("" if x["kv"] == "bf16" else f", **{x['speedup_vs_bf16']:.2f}x**")
            if "us" in x
            else x.get("error", "-")
        )
        cells.setdefault((x["batch"], x["context"]), {})[x["kv"]] = cell
    rows = [[shape(*k)] + [v.get(kind, "-") for kind in kinds] for k, v in cells.items()]
    equal = all(x.get("bitwise_equal_one_call") for x in rec["rows"] if "us" in x)
    return (
        f"FP8 KV decode through the engine path ({rec['path']}; `benchmarks/bench_fp8_engine.py`, {rec['device']}, "
        f"copy {rec['copy_tbps']:.2f} TB/s, {when(rec)}, {link(record, 'docs')}): us per layer, % of copy by "
        f"the bytes read, speed-up over the bf16 cache of the same run (per-tensor descales bound with "
        f"`ensure_bound`, per-head [batch, Hkv] with `bind`; every output "
        f"{'bitwise equal to' if equal else 'NOT equal to'} the one-call API's):\n\n"
        + table(["batch x context"] + kinds, rows)
    )


DECODE_GRID = "docs/decode-grid-h100.json"


def decode_grid(r: Records) -> str:
    """Issue #51's wider decode grid through the engine path, vLLM's and SGLang's kernels in the same run."""
    rec = r.json(DECODE_GRID)

    def cell(x: dict, name: str) -> str:
        if f"{name}_pct_copy" in x:
            return f"{x[f'{name}_pct_copy']:.1f}"
        return "-" if f"{name}_error" not in x else "n/a"

    rows = [
        [
            x["name"],
            shape(x["batch"], x["ctx"]),
            f"{x['hq']} / {x['hkv']}, D {x['d']}",
            f"**{x['pct_copy']:.1f}** / {x['pct_copy_latency']:.1f}" if "pct_copy" in x else x.get("error", "-"),
            cell(x, "vllm_unified"),
            cell(x, "sglang_decode"),
        ]
        for x in rec["rows"]
    ]
    diffs = [x[k] for x in rec["rows"] for k in ("vllm_unified_max_abs_diff", "sglang_decode_max_abs_diff") if k in x]
    return (
        f"Decode over the wider grid ({rec['rows'][0]['path']}; `benchmarks/bench_decode_grid.py`, {rec['device']}, "
        f"copy {rec['copy_tbps']:.2f} TB/s, {when(rec)}, {link(DECODE_GRID, 'docs')}): % of copy by the K/V bytes "
        f"a layer must read (a window reads its 1,024 keys); ours throughput / latency, peers throughput; n/a: the "
        f"peer's decode kernel has no such form (ALiBi or window in SGLang's). Peers' outputs within "
        f"{max(diffs) if diffs else float('nan'):.2g} of ours (max |diff|, bf16).\n\n"
        + table(
            ["layer", "batch x context", "heads, head dim", "**ours, engine path**", "vLLM Triton", "SGLang Triton"],
            rows,
        )
    )


def split_k_tile_note(r: Records) -> str:
    """What the split-K sweep found: the no-split tile under split-K vs the split tile that ships."""
    rows = [x for x in r.jsonl(SPLITK) if "pct_copy" in x]
    shipped = [x["pct_copy"] for x in rows if x.get("what") == "shipped" and x["splits"] not in (1, None)]
    old = [x["pct_copy"] for x in rows if "what" not in x and x["tile"] == [16, 128, 8, 2]]
    new = {
        tuple(x["shape"]): x["pct_copy"]
        for x in rows
        if "what" not in x
        and x["tile"] == [16, 128, 4, 2]
        and x["splits"] == {(8, 32768): 8, (1, 131072): 32, (2, 65536): 32, (16, 16384): 4}.get(tuple(x["shape"]))
    }
    return (
        f"Split-K decode runs its own tile on Hopper (`decode_split` in tuning.py): in the one-call sweep "
        f"({link(SPLITK, 'docs')}, same H100) the no-split tile (16 x 128, 8 warps) held "
        f"{rng(old, lambda x: f'{x:.1f}')} % of copy under split-K at every count ({rng(shipped, lambda x: f'{x:.1f}')} "
        f"% at the counts the policy picks), the split tile (16 x 128, 4 warps) "
        + ", ".join(f"{v:.1f} % at {shape(*k)}" for k, v in sorted(new.items()))
        + "."
    )


def fp8_h100_note(r: Records) -> str:
    """FP8 (e4m3) decode against bf16 at the same shapes, one-call API, one run."""
    rows = r.jsonl(FP8_H100)
    base = {tuple(x["shape"]): x["us"] for x in rows if x.get("what", "").startswith("bf16")}
    fp8 = {tuple(x["shape"]): x for x in rows if x.get("what") == "shipped"}
    parts = [
        f"{shape(*k)}: {base[k]:.0f} vs {v['us']:.0f} us ({base[k] / v['us']:.2f}x, {v['pct_copy']:.1f} % of "
        f"copy by bytes read)"
        for k, v in sorted(fp8.items())
    ]
    return (
        f"FP8 (e4m3, per-tensor descales) against bf16 in one run (one-call API, {link(FP8_H100, 'docs')}): "
        + "; ".join(parts)
        + "; the shipped `decode_fp8` tile was the fastest of the 27 swept."
    )


# ------------------------------------------------------------------------- FP8 decode on the H200 (bench_fp8_engine)

FP8_H200 = "docs/h200/fp8-engine.json"


def fp8_decode(r: Records) -> str:
    """FP8 vs bf16 decode on the H200 through the engine path, both from the same run of bench_fp8_engine.py."""
    return fp8_engine(r, FP8_H200)


# ------------------------------------------------------------------------------------- guards (bench_guards.py)

GUARDS = "docs/h200/guards.json"


def guards(r: Records) -> str:
    """Guarded / unguarded time per call, median of the rounds."""
    rec = r.json(GUARDS)
    rows = [[spaced(c["case"]), f"{c['ratio_back_to_back']:.4f}", f"{c['ratio_latency']:.4f}"] for c in rec["cases"]]
    return (
        f"Path: {LAUNCH_PATH}, the package against itself at git {rec['before']} (before the guards), rounds "
        f"alternating in one process, median of {rec['rounds']} rounds. Machine: {rec['device']}, torch "
        f"{rec['torch']}; {when(rec)}. Record: {link(GUARDS, 'docs')}.\n\n"
        + table(["case", "guarded / unguarded, back-to-back", "guarded / unguarded, latency"], rows)
        + "\n\nThe script stops when the two outputs differ bitwise (unless `--report-diff`); the record does not "
        "store the comparison."
    )


# ------------------------------------------------------------------------ batch invariance (bench_batch_invariant)

BATCH_INV = "docs/batch-invariant-h200.json"


def batch_invariant(r: Records) -> str:
    """Default vs batch-invariant mode, back-to-back time per call."""
    rec = r.json(BATCH_INV)
    rows = []
    for row in rec["rows"]:
        note = " (no split-K)" if row["case"] == "decode 8x32768" else ""
        rows.append(
            [
                spaced(row["case"]),
                f"{row['default']['s_per_call_back_to_back'] * 1e6:.1f}",
                f"{row['invariant']['s_per_call_back_to_back'] * 1e6:.1f}",
                f"{row['cost_x']:.2f}x{note}",
            ]
        )
    return (
        f"Path: {ONE_CALL}, `batch_invariant=False` / `True`, back-to-back (20 calls). Machine: "
        f"{rec['device']}; {when(rec)}. Record: {link(BATCH_INV, 'docs')}.\n\n"
        + table(["case", "default (us/call)", "batch-invariant (us/call)", "cost"], rows)
    )


# ----------------------------------------------------------------------------------- host cost (bench_host_cost)

HOST = "docs/h200/host_cost_features.json"


def host_cost(r: Records) -> str:
    """Host cost per layer of a simulated 32-layer decode step, per feature, median of the rounds."""
    rec = r.json(HOST)
    summ = rec["summary"]
    feats = ["plain", "sinks", "alibi", "fp8"]
    rows = []
    for b, k in rec["config"]["feature_cases"]:
        label = f"batch {b}, {k} keys"
        rows.append([label] + [f"{statistics.median(summ[f'this/{f}/B{b}_K{k}']['us']):.1f}" for f in feats])
    n = len(next(iter(summ.values()))["us"])
    return (
        f"Path: {ENGINE_PATH}, {rec['config']['layers']} layers per step, per-layer host cost including "
        f"planning, median of {n} rounds. Machine: a CUDA device (`{rec['config']['device']}`; the record names "
        f"no model; filed with the H200 records); run date not recorded. Record: {link(HOST, 'docs')}.\n\n"
        + table(["case (us per layer)", "plain", "sinks", "ALiBi", "FP8 KV"], rows)
    )


# --------------------------------------------------------------------------------------------- MLA (bench_mla)

MLA = "docs/h200/mla-decode.json"  # the page kernel's "tma" form, the column-program merge and MLA's 128-split cap
# (tuning); docs/mla-decode-h100.json is the H100 record of the same kernel before those two


def _mla_tflops(row: dict, latent: int = 512, rope: int = 64) -> float:
    """bf16 MMA rate of absorbed MLA decode: per head and key, QK over latent + rope, PV over latent."""
    return 2 * (latent + rope + latent) * row["heads"] * row["batch"] * row["ctx"] / (row["ours_us"] * 1e-6) / 1e12


def mla_decode(r: Records) -> str:
    """Our MLA decode vs SGLang's Triton MLA decode."""
    rec = r.json(MLA)
    rows = [
        [
            str(x["heads"]),
            shape(x["batch"], x["ctx"]),
            f"{x['ours_us']:.0f}",
            f"{x['sglang_us']:.0f}",
            f"{x['sglang_us'] / x['ours_us']:.2f}x",
        ]
        for x in rec["rows"]
    ]
    wide = [x for x in rec["rows"] if x["heads"] == 128]
    ratios = [x["sglang_us"] / x["ours_us"] for x in rec["rows"]]
    return (
        f"Path: ours through {ENGINE_PATH.replace('LayerRunner.forward', 'LayerRunner.forward_mla')}; SGLang's "
        f"`decode_attention_fwd` as its backend calls it (`benchmarks/peers.py`). Back-to-back, 20 calls. Machine: "
        f"{rec['device']}, torch {rec['torch']}, copy {rec['copy_tbps']:.2f} TB/s; {when(rec)}. Kernel: on Hopper the "
        f"page-block kernel's tensor-descriptor form (`tuning.MLA_KERNEL_FORM`, docs/mla-kernel.md). "
        f"Record: {link(MLA, 'docs')}.\n\n"
        + table(["heads", "batch x context", "ours (us)", "SGLang (us)", "SGLang / ours"], rows)
        + f"\n\nSGLang's kernel takes {rng(ratios, lambda x: f'{x:.2f}')}x the time of ours. With 128 heads ours "
        f"runs {rng([_mla_tflops(x) for x in wide], lambda x: f'{x:.0f}')} TFLOP/s of bf16 MMA at "
        f"{rng([x['ours_pct_copy'] for x in wide], lambda x: f'{x:.0f}')} % of copy bandwidth (latent + rope "
        f"bytes read)."
    )


# ---------------------------------------------------------------------------------- compile stalls (bench_...)

STALLS = "docs/h200/compile_stalls.json"


def compile_stalls(r: Records) -> str:
    """Start-up and serving-time compiles with the warm-up on and off."""
    rec = r.json(STALLS)
    rows = []
    for mode in ("warmup", "off"):
        m = rec[mode]
        stalls = str(m["n_stalls"])
        if m["n_stalls"]:
            batches = sorted({s["batch"] for s in m["stalls"]})
            stalls += f" ({m['stall_s']:.1f} s: decode steps at batch {', '.join(map(str, batches))})"
        rows.append(
            [mode, f"{m['startup_s']:.1f} s", str(m["startup_compiled"]), str(m["compiled_while_serving"]), stalls]
        )
    return (
        f"Path: {ONE_CALL} for the three dense kinds, {LAUNCH_PATH} for MLA. Machine: {rec['device']}; run date "
        f"not recorded. Record: {link(STALLS, 'docs')}.\n\n"
        + table(
            ["mode", "start-up (4 kinds)", "kernels compiled at start-up", "compiled while serving", "stalls (total)"],
            rows,
        )
    )


# --------------------------------------------------------------------------- CPU provider (bench_cpu_provider)

CPU = "docs/cpu/cpu_provider.json"
ENGINE_NAMES = {"vllm": ("vLLM", "CPU_ATTN"), "sglang": ("SGLang", "torch_native")}


def _cpu_machine(rec: dict) -> str:
    return f"a {rec['cpu_count']}-core {rec['machine']} CPU"


def _names(providers) -> list[str]:
    """Provider names from a record's list: vLLM runs list names; SGLang's log line gives the layer's
    "{'prefill': 'x', 'decode': 'y'}, page size N" (its names taken)."""
    out: set[str] = set()
    for p in providers or []:
        out.update(re.findall(r"'(?:prefill|decode)': '(\w+)'", p) or [p])
    return sorted(out)


def cpu_provider(r: Records) -> str:
    """Ours (torch_sdpa) vs each engine's own CPU backend, end to end."""
    rec = r.json(CPU)
    rows, same = [], []
    for res in rec["results"]:
        name, own_name = ENGINE_NAMES[res["engine"]]
        own, ours = res["backends"]["own"], res["backends"]["ours"]
        same.append(f"{ours['identical_to_own']}/{rec['batch']}")
        rows.append(
            [
                f"{name}: ours / {own_name}",
                f"{ours['prefill_ms_per_prompt_token']:.2f} / {own['prefill_ms_per_prompt_token']:.2f} "
                f"({ours['ratio_prefill']:.2f}x)",
                f"{ours['decode_ms_per_output_token']:.1f} / {own['decode_ms_per_output_token']:.1f} "
                f"({ours['ratio_decode']:.2f}x)",
            ]
        )
    provs = "; ".join(
        f"{ENGINE_NAMES[res['engine']][0]} {', '.join(f'`{p}`' for p in _names(res['backends']['ours'].get('providers')))}"
        for res in rec["results"]
    )
    return (
        f"Path: the engine end to end (each backend in its own engine process; ours is the engine's CPU default "
        f"provider, as the run logged it: {provs}). Machine: {_cpu_machine(rec)}; {rec['date']}. Median of "
        f"{rec['reps']}. Record: "
        f"{link(CPU, 'docs')}.\n\n"
        + table(["engine", "prefill (ms per prompt token)", "decode (ms per output token)"], rows)
        + f"\n\nGreedy tokens identical to the engine's own backend: {' and '.join(same)}."
    )


# ---------------------------------------------------------------- CPU batch sizes (bench_cpu_batches.py)

CPU_BATCHES = (
    "docs/cpu/cpu_batches.json",
    "docs/cpu/cpu_batches_pass12.json",
    "docs/cpu/cpu_batches_2048.json",
    "docs/cpu/cpu_batches_2048_ours_first.json",
    "docs/cpu/cpu_batches_2048_b1_fresh.json",
    "docs/cpu/cpu_batches_2048_b1_fresh_2.json",
    "docs/cpu/cpu_batches_2048_fresh.json",
    "docs/cpu/cpu_batches_2048_fresh_pass12.json",
    "docs/cpu/cpu_batches_2048_b32.json",
    "docs/cpu/cpu_batches_2048_b32_fresh.json",
    "docs/cpu/cpu_batches_sglang.json",
    "docs/cpu/cpu_batches_sglang_2048.json",
    "docs/cpu/cpu_batches_sglang_2048_b32.json",
    "docs/cpu/cpu_batches_sglang_2048_fresh.json",
    "docs/cpu/cpu_batches_sglang_2048_b32_fresh.json",
)


def _paired(row: dict, phase: str) -> str:
    """ "ours / own ms (paired ratio, its min-max over the repetitions)"."""
    o, w = row["ours"], row["own"]
    key = "prefill_ms_per_prompt_token" if phase == "prefill" else "decode_ms_per_output_token"
    p = row[f"pairs_{phase}"]
    return f"{o[key]:.3g} / {w[key]:.3g} ({p['median']:.2f}x; {p['min']:.2f}-{p['max']:.2f})"


def _provs(rec: dict) -> str:
    names = _names(rec.get("providers"))
    return ", ".join(f"`{n}`" for n in names) if names else "providers not in the run's log"


def cpu_batches(r: Records) -> str:
    """Model-level ms per token at batch 1 / 8 / 32, short and 2,048-token prompts, both engines: ours / own,
    paired."""
    rows = []
    for rel in CPU_BATCHES:
        rec = r.json(rel)
        name = ENGINE_NAMES[rec["engine"]][0]
        ctx = f"{rec['context']:,} tokens each" if rec.get("context") else "the main job's questions (28-50 tokens)"
        if rec.get("started") == "ours,own":  # which engine started first (own first unless said)
            ctx += ", ours started first"
        if rec.get("method") == "fresh pairs":  # --fresh: a process per timed call, alone
            ctx += ", a process per call"
        for row in rec["rows"]:
            rows.append(
                [
                    f"{name}: ours ({_provs(rec)}) / {rec['own']}",
                    ctx,
                    str(row["batch"]),
                    _paired(row, "prefill"),
                    _paired(row, "decode"),
                    row["identical_to_own"],
                    f"{rec['reps']} pairs, {rec['max_tokens']} tokens; {rec['date']}, {link(rel, 'docs')}",
                ]
            )
    rec = r.json(CPU_BATCHES[0])
    return (
        "Path: the engine end to end (offline `generate`; SmolLM2-135M-Instruct fp32, eager, no prefix / radix "
        "cache, greedy). Method: both engines (own and ours, one process each) stay up side by side and take turns; "
        'each repetition times own and ours back to back, the order swapped every repetition; rows marked "a process '
        'per call" instead start a fresh process for every timed call, alone on the machine (one warm-up call, then '
        "the timed one), two back to back a pair. Ratio = the median over "
        "the repetitions of the paired ratio ours / own (below 1 = ours faster), then its min-max; times are each "
        f"backend's median. Machine: {_cpu_machine(rec)}.\n\n"
        + table(
            [
                "engine",
                "prompts",
                "batch",
                "prefill: ms per prompt token, ours / own (ratio; range)",
                "decode: ms per output token, ours / own (ratio; range)",
                "identical greedy tokens",
                "run, record",
            ],
            rows,
        )
    )


# -------------------------------------------------------------------- transformers CB (bench_transformers_cb)

TCB = ("docs/h200/bench_transformers_cb_h200_5.17.json", "docs/h200/bench_transformers_cb_h200.json")


def transformers_cb(r: Records) -> str:
    """This backend vs transformers' own CB attention in generate_batch, one row per transformers release."""
    rows = []
    for rel in TCB:
        rec = r.json(rel)
        ours, own = rec["tokens_per_s"]["xpu_attn"], rec["tokens_per_s"]["transformers_cb_sdpa"]
        rows.append(
            [
                rec["transformers"],
                " / ".join(f"{x:.0f}" for x in ours),
                " / ".join(f"{x:.0f}" for x in own),
                f"{rec['ratio_ours_over_own']:.2f}x",
                f"{rec['device']}, torch {rec['torch']}",
                link(rel, "docs"),
            ]
        )
    rec = r.json(TCB[0])
    return (
        f"Path: the engine end to end (transformers' `generate_batch`; ours through this adapter's Triton "
        f"provider). {rec['model']} {rec['dtype']}, {rec['requests']} requests x {rec['new_tokens']} tokens, page "
        f"{rec['page_size']}, CUDA graphs off, order {rec['order']}. Run dates not recorded.\n\n"
        + table(
            [
                "transformers",
                "this backend (`xpu_attn`), tokens/s per run",
                "transformers' own CB (`sdpa`)",
                "best / best",
                "machine",
                "record",
            ],
            rows,
        )
    )


# ------------------------------------------------------------------------- HTTP load (bench_http_load.py)

HTTP = "docs/cpu/http_load.json"  # benchmarks/bench_http_load.py: medians of alternating serve_compare.py runs
# records per engine, newest first: an engine's row comes from the first record that holds it
HTTP_RECORDS = ("docs/cpu/http_load_vllm.json", HTTP)


def _http_providers(runs: list[dict]) -> str:
    """The providers the runs' logs named for ours, or a dash (records older than that field)."""
    got = _names([p for x in runs for p in (x.get("ours", {}).get("providers") or [])])
    return ", ".join(f"`{p}`" for p in got) or "not recorded"


def http_load(r: Records) -> str:
    """Each engine's HTTP server under pressure with its own CPU backend and with ours: medians over alternating
    runs of requests/s and time to first token, and greedy-token agreement."""
    rows, seen, used = [], set(), []
    for rel in HTTP_RECORDS:
        if not (ROOT / rel).exists():
            continue
        rec = r.json(rel)
        for e, v in rec["engines"].items():
            if e in seen:
                continue
            seen.add(e)
            used.append((rel, rec))
            med, runs = v["median"], v["runs"]
            own_name = ENGINE_NAMES[e][1]
            ok = [x for x in runs if x["rc"] == 0]
            same = (
                f"{sum(x['comparison']['identical'] for x in ok)}/"
                f"{sum(x['comparison']['completed_by_both'] for x in ok)}"
            )
            ev = lambda b: rng([x[b]["pressure_events"] for x in ok], lambda v: f"{v:.0f}")  # noqa: E731
            # each run served both backends back to back: its own ratio (req/s ours / own; TTFT own / ours)
            per_run = [
                (
                    x["ours"]["requests_per_s"] / x["own"]["requests_per_s"],
                    x["own"]["ttft_p50_s"] / x["ours"]["ttft_p50_s"],
                    x["own"]["ttft_p99_s"] / x["ours"]["ttft_p99_s"],
                )
                for x in ok
            ]
            paired = " / ".join(f"{statistics.median(c):.2f}x ({min(c):.2f}-{max(c):.2f})" for c in zip(*per_run))
            rows.append(
                [
                    f"{ENGINE_NAMES[e][0]}: ours ({_http_providers(runs)}) / {own_name}",
                    f"{med['ours']['requests_per_s']:.2f} / {med['own']['requests_per_s']:.2f} "
                    f"({med['ratio']['requests_per_s']:.2f}x)",
                    f"{med['ours']['ttft_p50_s']:.1f} / {med['own']['ttft_p50_s']:.1f} "
                    f"({med['ratio']['ttft_p50']:.2f}x)",
                    f"{med['ours']['ttft_p99_s']:.1f} / {med['own']['ttft_p99_s']:.1f} "
                    f"({med['ratio']['ttft_p99']:.2f}x)",
                    paired,
                    same,
                    f"{ev('ours')} / {ev('own')}",
                    f"{len(ok)} of {len(runs)}",
                    f"{rec['date_utc']} UTC, {link(rel, 'docs')}",
                ]
            )
    rec = used[0][1]
    pressure = "a KV pool too small for the load (vLLM preempts, SGLang retracts), " if rec["pressure"] else ""
    return (
        f"Path: the engine end to end (its OpenAI-compatible HTTP server; ours is the engine's CPU default "
        f"provider, as the runs logged it), {rec['model_name']} fp32, {pressure}192 completions, 64 in flight. "
        f"Machine: {_cpu_machine(rec)}. Medians of alternating runs (own first, then ours first, ...; engines "
        f"interleaved where one record holds both).\n\n"
        + table(
            [
                "engine",
                "requests/s, ours / own (ratio)",
                "TTFT p50, s, ours / own (ratio)",
                "TTFT p99, s, ours / own (ratio)",
                "per-run ratios, median (range): requests/s / TTFT p50 / TTFT p99",
                "identical greedy tokens",
                "preemptions / retractions per run, ours / own",
                "runs counted",
                "run, record",
            ],
            rows,
        )
        + "\n\nRatios are oriented so that above 1 means ours is faster (requests/s ours / own; TTFT own / ours)."
    )


# --------------------------------------------------------------------------------------- README's performance


def readme_performance(r: Records) -> str:
    """README's summary table: each row names its path, machine and record."""
    a = r.json(ATTN_ENGINE)
    dec, pre = _rows(a, "decode", "engine"), _rows(a, "prefill", "engine")
    cpu = {res["engine"]: res["backends"] for res in r.json(CPU)["results"]}
    tcb = r.json(TCB[0])
    pct = lambda key: " / ".join(f"{d[key]:.1f}" for d in dec)  # noqa: E731
    rows = [
        [
            f"paged decode, % of copy bandwidth, {' / '.join(shape(d['batch'], d['context']) for d in dec)} "
            f"({a['device'].replace('NVIDIA ', '')}, engine path)",
            pct("triton_pct_copy"),
            pct("vllm_unified_pct_copy"),
            pct("sglang_decode_pct_copy"),
        ],
        [
            f"causal prefill, TFLOP/s, 1 x 8192 / 16 x 512 on 2048 ({a['device'].replace('NVIDIA ', '')}, engine path)",
            " / ".join(f"{p['triton_tflops']:.0f}" for p in pre),
            " / ".join(f"{p['vllm_unified_tflops']:.0f}" for p in pre),
            "-",
        ],
        [
            f"decode through the engine, ms per output token, ours / engine's own (SmolLM2, "
            f"{r.json(CPU)['cpu_count']}-core CPU)",
            "-",
            f"{cpu['vllm']['ours']['decode_ms_per_output_token']:.1f} / "
            f"{cpu['vllm']['own']['decode_ms_per_output_token']:.1f}",
            f"{cpu['sglang']['ours']['decode_ms_per_output_token']:.1f} / "
            f"{cpu['sglang']['own']['decode_ms_per_output_token']:.1f}",
        ],
        [
            f"transformers CB end to end, SmolLM2 {tcb['dtype']}, {tcb['requests']} requests, generated tokens/s: ours / "
            f"transformers' `sdpa` ({tcb['transformers']}, {tcb['device'].replace('NVIDIA ', '')})",
            f"{tcb['best_tokens_per_s']['xpu_attn']:.0f} / {tcb['best_tokens_per_s']['transformers_cb_sdpa']:.0f}",
            "-",
            "-",
        ],
    ]
    return (
        table(["measurement", "ours", "vLLM's kernel", "SGLang's kernel"], rows)
        + f"\n\nbf16, D 128, 32 q / 8 KV heads, page 64; `benchmarks/bench_attention.py` (ours through the "
        f"engine path, `plan_step` once per step + `LayerRunner.forward` per layer over 32 layers, {when(a)}) -> "
        f"{link(ATTN_ENGINE, '')}, [plot](docs/benchmarks-h100.png); CPU: `benchmarks/bench_cpu_provider.py` (vLLM / SGLang end to end, "
        f"{r.json(CPU)['date']}) -> {link(CPU, '')}; transformers CB: `benchmarks/bench_transformers_cb.py` -> "
        f"{link(TCB[0], '')}. Everything else (FP8, MLA, host cost, guards, batch-invariant mode, HTTP load), "
        f"each with its path and machine, and the H200's one-call figures: [docs/benchmarks.md](docs/benchmarks.md). "
        f"Regenerated by `python benchmarks/render_tables.py`."
    )


CI_TIME = "docs/ci/fresh_clone_ci.json"


def readme_test_time(r: Records) -> str:
    """README's test time: the last fresh-clone run of the test command (ci/test.sh writes the record)."""
    rec = r.json(CI_TIME)
    suites = rec["suites"]
    ok = all(s.get("exit") == 0 for s in suites.values())
    return (
        f"**The tests** took {rec['total_s'] / 60:.1f} min on a fresh clone on {rec['cores']} cores, installs "
        f"included ({len(suites)} suites, {'all passed' if ok else 'NOT all passed'}; {rec['date']}, "
        f"commit {rec['commit']}: {link(CI_TIME, '')})."
    )


# ------------------------------------------------------------------------------------------------- driving

RENDERERS: dict[str, Callable[[Records], str]] = {
    "attention-decode": attention_decode,
    "attention-prefill": attention_prefill,
    "attention-agreement": attention_agreement,
    "fp8-decode": fp8_decode,
    "guards": guards,
    "batch-invariant": batch_invariant,
    "host-cost": host_cost,
    "mla-decode": mla_decode,
    "compile-stalls": compile_stalls,
    "cpu-provider": cpu_provider,
    "cpu-batches": cpu_batches,
    "transformers-cb": transformers_cb,
    "http-load": http_load,
    "readme-performance": readme_performance,
    "readme-test-time": readme_test_time,
    "attention-engine": attention_engine,
}

# Which blocks each doc must hold: a block dropped from a doc is an error, not a silent pass.
DOCS: dict[str, tuple[str, ...]] = {
    "docs/benchmarks.md": (
        "attention-engine",
        "attention-decode",
        "attention-prefill",
        "attention-agreement",
        "fp8-decode",
        "guards",
        "batch-invariant",
        "host-cost",
        "mla-decode",
        "compile-stalls",
        "cpu-provider",
        "cpu-batches",
        "transformers-cb",
        "http-load",
    ),
    "README.md": ("readme-performance", "readme-test-time"),
}


def wrap(block: str, width: int = 115) -> str:
    """Prose lines filled to ``width`` (the docs' line length); table rows and blank lines kept as they are."""
    out = []
    for line in block.rstrip("\n").split("\n"):
        keep = not line or line.startswith("|")
        out.append(line if keep else textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False))
    return "\n".join(out) + "\n"


def render_text(text: str, records: Records, required: tuple[str, ...] = ()) -> str:
    """``text`` with every render block's body replaced by its renderer's output."""
    found = {m.group("name") for m in BLOCK.finditer(text)}
    missing = [n for n in required if n not in found]
    unknown = sorted(found - RENDERERS.keys())
    if missing or unknown:
        raise ValueError(f"render blocks missing: {missing}; without a renderer: {unknown}")
    return BLOCK.sub(lambda m: m.group(1) + wrap(RENDERERS[m.group("name")](records)) + m.group(4), text)


def render_all(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """{doc: (current text, rendered text)} for every doc."""
    records = Records(root)
    out = {}
    for rel, required in DOCS.items():
        text = (root / rel).read_text()
        out[rel] = (text, render_text(text, records, required))
    return out


def check(root: Path = ROOT) -> str:
    """The unified diff between the docs and their rendering ('' when they agree)."""
    diff = []
    for rel, (old, new) in render_all(root).items():
        diff += difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
    return "".join(diff)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="print a diff and exit 1 when a doc differs; write nothing")
    a = ap.parse_args(argv)
    if a.check:
        diff = check()
        sys.stdout.write(diff)
        return 1 if diff else 0
    for rel, (old, new) in render_all().items():
        if new != old:
            (ROOT / rel).write_text(new)
            print(f"rendered {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
