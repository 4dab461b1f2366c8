"""Host-cost benchmark: what one decode layer and one step plan cost the CPU, side by side.

Prep, once, on a machine with the git history and the engine wheels (this checkout):

    python3 benchmarks/extract_peers.py       # vLLM's / SGLang's Triton kernels -> benchmarks/.peers/vxa_peers
    python3 benchmarks/bench_host_cost.py --prep   # old package (git 7cac817) -> benchmarks/.peers/old_vxa

(The run below also does the --prep export by itself when the directory is missing and git can.)
GPU run (< 3 minutes incl. Triton compiles), carrying benchmarks/.peers:

    PYTHONPATH=. python3 benchmarks/bench_host_cost.py      # -> $OUT/host_cost.json (+ .png), else benchmarks/out/

CPU dry check (Triton interpreter, tiny sizes, few iterations; the figures mean nothing there):

    TRITON_INTERPRET=1 .venvs/core/bin/python benchmarks/bench_host_cost.py --cpu

What is measured (bf16, Hq 32 / Hkv 8 / D 128, page 64; decode B in {1, 8}, keys in {128, 512}: GPU
time per call is a few us, so the host is the bottleneck):

  ours_run        a simulated 32-layer step: core.plan_step (fresh every step) then LayerRunner.forward
                  per layer (one runner and one k/v cache pair per layer). Reported: first layer of a step
                  (arm_paged + Triton binder + FastLaunch arming), later layers (FastLaunch only),
                  amortised per layer (excl. / incl. plan_step). Median over repeats of the per-repeat mean.
  ours_run_fixed  LayerRunner.forward on one reused plan (steady state of later layers), back to back.
  ours_one_call   TritonProvider.flash_attn_with_kvcache (plan + run every call).
  vllm_unified    vLLM 0.32's unified_attention as TritonAttentionImpl.forward calls it (peers.py).
  sglang_decode   SGLang 0.5.23's decode_attention_fwd (peers.py); its metadata built once, outside.
  old_*           the package at git 7cac817 (before plan_step / FastLaunch), in a subprocess with
                  PYTHONPATH=benchmarks/.peers/old_vxa: one-call, and LayerRunner.forward steps on a
                  core.StepPlan of the old package's decode PagedStep.
  plan_*          planning a decode step of 256 requests, max context 4096: vLLM-style (page_table),
                  SGLang-style (token_table; plan_step converts it), the SGLang adapter's translation
                  including the req_to_token[req_pool_indices] gather, our first-layer arm_paged, and
                  the peers' per-step metadata (vLLM's Triton builder: none; SGLang:
                  peers.sglang_decode_metadata, which syncs, and a sync-free variant).

Method (timing.py). host = time.perf_counter() around N back-to-back calls (no synchronisation inside; N
rotates over the 32 layers' tensors), one torch.cuda.synchronize() after the timed region; median over
repeats (timing.host_per_call). gpu = CUDA events around N back-to-back calls that are queued behind a
torch.cuda._sleep long enough for the host to enqueue all N first (so the events time the GPU, not the
host), divided by N; ``gpu_queued_ahead`` says whether that held (timing.queued_throughput). latency =
one call + synchronize, median (timing.wall_latencies). A figure whose gpu time is close to its host time
is flagged ``gpu_bound`` (then host is not purely launch cost).
Measures, never asserts.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS_DIR = os.path.join(HERE, ".peers")
OLD_COMMIT = "7cac817"
OLD_DIR = os.path.join(PEERS_DIR, "old_vxa")
OLD_REFERENCE_US = {  # host us of the package at OLD_COMMIT and the peers, measured then; kept in the JSON as context
    "ours_one_call": 61.0, "vllm_unified": "92-95", "sglang_decode": "79-84", "plan_b256": 41.5}
TARGETS_US = {"per_layer_host": 20.0, "plan_step_b256": 30.0}
BEFORE_REF = "2c1686f"  # --features: the package before per-layer tensors were bound once (run() by position)
FEATURES = ("plain", "sinks", "alibi", "fp8")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", action="store_true", help="dry check on the CPU (TRITON_INTERPRET=1, tiny sizes)")
    ap.add_argument("--prep", action="store_true", help=f"export the old package (git {OLD_COMMIT}) and exit")
    ap.add_argument("--no-old", action="store_true", help="skip the old package")
    ap.add_argument("--no-peers", action="store_true", help="skip vLLM / SGLang")
    ap.add_argument("--out", default=None, help="output dir (default: $OUT, else benchmarks/out)")
    ap.add_argument("--features", action="store_true",
                    help="only the per-feature layer cost (plain / sinks / ALiBi / FP8 KV), this tree vs --before")
    ap.add_argument("--before", default=BEFORE_REF, help="git ref of the package --features compares against")
    ap.add_argument("--rounds", type=int, default=2, help="--features: alternating rounds of each package")
    ap.add_argument("--feature-worker", default=None, help=argparse.SUPPRESS)  # internal: result path
    ap.add_argument("--old-worker", default=None, help=argparse.SUPPRESS)  # internal: result path
    ap.add_argument("--cfg", default=None, help=argparse.SUPPRESS)  # internal: config JSON
    return ap.parse_args(argv)


def make_cfg(cpu: bool) -> dict:
    if cpu:  # interpreter: every program runs in Python, keep it tiny
        return dict(cpu=True, device="cpu", dtype="float16", hq=4, hkv=2, d=64, page=16,
                    cases=[[1, 40], [2, 40]], layers=4, steps=3, repeats=2, calls=8, latency_calls=2,
                    warmup=1, plan_batch=16, plan_ctx=256, plan_calls=20, plan_repeats=3)
    return dict(cpu=False, device="cuda", dtype="bfloat16", hq=32, hkv=8, d=128, page=64,
                cases=[[1, 128], [1, 512], [8, 128], [8, 512]], layers=32, steps=40, repeats=7, calls=256,
                latency_calls=100, warmup=3, plan_batch=256, plan_ctx=4096, plan_calls=200, plan_repeats=7)


# ------------------------------------------------------------------------------------------------
# old package export (prep)
# ------------------------------------------------------------------------------------------------

def old_ready() -> bool:
    return os.path.isfile(os.path.join(OLD_DIR, "vllm_xpu_attn", "core", "__init__.py"))


def export_old(verbose: bool = True) -> str | None:
    """`git archive 7cac817 vllm_xpu_attn | tar -x -C benchmarks/.peers/old_vxa/`. None, or why not."""
    try:
        blob = subprocess.run(["git", "-C", REPO, "archive", OLD_COMMIT, "vllm_xpu_attn"], check=True,
                              capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        err = getattr(e, "stderr", b"") or b""
        return f"git archive {OLD_COMMIT} failed ({type(e).__name__}: {err.decode(errors='replace').strip()[:200]})"
    os.makedirs(OLD_DIR, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(OLD_DIR)  # noqa: S202 - our own repository's archive
    with open(os.path.join(OLD_DIR, "COMMIT"), "w") as f:
        f.write(OLD_COMMIT + "\n")
    if verbose:
        print(f"exported vllm_xpu_attn @ {OLD_COMMIT} -> {os.path.relpath(OLD_DIR, REPO)}")
    return None


# ------------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------------

def _med(xs):
    return statistics.median(xs) if xs else None


def _us(x):
    return None if x is None else round(x * 1e6, 3)


class Timer:
    """The measurements of one package on one device, through timing.py; ``sync`` is a no-op on the CPU."""

    def __init__(self, torch, cfg: dict):
        import timing  # imports torch: only after main() / the workers have set TRITON_INTERPRET for --cpu

        self.torch = torch
        self.timing = timing
        self.cfg = cfg
        self.cuda = not cfg["cpu"]
        self.cps = timing.sleep_cycles_per_second() if self.cuda else None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def host(self, calls, n, repeats):
        """Per-call seconds of n back-to-back calls (calls rotated), one value per repeat."""
        return self.timing.host_per_call(calls, n, repeats, sync=self.sync)

    def latency(self, calls, n):
        return self.timing.wall_latencies(calls, n, sync=self.sync)

    def gpu(self, calls, n, host_per_call):
        """GPU seconds per call (events around n calls queued behind a sleep), queued-ahead flag."""
        if not self.cuda:
            return None, None
        n = min(n, 128)  # stay far below the driver's pending-launch limit (<= 3 kernels per call here)
        return self.timing.queued_throughput(calls, n, host_per_call, self.cps)

    def measure(self, calls, n=None, repeats=None, warmup=None, latency_n=None) -> dict:
        cfg = self.cfg
        n = n or cfg["calls"]
        repeats = repeats or cfg["repeats"]
        for i in range(warmup if warmup is not None else cfg["warmup"]):
            calls[i % len(calls)]()
        self.sync()
        host = self.host(calls, n, repeats)
        lat = self.latency(calls, latency_n or cfg["latency_calls"])
        h = _med(host)
        gpu, ahead = self.gpu(calls, n, h)
        res = {"host_us": _us(h), "host_us_min": _us(min(host)), "host_us_repeats": [_us(x) for x in host],
               "latency_us": _us(_med(lat)), "gpu_us": _us(gpu), "gpu_queued_ahead": ahead,
               "calls_per_repeat": n, "repeats": repeats}
        res["gpu_bound"] = bool(gpu is not None and gpu > 0.7 * h)
        return res


def time_steps(timer: Timer, make_plan, layer_calls, steps: int, repeats: int) -> dict:
    """A simulated model step, repeated: plan = make_plan(); layer_calls[l](plan) for every layer.

    No synchronisation inside a repeat. Per step: plan time, first layer, later layers (mean), and the
    amortised per-layer time; per repeat the mean over steps; reported: the median over repeats.
    """
    nl = len(layer_calls)
    first_fn, rest = layer_calls[0], layer_calls[1:]
    # warm up: compile + one full step
    for _ in range(2):
        p = make_plan()
        for f in layer_calls:
            f(p)
    timer.sync()
    reps = {"plan": [], "first": [], "later": [], "per_layer": [], "per_layer_incl_plan": [], "step": []}
    all_first = []
    for _ in range(repeats):
        timer.sync()
        acc = {k: 0.0 for k in reps}
        for _ in range(steps):
            t0 = time.perf_counter()
            plan = make_plan()
            t1 = time.perf_counter()
            first_fn(plan)
            t2 = time.perf_counter()
            for f in rest:
                f(plan)
            t3 = time.perf_counter()
            all_first.append(t2 - t1)
            acc["plan"] += t1 - t0
            acc["first"] += t2 - t1
            acc["later"] += (t3 - t2) / max(nl - 1, 1)
            acc["per_layer"] += (t3 - t1) / nl
            acc["per_layer_incl_plan"] += (t3 - t0) / nl
            acc["step"] += t3 - t0
        timer.sync()
        for k in reps:
            reps[k].append(acc[k] / steps)
    out = {f"{k}_us": _us(_med(v)) for k, v in reps.items()}
    out["first_us_p50_all_steps"] = _us(_med(all_first))
    out.update(layers=nl, steps_per_repeat=steps, repeats=repeats)
    return out


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------

def cdiv(a, b):
    return -(-a // b)


def build_case(torch, cfg: dict, batch: int, keys: int, layers: int, seed: int = 0) -> dict:
    dev = torch.device(cfg["device"])
    dtype = getattr(torch, cfg["dtype"])
    hq, hkv, d, page = cfg["hq"], cfg["hkv"], cfg["d"], cfg["page"]
    gen = torch.Generator().manual_seed(seed)
    per = cdiv(keys, page)
    n_pages = batch * per + 1
    pt = torch.randperm(n_pages, generator=gen)[: batch * per].reshape(batch, per).to(torch.int32).to(dev)
    lens = torch.randint(max(1, keys // 2), keys + 1, (batch,), generator=gen)
    lens[0] = keys
    torch.manual_seed(seed)
    caches = [(torch.randn(n_pages, page, hkv, d, device=dev, dtype=dtype),
               torch.randn(n_pages, page, hkv, d, device=dev, dtype=dtype)) for _ in range(layers)]
    q = torch.randn(batch, hq, d, generator=gen).to(dtype).to(dev)
    return dict(batch=batch, keys=keys, max_k=keys, page_table=pt, seq_lens=lens.to(torch.int32).to(dev),
                cu=torch.arange(batch + 1, dtype=torch.int32, device=dev), q=q, caches=caches,
                outs=[torch.empty_like(q) for _ in range(layers)], scale=d ** -0.5)


def plan_case_inputs(torch, cfg: dict, seed: int = 1) -> dict:
    """A decode step of plan_batch requests, max context plan_ctx: page table, SGLang pool tables."""
    dev = torch.device(cfg["device"])
    bsz, ctx, page = cfg["plan_batch"], cfg["plan_ctx"], cfg["page"]
    gen = torch.Generator().manual_seed(seed)
    per = ctx // page
    pool_rows = bsz + 16
    pages = torch.randperm(pool_rows * per, generator=gen).reshape(pool_rows, per)
    # SGLang's req_to_token [pool rows, max context] int32 slots; page-aligned allocation
    req_to_token = (pages[:, :, None] * page + torch.arange(page)[None, None, :]).reshape(pool_rows, ctx)
    req_pool_indices = torch.randperm(pool_rows, generator=gen)[:bsz]
    lens = torch.randint(1, ctx + 1, (bsz,), generator=gen)
    lens[0] = ctx
    return dict(batch=bsz, max_k=ctx, seq_lens=lens.to(torch.int32).to(dev), seq_lens_sum=int(lens.sum()),
                page_table=pages[req_pool_indices].to(torch.int32).to(dev),
                cu=torch.arange(bsz + 1, dtype=torch.int32, device=dev),
                req_to_token=req_to_token.to(torch.int32).to(dev), req_pool_indices=req_pool_indices.to(dev))


def layer_spec(core, torch, cfg):
    dtype = getattr(torch, cfg["dtype"])
    return core.LayerSpec(num_q_heads=cfg["hq"], num_kv_heads=cfg["hkv"], head_dim=cfg["d"],
                          scale=cfg["d"] ** -0.5, dtype=dtype, kv_dtype=dtype)


def case_name(b, k):
    return f"B{b}_K{k}"


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


# ------------------------------------------------------------------------------------------------
# one package's measurements (the current one in-process; the old one in the worker)
# ------------------------------------------------------------------------------------------------

def measure_package(torch, cfg: dict, timer: Timer, old: bool) -> dict:
    from vllm_xpu_attn import core
    from vllm_xpu_attn.kernels.api import get_provider

    spec = layer_spec(core, torch, cfg)
    dev, page, nl = cfg["device"], cfg["page"], cfg["layers"]
    runners = [core.LayerRunner(spec, dev, page, override="triton") for _ in range(nl)]
    prov = get_provider("triton")
    res = {"cases": {}, "plan": {}}
    prefix = "old" if old else "ours"
    for b, k in cfg["cases"]:
        c = build_case(torch, cfg, b, k, nl)
        r = res["cases"][case_name(b, k)] = {}
        seq, pt, cu, q, max_k = c["seq_lens"], c["page_table"], c["cu"], c["q"], c["max_k"]
        if old:
            def make_plan():  # the old package's decode planning: one query per sequence over the page table
                return core.StepPlan(core.Mode.DECODE, core.PagedStep(core.cu_seqlens(torch.ones_like(seq)),
                                                                     seq.to(torch.int32), pt.to(torch.int32),
                                                                     1 if b else 0, max_k, page), b)
        else:
            def make_plan():
                return core.plan_step(core.StepInputs(mode=core.Mode.DECODE, seq_lens=seq, max_seqlen_k=max_k,
                                                      num_tokens=b, page_size=page, page_table=pt))
        layer_calls = [functools.partial(lambda plan, rn, kc, vc, o: rn.forward(plan, q, kc, vc, o), rn=runners[i],
                                         kc=c["caches"][i][0], vc=c["caches"][i][1], o=c["outs"][i])
                       for i in range(nl)]
        try:
            r[f"{prefix}_run"] = time_steps(timer, make_plan, layer_calls, cfg["steps"], cfg["repeats"])
            fixed = make_plan()
            r[f"{prefix}_run_fixed_plan"] = timer.measure(
                [functools.partial(f, fixed) for f in layer_calls])
            if not old:
                r["fast_launch"] = fast_launch_state(fixed)
        except Exception as e:  # noqa: BLE001 - report, keep going
            r[f"{prefix}_run"] = {"error": _err(e)}
        calls = [functools.partial(prov.flash_attn_with_kvcache, q, kc, vc, pt, seq, cu, 1,
                                   softmax_scale=c["scale"], out=o)
                 for (kc, vc), o in zip(c["caches"], c["outs"])]
        try:
            r[f"{prefix}_one_call"] = timer.measure(calls)
        except Exception as e:  # noqa: BLE001
            r[f"{prefix}_one_call"] = {"error": _err(e)}
        del c, layer_calls, calls
    if old:
        return res
    # ---- planning a big decode step ----
    p = plan_case_inputs(torch, cfg)
    bsz, pseq, ppt, pmax = p["batch"], p["seq_lens"], p["page_table"], p["max_k"]
    pm = dict(n=cfg["plan_calls"], repeats=cfg["plan_repeats"])
    D = core.Mode.DECODE
    r2t, rpi = p["req_to_token"], p["req_pool_indices"]
    tt = r2t[rpi]
    inp_v = core.StepInputs(mode=D, seq_lens=pseq, max_seqlen_k=pmax, num_tokens=bsz, page_size=page, page_table=ppt)
    items = {
        "plan_step_vllm_style": (lambda: core.plan_step(core.StepInputs(
            mode=D, seq_lens=pseq, max_seqlen_k=pmax, num_tokens=bsz, page_size=page, page_table=ppt)),
            "StepInputs(page_table=...) + plan_step"),
        "plan_step_vllm_adapter_args": (lambda: core.plan_step(core.StepInputs(
            mode=D, seq_lens=pseq, max_seqlen_k=pmax, num_tokens=bsz, page_size=page, page_table=ppt,
            cu_seqlens_q=p["cu"], max_seqlen_q=1)),
            "as the vLLM adapter passes it: + cu_seqlens_q / max_seqlen_q"),
        "plan_step_only_prebuilt_inputs": (lambda: core.plan_step(inp_v), "plan_step on a prebuilt StepInputs"),
        "plan_step_sglang_style": (lambda: core.plan_step(core.StepInputs(
            mode=D, seq_lens=pseq, max_seqlen_k=pmax, num_tokens=bsz, page_size=page, token_table=r2t,
            token_rows=rpi)),
            "StepInputs(token_table=req_to_token, token_rows=req_pool_indices) + plan_step, as the SGLang "
            "adapter's plan() passes them (one gather of the pages' first slots, one shift)"),
        "plan_step_sglang_gathered_rows": (lambda: core.plan_step(core.StepInputs(
            mode=D, seq_lens=pseq, max_seqlen_k=pmax, num_tokens=bsz, page_size=page, token_table=tt)),
            "StepInputs(token_table=req_to_token[req_pool_indices] prebuilt) + plan_step (slice + shift)"),
        "sglang_adapter_translation_old": (lambda: core.plan_step(core.StepInputs(
            mode=D, seq_lens=pseq, max_seqlen_k=pmax, num_tokens=bsz, page_size=page,
            token_table=r2t[rpi])),
            "req_to_token[req_pool_indices] gather + StepInputs + plan_step (the SGLang adapter before token_rows)"),
    }
    for name, (fn, what) in items.items():
        try:
            res["plan"][name] = timer.measure([fn], **pm)
        except Exception as e:  # noqa: BLE001
            res["plan"][name] = {"error": _err(e)}
        res["plan"][name]["what"] = what
    try:  # the first layer's per-step launch build (without the Triton binder, which the first run adds)
        rn = runners[0]
        prov_d = rn.decode_provider
        planned = core.plan_step(inp_v)
        res["plan"]["plan_paged_first_layer"] = timer.measure(
            [lambda: prov_d.arm_paged(planned.main, rn._call)], **pm)
        res["plan"]["plan_paged_first_layer"]["what"] = "provider.arm_paged(plan.main, call): key lookup + TritonLaunch over the kept LaunchConfig"
    except Exception as e:  # noqa: BLE001
        res["plan"]["plan_paged_first_layer"] = {"error": _err(e)}
    return res


def fast_launch_state(plan) -> dict:
    st = []
    for launch in plan.launches.values():
        for key, (attn, merge) in getattr(launch, "fast", {}).items():
            st.append({"armed": attn.armed, "reason": attn.reason, "slow_calls": attn.slow_calls,
                       "merge": None if merge is None else {"armed": merge.armed, "slow_calls": merge.slow_calls}})
    return {"launchers": st}


# ------------------------------------------------------------------------------------------------
# peers
# ------------------------------------------------------------------------------------------------

def sglang_meta_nosync(torch, peers, page_table, seq_lens, seq_lens_sum, block_size, hq, hkv, dv):
    """peers.sglang_decode_metadata without its .item(): the token total is the host int SGLang has
    (ForwardBatch.seq_lens_sum). SGLang fills kv_indices with one Triton gather; this uses torch ops
    (more launches), so it is an approximation of SGLang's per-step host cost, not its code."""
    device = page_table.device
    batch = seq_lens.shape[0]
    lens = seq_lens.to(torch.int64)
    kv_indptr = torch.zeros((batch + 1,), dtype=torch.int32, device=device)
    kv_indptr[1:] = torch.cumsum(lens, dim=0)
    tok_b = torch.repeat_interleave(torch.arange(batch, device=device), lens, output_size=seq_lens_sum)
    pos = torch.arange(seq_lens_sum, device=device) - kv_indptr[:-1].to(torch.int64)[tok_b]
    kv_indices = page_table.to(torch.int64)[tok_b, pos // block_size] * block_size + pos % block_size
    cores = peers._core_count(device)
    mks = peers.SGL_NUM_KV_SPLITS
    attn_logits = torch.empty((batch, hq, mks, dv), dtype=torch.float32, device=device)
    attn_lse = torch.empty((batch, hq, mks), dtype=torch.float32, device=device)
    num_kv_splits = torch.empty((batch,), dtype=torch.int32, device=device)
    uneven = torch.zeros((1,), dtype=torch.int32, device=device)
    if cores <= 0:
        num_kv_splits.fill_(mks)
    else:
        meta = peers._import("sgl_metadata")
        sched = 256 if batch < 256 else peers._next_pow2(batch)
        meta.get_num_kv_splits_triton[(1,)](num_kv_splits, seq_lens, batch, 1, hq, hkv, mks, cores,
                                             MAX_NUM_SEQ=sched, uneven_batch_ptr=uneven)
    return kv_indptr, kv_indices, attn_logits, attn_lse, num_kv_splits, uneven


def measure_peers(torch, cfg: dict, timer: Timer, res: dict) -> dict:
    sys.path.insert(0, HERE)
    try:
        import peers
        peers._import("vllm_unified")
        peers._import("sgl_decode")
    except Exception as e:  # noqa: BLE001
        return {"error": _err(e)}
    info = {"sources": {k: v.get("wheel") for k, v in peers.sources().items()}}
    nl = cfg["layers"]
    hq, hkv, d, page = cfg["hq"], cfg["hkv"], cfg["d"], cfg["page"]
    for b, k in cfg["cases"]:
        c = build_case(torch, cfg, b, k, nl)
        r = res["cases"].setdefault(case_name(b, k), {})
        seq, pt, cu, q, max_k, scale = c["seq_lens"], c["page_table"], c["cu"], c["q"], c["max_k"], c["scale"]
        calls = [functools.partial(peers.vllm_unified_decode, q, kc, vc, pt, seq, cu, 1, max_k, scale, o)
                 for (kc, vc), o in zip(c["caches"], c["outs"])]
        try:
            r["vllm_unified"] = timer.measure(calls)
            rows = peers.VLLM_MIN_LAUNCH_GRID_SIZE_2D // hkv
            r["vllm_unified"]["path"] = "3D + reduce_segments" if b <= rows else "2D"
        except Exception as e:  # noqa: BLE001
            r["vllm_unified"] = {"error": _err(e)}
        try:
            meta = peers.sglang_decode_metadata(pt, seq, page, hq, hkv, d)  # once per step, outside
            pdl = peers._use_pdl(q)  # SGLang decides it once at init (triton_backend.py:339-342)
            calls = [functools.partial(peers.sglang_decode, q, kc, vc, meta, scale, o, use_pdl=pdl)
                     for (kc, vc), o in zip(c["caches"], c["outs"])]
            r["sglang_decode"] = timer.measure(calls)
            r["sglang_decode"]["use_pdl"] = pdl
        except Exception as e:  # noqa: BLE001
            r["sglang_decode"] = {"error": _err(e)}
        try:  # the peers did the same work: their outputs against ours (last layer's tensors)
            from vllm_xpu_attn.kernels.api import get_provider

            (kc, vc), o = c["caches"][-1], c["outs"][-1]
            ref = get_provider("triton").flash_attn_with_kvcache(q, kc, vc, pt, seq, cu, 1, softmax_scale=scale).float()
            peers.vllm_unified_decode(q, kc, vc, pt, seq, cu, 1, max_k, scale, o)
            diff = {"vllm_unified": (o.float() - ref).abs().max().item()}
            peers.sglang_decode(q, kc, vc, meta, scale, o)
            diff["sglang_decode"] = (o.float() - ref).abs().max().item()
            r["max_abs_diff_vs_ours"] = diff
        except Exception as e:  # noqa: BLE001
            r["max_abs_diff_vs_ours"] = {"error": _err(e)}
        del c, calls
    p = plan_case_inputs(torch, cfg)
    pm = dict(n=cfg["plan_calls"], repeats=cfg["plan_repeats"])
    res["plan"]["vllm_triton_builder"] = {
        "host_us": 0.0, "applicable": False,
        "what": "vLLM's TritonAttentionMetadataBuilder passes CommonAttentionMetadata's tensors through "
                "(its 3D-softmax scratch is allocated once in __init__): no per-step work to time"}
    try:
        r = res["plan"]["sglang_decode_metadata_peers"] = timer.measure(
            [lambda: peers.sglang_decode_metadata(p["page_table"], p["seq_lens"], page, hq, hkv, d)], **pm)
        r.update(syncs=True, what="benchmarks/peers.py sglang_decode_metadata: kv_indptr/kv_indices by torch ops "
                                  "+ get_num_kv_splits_triton; SYNCS (lens.sum().item()), so its host time "
                                  "includes waiting for the GPU; SGLang itself does not sync here")
    except Exception as e:  # noqa: BLE001
        res["plan"]["sglang_decode_metadata_peers"] = {"error": _err(e)}
    try:
        r = res["plan"]["sglang_decode_metadata_nosync"] = timer.measure(
            [lambda: sglang_meta_nosync(torch, peers, p["page_table"], p["seq_lens"], p["seq_lens_sum"], page,
                                        hq, hkv, d)], **pm)
        r.update(syncs=False, what="the same without the sync (host seq_lens_sum, as SGLang has it); torch ops "
                                   "where SGLang uses one Triton gather: an approximation")
    except Exception as e:  # noqa: BLE001
        res["plan"]["sglang_decode_metadata_nosync"] = {"error": _err(e)}
    return info


# ------------------------------------------------------------------------------------------------
# old package, in a subprocess
# ------------------------------------------------------------------------------------------------

def run_old(cfg: dict, out_dir: str) -> dict:
    if not old_ready():
        why = export_old()
        if why:
            return {"error": f"old package missing at {OLD_DIR} and {why}; run `python3 benchmarks/bench_host_cost.py "
                             f"--prep` where the git history is, and carry benchmarks/.peers"}
    path = os.path.join(out_dir, ".old_worker.json")
    env = dict(os.environ, PYTHONPATH=OLD_DIR)  # only the old package: no clash with ours
    cmd = [sys.executable, os.path.abspath(__file__), "--old-worker", path, "--cfg", json.dumps(cfg)]
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.isfile(path):
        return {"error": f"old worker exit {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}"}
    with open(path) as f:
        res = json.load(f)
    os.remove(path)
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def old_worker(path: str, cfg: dict) -> None:
    if cfg["cpu"]:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    import vllm_xpu_attn

    where = os.path.abspath(vllm_xpu_attn.__file__)
    if not where.startswith(os.path.abspath(OLD_DIR)):
        raise SystemExit(f"old worker imported {where}, not the package under {OLD_DIR}")
    timer = Timer(torch, cfg)
    res = measure_package(torch, cfg, timer, old=True)
    res["package"] = where
    with open(path, "w") as f:
        json.dump(res, f)


# ------------------------------------------------------------------------------------------------
# per-feature layer cost: plain vs sinks vs ALiBi vs FP8 KV, this package vs the one before
# ------------------------------------------------------------------------------------------------

def measure_features(torch, cfg: dict, timer: Timer) -> dict:
    """A simulated decode step (plan_step + every layer's LayerRunner.forward) per feature and case.

    Works on either interface: this one binds each layer's sinks / FP8 descales once (LayerRunner.bind);
    the package before passed them to every forward call (what the engines' adapters did).
    """
    from vllm_xpu_attn import core

    dtype = getattr(torch, cfg["dtype"])
    dev, page, nl, hq = cfg["device"], cfg["page"], cfg["layers"], cfg["hq"]
    binds = hasattr(core.LayerRunner, "bind")
    res = {}
    for feature in FEATURES:
        kw = dict(num_q_heads=hq, num_kv_heads=cfg["hkv"], head_dim=cfg["d"], scale=cfg["d"] ** -0.5, dtype=dtype,
                  kv_dtype=torch.float8_e4m3fn if feature == "fp8" else dtype)
        if feature == "sinks":
            kw["has_sinks"] = True
        if feature == "alibi":
            kw["alibi_slopes"] = tuple(2.0 ** (-8.0 * (h + 1) / hq) for h in range(hq))
        spec = core.LayerSpec(**kw)
        runners = [core.LayerRunner(spec, dev, page, override="triton") for _ in range(nl)]
        for b, k in cfg["feature_cases"]:
            c = build_case(torch, cfg, b, k, nl)
            if feature == "fp8":
                c["caches"] = [(kc.to(torch.float8_e4m3fn), vc.to(torch.float8_e4m3fn)) for kc, vc in c["caches"]]
            per_layer = []
            for i in range(nl):
                extra = {}
                if feature == "sinks":
                    extra["sinks"] = torch.randn(hq, device=dev, dtype=torch.float32)
                if feature == "fp8":
                    extra["k_descale"] = torch.full((1,), 0.5, device=dev, dtype=torch.float32)
                    extra["v_descale"] = torch.full((1,), 0.25, device=dev, dtype=torch.float32)
                if binds:
                    runners[i].bind(**extra)
                    extra = {}
                per_layer.append(extra)
            seq, pt, max_k = c["seq_lens"], c["page_table"], c["max_k"]

            def make_plan():
                return core.plan_step(core.StepInputs(mode=core.Mode.DECODE, seq_lens=seq, max_seqlen_k=max_k,
                                                      num_tokens=b, page_size=page, page_table=pt))

            layer_calls = [functools.partial(lambda plan, rn, kc, vc, o, ex: rn.forward(plan, c["q"], kc, vc, o, **ex),
                                             rn=runners[i], kc=c["caches"][i][0], vc=c["caches"][i][1],
                                             o=c["outs"][i], ex=per_layer[i]) for i in range(nl)]
            try:
                res[f"{feature}/{case_name(b, k)}"] = time_steps(timer, make_plan, layer_calls, cfg["steps"],
                                                                 cfg["repeats"])
            except Exception as e:  # noqa: BLE001 - report, keep going
                res[f"{feature}/{case_name(b, k)}"] = {"error": _err(e)}
            del c, layer_calls
    return res


def feature_worker(path: str, cfg: dict) -> None:
    if cfg["cpu"]:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    import vllm_xpu_attn

    timer = Timer(torch, cfg)
    res = {"package": os.path.abspath(vllm_xpu_attn.__file__), "results": measure_features(torch, cfg, timer)}
    with open(path, "w") as f:
        json.dump(res, f)


def _export(ref: str, dest: str) -> None:
    if os.path.isfile(os.path.join(dest, "vllm_xpu_attn", "__init__.py")):
        return
    blob = subprocess.run(["git", "-C", REPO, "archive", ref, "vllm_xpu_attn"], check=True, capture_output=True).stdout
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(dest)  # noqa: S202 - our own repository's archive


def run_features(args) -> None:
    """This tree and ``--before`` in alternating subprocesses (same machine, same run), per-layer host cost
    of each feature; ratios: feature / plain (same package, same round) and this plain / before's plain."""
    cfg = make_cfg(args.cpu)
    cfg["feature_cases"] = [[1, 512], [8, 512]] if not args.cpu else [[2, 40]]
    before_dir = os.path.join(PEERS_DIR, f"vxa_{args.before}")
    _export(args.before, before_dir)
    out_dir = args.out or os.environ.get("OUT") or os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    packages = {"this": REPO, "before": before_dir}
    rounds = {name: [] for name in packages}
    for r in range(args.rounds):
        for name in (("this", "before") if r % 2 == 0 else ("before", "this")):
            path = os.path.join(out_dir, f".feature_worker_{name}.json")
            env = dict(os.environ, PYTHONPATH=packages[name])
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--feature-worker", path, "--cfg",
                                   json.dumps(cfg)], env=env, capture_output=True, text=True, cwd=out_dir)
            if proc.returncode != 0:
                raise SystemExit(f"{name} worker exit {proc.returncode}: {(proc.stderr or proc.stdout)[-3000:]}")
            with open(path) as f:
                rounds[name].append(json.load(f))
            os.remove(path)
            print(f"  round {r} {name}: {rounds[name][-1]['package']}", flush=True)
    field = "per_layer_incl_plan_us"
    summary = {}
    for case in cfg["feature_cases"]:
        cname = case_name(*case)
        for name in packages:
            for feature in FEATURES:
                vals = [rr["results"][f"{feature}/{cname}"].get(field) for rr in rounds[name]]
                ratios = [rr["results"][f"{feature}/{cname}"].get(field) / rr["results"][f"plain/{cname}"][field]
                          for rr in rounds[name] if rr["results"][f"plain/{cname}"].get(field)]
                summary[f"{name}/{feature}/{cname}"] = {"us": vals, "vs_plain": [round(x, 3) for x in ratios]}
        this_plain = [rr["results"][f"plain/{cname}"][field] for rr in rounds["this"]]
        before_plain = [rr["results"][f"plain/{cname}"][field] for rr in rounds["before"]]
        summary[f"plain_this_vs_before/{cname}"] = round(statistics.median(this_plain) /
                                                          statistics.median(before_plain), 3)
    result = {"what": "per-layer host cost of a 32-layer decode step incl. plan_step (us), per feature; "
                      f"this tree vs git {args.before}, {args.rounds} alternating rounds",
              "field": field, "config": cfg, "summary": summary, "rounds": rounds}
    path = os.path.join(out_dir, "host_cost_features.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for k, v in summary.items():
        print(f"  {k}: {v}")
    plot_features(result, os.path.join(out_dir, "host_cost_features.png"))
    print(f"wrote {path}")


def plot_features(result: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    cases = [case_name(*c) for c in result["config"]["feature_cases"]]
    fig, axes = plt.subplots(1, len(cases), figsize=(5 * len(cases), 3.5), squeeze=False)
    for ax, cname in zip(axes[0], cases):
        for j, name in enumerate(("before", "this")):
            ys = [statistics.median(result["summary"][f"{name}/{f}/{cname}"]["us"]) for f in FEATURES]
            ax.bar([i + 0.4 * j for i in range(len(FEATURES))], ys, width=0.4, label=name)
        ax.set_xticks([i + 0.2 for i in range(len(FEATURES))], FEATURES)
        ax.set_title(f"decode {cname}: host us / layer (incl. plan)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------

def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


BARS = [  # label, case key, field
    ("ours run\n(later layers)", "ours_run", "later_us"),
    ("ours run\n(first layer)", "ours_run", "first_us"),
    ("ours run\n(amortised)", "ours_run", "per_layer_us"),
    ("ours\none-call", "ours_one_call", "host_us"),
    ("old\none-call", "old_one_call", "host_us"),
    ("old run\n(per layer)", "old_run", "per_layer_us"),
    ("vLLM\nunified", "vllm_unified", "host_us"),
    ("SGLang\ndecode", "sglang_decode", "host_us"),
]
PLAN_BARS = [
    ("plan_step\nvLLM-style", "plan_step_vllm_style"),
    ("plan_step\nSGLang-style", "plan_step_sglang_style"),
    ("plan_step\n(gathered rows)", "plan_step_sglang_gathered_rows"),
    ("old SGLang adapter\n(gather+plan)", "sglang_adapter_translation_old"),
    ("arm_paged\n(1st layer)", "plan_paged_first_layer"),
    ("SGLang meta\n(no sync)", "sglang_decode_metadata_nosync"),
    ("SGLang meta\n(peers, syncs)", "sglang_decode_metadata_peers"),
]


def summarize(result: dict) -> list[str]:
    lines = []
    for cname, r in result["cases"].items():
        parts = []
        for label, key, field in BARS:
            v = _get(r, key, field)
            g = _get(r, key, "gpu_us")
            if key == "ours_run":
                g = _get(r, "ours_run_fixed_plan", "gpu_us")
            elif key == "old_run":
                g = _get(r, "old_run_fixed_plan", "gpu_us")
            err = _get(r, key, "error")
            txt = "err" if err else ("-" if v is None else f"{v:.1f}")
            if g is not None and not err:
                txt += f" (gpu {g:.1f})"
            parts.append(f"{label.replace(chr(10), ' ')}={txt}")
        lines.append(f"  {cname}: " + ", ".join(parts))
    pl = result["plan"]
    lines.append(f"  plan @ B={result['config']['plan_batch']}, ctx {result['config']['plan_ctx']}: " + ", ".join(
        f"{k}={'err' if _get(v, 'error') else _get(v, 'host_us')}" for k, v in pl.items()))
    return lines


def plot(result: dict, path: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:  # noqa: BLE001
        return f"plot skipped: matplotlib not importable ({type(e).__name__})"
    cases = list(result["cases"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(17, 6), gridspec_kw={"width_ratios": [3, 1.6]})
    w = 0.8 / max(len(cases), 1)
    for j, cname in enumerate(cases):
        vals = [_get(result["cases"][cname], key, field) or 0.0 for _, key, field in BARS]
        xs = [i + (j - (len(cases) - 1) / 2) * w for i in range(len(BARS))]
        ax1.bar(xs, vals, w, label=cname)
    ax1.axhline(TARGETS_US["per_layer_host"], color="k", ls="--", lw=1, label="target 20 us / layer")
    ax1.set_xticks(range(len(BARS)))
    ax1.set_xticklabels([b[0] for b in BARS], fontsize=8)
    ax1.set_ylabel("host us per call / layer")
    ax1.set_title("decode host cost per layer call (lower is better)")
    ax1.legend(fontsize=8)
    pv = [_get(result["plan"], key, "host_us") or 0.0 for _, key in PLAN_BARS]
    ax2.bar(range(len(PLAN_BARS)), pv, color="tab:purple")
    ax2.axhline(TARGETS_US["plan_step_b256"], color="k", ls="--", lw=1, label="target 30 us")
    ax2.set_xticks(range(len(PLAN_BARS)))
    ax2.set_xticklabels([b[0] for b in PLAN_BARS], fontsize=7, rotation=35, ha="right")
    ax2.set_title(f"step planning, decode B={result['config']['plan_batch']}")
    ax2.set_ylabel("host us per step")
    ax2.legend(fontsize=8)
    dev = result["meta"]["device"]
    fig.suptitle(f"bench_host_cost: {dev}, torch {result['meta']['torch']}, triton {result['meta']['triton']}"
                 f"{'  (CPU interpreter dry run: figures meaningless)' if result['config']['cpu'] else ''}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot -> {path}"


def verdicts(result: dict) -> dict:
    out = {}
    for cname, r in result["cases"].items():
        per_layer = _get(r, "ours_run", "per_layer_us")
        out[f"{cname}_per_layer_host_le_20us"] = None if per_layer is None else per_layer <= TARGETS_US["per_layer_host"]
        first = _get(r, "ours_run", "first_us")
        out[f"{cname}_first_layer_host_le_20us"] = None if first is None else first <= TARGETS_US["per_layer_host"]
    v = _get(result["plan"], "plan_step_vllm_style", "host_us")
    out["plan_step_vllm_style_le_30us"] = None if v is None else v <= TARGETS_US["plan_step_b256"]
    v = _get(result["plan"], "plan_step_sglang_style", "host_us")
    out["plan_step_sglang_style_le_30us"] = None if v is None else v <= TARGETS_US["plan_step_b256"]
    return out


def main() -> None:
    args = parse_args()
    if args.feature_worker:
        feature_worker(args.feature_worker, json.loads(args.cfg))
        return
    if args.features:
        run_features(args)
        return
    if args.old_worker:
        old_worker(args.old_worker, json.loads(args.cfg))
        return
    if args.prep:
        why = export_old()
        if why:
            raise SystemExit(why)
        return
    t_start = time.time()
    cfg = make_cfg(args.cpu)
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
        import warnings

        warnings.filterwarnings("ignore", category=RuntimeWarning)  # interpreter numpy noise
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    import torch
    import triton

    from vllm_xpu_attn.kernels.providers.triton.launch import fast_launch_supported

    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available; use --cpu for the dry check")
    out_dir = args.out or os.environ.get("OUT") or os.path.join(HERE, "out")
    os.makedirs(out_dir, exist_ok=True)
    ok, why = fast_launch_supported()
    meta = {
        "device": torch.cuda.get_device_name() if not args.cpu else f"cpu ({platform.processor() or platform.machine()})"
                  + ", Triton interpreter",
        "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
        "cuda": torch.version.cuda, "fast_launch_supported": ok, "fast_launch_reason": why,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
        "method": "host: perf_counter around N back-to-back calls, sync outside, median over repeats; gpu: CUDA "
                  "events around N calls queued behind torch.cuda._sleep, / N; latency: one call + sync, median",
        "old_reference_us": OLD_REFERENCE_US, "targets_us": TARGETS_US, "old_commit": OLD_COMMIT,
    }
    print(f"bench_host_cost: {meta['device']}, torch {meta['torch']}, triton {meta['triton']}, "
          f"FastLaunch: {ok} ({why})", flush=True)
    timer = Timer(torch, cfg)
    result = {"meta": meta, "config": cfg}
    t0 = time.time()
    result.update(measure_package(torch, cfg, timer, old=False))
    print(f"  ours: {time.time() - t0:.1f}s", flush=True)
    if not args.no_peers:
        t0 = time.time()
        info = measure_peers(torch, cfg, timer, result)
        result["meta"]["peers"] = info
        print(f"  peers: {time.time() - t0:.1f}s{' ' + info['error'] if 'error' in info else ''}", flush=True)
    if not args.no_old:
        t0 = time.time()
        old = run_old(cfg, out_dir)
        result["meta"]["old"] = {k: old[k] for k in ("package", "wall_s", "error") if k in old}
        for cname, r in old.get("cases", {}).items():
            result["cases"].setdefault(cname, {}).update(r)
        result["plan"].update(old.get("plan", {}))
        print(f"  old ({OLD_COMMIT}): {time.time() - t0:.1f}s{' ' + old['error'] if 'error' in old else ''}",
              flush=True)
    result["verdicts"] = verdicts(result)
    result["verdicts"]["note"] = ("per_layer = ours_run.per_layer_us: LayerRunner.forward amortised over the step's "
                                  "layers, first-layer bind included, plan_step excluded (ours_run.plan_us, and "
                                  "per_layer_incl_plan_us); plan = plan_step_*_style.host_us at the plan batch")
    result["meta"]["wall_s"] = round(time.time() - t_start, 1)
    path = os.path.join(out_dir, "host_cost.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(summarize(result)))
    print("  verdicts: " + ", ".join(f"{k}={v}" for k, v in result["verdicts"].items()))
    try:
        msg = plot(result, os.path.join(out_dir, "host_cost.png"))
    except Exception as e:  # noqa: BLE001 - the JSON is written; a plot problem must not hide it
        msg = f"plot failed: {_err(e)}"
    print(f"wrote {path} in {result['meta']['wall_s']}s; {msg}")


if __name__ == "__main__":
    main()
