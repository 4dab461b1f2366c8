"""vLLM FULL CUDA-graph capture and replay of XpuAttnMetadataBuilder + XpuAttnImpl, as vLLM 0.32 runs it.

    PYTHONPATH=.:tests/gpu/vllm_stub python tests/gpu/gpu_vllm_graphs.py          # H200: bf16, graphs
    PYTHONPATH=.:tests/gpu/vllm_stub python tests/gpu/gpu_vllm_graphs.py --cpu    # dry check, no graph

Prints one JSON object (also written to $OUT/vllm_graphs.json when OUT is set); exit status 1 on any
failure. Named gpu_* so pytest never collects it. Needs no vLLM: the stand-in package
tests/gpu/vllm_stub carries the adapter (its README).

What it does, per config (page 64 and page 16; one KV-cache group, one builder shared by 4 layers:
plain Hq=32/Hkv=8/D=128, sliding_window=256, sinks ([Hq] fp32), logits_soft_cap=30; each layer has its
own LBNHC cache tensor):

* runner-like persistent buffers (query_start_loc, seq_lens, block table, slot_mapping) and static
  per-layer q/k/v inputs and outputs, sliced per graph as vLLM's V2 runner slices them;
* per graph shape (uniform decode q=1 with 32/8/1 requests, spec-decode verify q=4 with 8/1
  requests; captured largest first into one shared memory pool, like vLLM): capture-time metadata
  (every request real with seq_len = q, block rows 0, slot_mapping
  all -1, max_seq_len = max_model_len, max_query_len = q), builder.build_for_cudagraph_capture ->
  one eager warm-up forward (do_kv_cache_update + forward of every layer), a second
  build_for_cudagraph_capture, then torch.cuda.graph capture of the same body under
  torch.cuda.set_sync_debug_mode("error");
* replays (interleaved over all graphs of the config) on new data per 2c: n_real <= num_reqs real
  requests (padding included), wide random contexts (up to ~3000 keys: split-K decode), distinct
  random pages (never page 0 nor the last page), history K/V written eagerly through
  impl.do_kv_cache_update, runner buffers rewritten in place (padded: query_start_loc repeats the real
  token count, seq_len 0, block row 0, slot -1), builder.build() called and its result discarded,
  graph.replay(). Padded q/k/v input rows are NaN, output buffers are filled with a sentinel first.
* checks: every real output row of every layer against an independent fp32 naive attention written
  here; padded output rows still hold the sentinel; guard pages (the page before and after the cache
  tensor, cache page 0 and the last cache page) unchanged; plan tensors are views of the runner
  buffers; build() does not synchronise (sync-debug "warn", counted).

If capture of the full body fails (e.g. a host sync inside do_kv_cache_update or forward), the error is
recorded with its location and the shape is captured again with the KV update moved out of the graph
("full_kv_update_eager"), then eagerly ("eager"), so the rest is still checked; "ok" stays false.

--cpu: float32, the reference provider (the registry's CPU choice), tiny sizes, no graph: the same body
runs eagerly with the capture-time metadata object reused for every replay, which is what a graph
replay amounts to (the plan holds only views of the persistent buffers).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import traceback
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
for p in (os.path.join(HERE, "vllm_stub"), ROOT):  # the PYTHONPATH the docstring names, if not given
    if p not in sys.path:
        sys.path.insert(0, p)

import torch  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--cpu", action="store_true", help="dry check on the CPU: fp32, reference provider, no graph")
ap.add_argument("--eager", action="store_true", help="GPU without graphs (the CPU path on the GPU)")
ap.add_argument(
    "--kv-update-eager",
    action="store_true",
    help="capture only forward(); do_kv_cache_update of the new tokens runs eagerly before replay",
)
ap.add_argument("--replays", type=int, default=None, help="replays per graph (default 20 GPU, 4 CPU)")
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--allow-padded-writes", action="store_true", help="report padded-row writes but do not fail on them")
args = ap.parse_args()

import vllm  # noqa: E402  (the stand-in)

if not getattr(vllm, "IS_VLLM_STUB", False):
    raise SystemExit("gpu_vllm_graphs: expected the vLLM stand-in (PYTHONPATH=.:tests/gpu/vllm_stub)")
if args.cpu:
    from vllm.platforms import current_platform

    current_platform.device_type = current_platform.device_name = "cpu"  # choose CPU providers even on a GPU box
elif not torch.cuda.is_available():
    raise SystemExit("gpu_vllm_graphs: no CUDA device; use --cpu for the dry check")

from vllm.config import (  # noqa: E402
    CacheConfig,
    CompilationConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
    set_current_vllm_config,
)
from vllm.v1.attention.backend import CommonAttentionMetadata  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402

from vllm_xpu_attn.vllm.backend import XpuAttnImpl, XpuAttnMetadataBuilder  # noqa: E402

CPU = args.cpu
DEV = torch.device("cpu" if CPU else "cuda")
USE_GRAPH = not (CPU or args.eager)
if CPU:
    DTYPE, TOL, RTOL = torch.float32, 1e-4, 1e-4
    HQ, HKV, D = 8, 2, 32
    MAX_LEN, MAX_CTX, WINDOW = 128, 100, 16
    PAGES = (16, 4)
    DECODE_REQS, VERIFY_REQS = (8, 4, 1), (4, 1)
    BUDGET = 8 * 100
    REPLAYS = args.replays or 4
else:
    DTYPE, TOL, RTOL = torch.bfloat16, 2e-2, 1e-2  # pass: |out - ref| <= TOL + RTOL * |ref| (bf16 output ulp)
    HQ, HKV, D = 32, 8, 128
    MAX_LEN, MAX_CTX, WINDOW = 4096, 3000, 256
    PAGES = (64, 16)
    DECODE_REQS, VERIFY_REQS = (32, 8, 1), (8, 1)
    BUDGET = 40000  # history tokens per replay (keeps caches + saved history ~1.5 GB in all)
    REPLAYS = args.replays or 20
SOFTCAP = 30.0
VERIFY_Q = 4
SENTINEL = 123.0  # exact in bf16
MAX_REQS = max(DECODE_REQS + VERIFY_REQS)
MAX_TOKENS = max(max(DECODE_REQS), max(VERIFY_REQS) * VERIFY_Q)
KINDS = ("plain", "sliding", "sinks", "softcap")
torch.manual_seed(args.seed)
rng = random.Random(args.seed)


def log(msg: str) -> None:
    print(f"[gpu_vllm_graphs {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def where(exc: BaseException) -> str:
    """The innermost frame of ``exc`` inside vllm_xpu_attn (else the innermost), as file:line fn: code."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "vllm_xpu_attn" in f.filename] or frames
    f = ours[-1] if ours else None
    loc = f"{os.path.relpath(f.filename, ROOT)}:{f.lineno} {f.name}: {f.line}" if f else "?"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} @ {loc}"


# ---------------------------------------------------------------------------------------------------
# the naive oracle (independent of the adapter and its reference provider)
# ---------------------------------------------------------------------------------------------------
def naive_attention(q, k, v, scale, window=None, sinks=None, softcap=None):
    """q [Lq, Hq, D], k/v [Lk, Hkv, D] (any float dtype) -> [Lq, Hq, D] fp32.

    Causal, queries bottom-right aligned (query i at position Lk - Lq + i). vLLM's sliding_window counts
    the query itself: position p sees keys in (p - window, p]. sinks [Hq]: an extra logit per head in the
    softmax denominator (no value). softcap: s = cap * tanh(s / cap) on the scaled scores, before masking.
    """
    q, k, v = q.float(), k.float(), v.float()
    lq, hq, _ = q.shape
    lk, hkv, _ = k.shape
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    qpos = torch.arange(lq, device=q.device)[:, None] + (lk - lq)
    kpos = torch.arange(lk, device=q.device)[None, :]
    mask = kpos <= qpos
    if window:
        mask &= kpos > qpos - window
    s = s.masked_fill(~mask[None], float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.float()[:, None, None].expand(hq, lq, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("hqk,khd->qhd", p, v)


# ---------------------------------------------------------------------------------------------------
# one vLLM config: stand-in VllmConfig, one KV-cache group (one builder), four layers
# ---------------------------------------------------------------------------------------------------
class Setup:
    def __init__(self, page: int):
        self.page = page
        capture_sizes = sorted({n for n in DECODE_REQS} | {n * VERIFY_Q for n in VERIFY_REQS})
        self.cfg = VllmConfig(
            model_config=ModelConfig(
                dtype=DTYPE, max_model_len=MAX_LEN, num_attention_heads=HQ, num_kv_heads=HKV, head_size=D
            ),
            cache_config=CacheConfig(block_size=page),
            scheduler_config=SchedulerConfig(max_num_seqs=MAX_REQS, max_num_batched_tokens=max(2048, MAX_TOKENS)),
            compilation_config=CompilationConfig(cudagraph_capture_sizes=capture_sizes),
        )
        self.spec = FullAttentionSpec(block_size=page, num_kv_heads=HKV, head_size=D, dtype=DTYPE)
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(len(KINDS))]
        i32 = dict(dtype=torch.int32, device=DEV)
        # the runner's persistent buffers (V2: InputBuffers / BlockTables), int32 like vLLM's
        self.max_pages_per_req = -(-MAX_LEN // page)
        self.qsl = torch.zeros(MAX_REQS + 1, **i32)
        self.seq = torch.zeros(MAX_REQS, **i32)
        self.bt = torch.zeros(MAX_REQS, self.max_pages_per_req, **i32)
        self.slots = torch.full((MAX_TOKENS,), -1, dtype=torch.int64, device=DEV)
        # pool: every replay's pages fit; page 0 (NULL_BLOCK_ID) and the last page are never handed out
        self.num_blocks = 2 + -(-BUDGET // page) + MAX_REQS * (1 + -(-VERIFY_Q // page))
        self.sinks = torch.nn.Parameter(
            torch.linspace(-2.0, 8.0, HQ)[torch.randperm(HQ)].to(device=DEV, dtype=torch.float32), requires_grad=False
        )
        self.layer = types.SimpleNamespace(_k_scale=torch.ones(1, device=DEV), _v_scale=torch.ones(1, device=DEV))
        with set_current_vllm_config(self.cfg):
            self.builder = XpuAttnMetadataBuilder(self.spec, self.names, self.cfg, DEV)  # one per group
            common = dict(num_heads=HQ, head_size=D, scale=D**-0.5, num_kv_heads=HKV)
            self.impls = {
                "plain": XpuAttnImpl(**common),
                "sliding": XpuAttnImpl(**common, sliding_window=WINDOW),
                "sinks": XpuAttnImpl(**common, sinks=self.sinks),
                "softcap": XpuAttnImpl(**common, logits_soft_cap=SOFTCAP),
            }
        self.oracle = {
            "plain": {},
            "sliding": {"window": WINDOW},
            "sinks": {"sinks": self.sinks},
            "softcap": {"softcap": SOFTCAP},
        }
        self.q_gain = {"plain": 1.0, "sliding": 1.0, "sinks": 1.0, "softcap": 4.0}  # make the cap bite
        # per layer: raw cache with a guard page on each side; vLLM's logical [blocks, Hkv, page, 2D] stored
        # LBNHC ([blocks, page, Hkv, 2D] in memory)
        self.raw, self.kv, self.q_in, self.k_in, self.v_in, self.out = {}, {}, {}, {}, {}, {}
        for kind in KINDS:
            raw = torch.randn(self.num_blocks + 2, page, HKV, 2 * D, dtype=DTYPE, device=DEV)
            self.raw[kind] = raw
            self.kv[kind] = raw[1:-1].transpose(1, 2)
            self.q_in[kind] = torch.zeros(MAX_TOKENS, HQ, D, dtype=DTYPE, device=DEV)
            self.k_in[kind] = torch.zeros(MAX_TOKENS, HKV, D, dtype=DTYPE, device=DEV)
            self.v_in[kind] = torch.zeros(MAX_TOKENS, HKV, D, dtype=DTYPE, device=DEV)
            self.out[kind] = torch.zeros(MAX_TOKENS, HQ, D, dtype=DTYPE, device=DEV)
        self.guard_idx = [0, 1, self.num_blocks, self.num_blocks + 1]  # raw pages: guard, page 0, last, guard
        self.guard_ref = {k: self.raw[k][self.guard_idx].clone() for k in KINDS}
        self.pool = torch.cuda.graph_pool_handle() if USE_GRAPH else None

    def providers(self) -> dict:
        return {k: impl.runner.providers_used() for k, impl in self.impls.items()}

    def cam(
        self, num_reqs: int, q: int, max_query_len: int, max_seq_len: int, seq_cpu: list[int], qsl_cpu: list[int]
    ) -> CommonAttentionMetadata:
        """CommonAttentionMetadata as V2's prepare_attn builds it: slices of the persistent buffers."""
        t = num_reqs * q
        return CommonAttentionMetadata(
            query_start_loc=self.qsl[: num_reqs + 1],
            query_start_loc_cpu=torch.tensor(qsl_cpu, dtype=torch.int32),
            seq_lens=self.seq[:num_reqs],
            num_reqs=num_reqs,
            num_actual_tokens=t,
            max_query_len=max_query_len,
            max_seq_len=max_seq_len,
            block_table_tensor=self.bt[:num_reqs],
            slot_mapping=self.slots[:t],
            seq_lens_cpu_upper_bound=torch.tensor(seq_cpu, dtype=torch.int32),
        )

    def body(self, md, num_tokens: int, kv_in_graph: bool = True) -> None:
        """What the captured model forward runs per attention layer: the KV write, then attention."""
        for kind in KINDS:
            impl = self.impls[kind]
            q, k, v = self.q_in[kind][:num_tokens], self.k_in[kind][:num_tokens], self.v_in[kind][:num_tokens]
            if kv_in_graph:
                impl.do_kv_cache_update(self.layer, k, v, self.kv[kind], md.slot_mapping)
            impl.forward(self.layer, q, k, v, self.kv[kind], md, self.out[kind][:num_tokens])


def counted_syncs(fn):
    """Run fn() with CUDA sync-debug 'warn'; return (result, number of synchronising calls)."""
    if CPU:
        return fn(), 0
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            res = fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # (torch's one-time notice that sync-debug mode is a prototype is not a synchronisation)
    msgs = [str(x.message) for x in w if "synchroniz" in str(x.message) and "prototype feature" not in str(x.message)]
    if msgs:
        SYNC_SITES.extend(f"{m[:200]} @ {x.filename}:{x.lineno}" for m, x in zip(msgs, w))
    return res, len(msgs)


SYNC_SITES: list[str] = []  # where build() synchronised (reported)


# ---------------------------------------------------------------------------------------------------
# one graph shape
# ---------------------------------------------------------------------------------------------------
class Shape:
    def __init__(self, s: Setup, mode: str, num_reqs: int):
        self.s, self.mode, self.num_reqs = s, mode, num_reqs
        self.q = 1 if mode == "decode" else VERIFY_Q
        self.num_tokens = num_reqs * self.q
        self.res = {
            "config": f"page{s.page}",
            "mode": mode,
            "q": self.q,
            "num_reqs": num_reqs,
            "num_tokens": self.num_tokens,
            "page_size": s.page,
            "replays": 0,
            "graph": None,
            "capture_errors": [],
            "build_host_syncs": 0,
            "n_real_seen": [],
            "max_ctx_seen": 0,
            "max_abs_err": {k: 0.0 for k in KINDS},
            "tol_ratio": {k: 0.0 for k in KINDS},
            "feature_effect": {k: 0.0 for k in KINDS[1:]},
            "padded_row_violations": 0,
            "cache_violations": 0,
            "replay_errors": [],
        }
        self.graph = None
        self.md = None
        self.kv_in_graph = True

    # -- capture (2b) --------------------------------------------------------------------------------
    def capture_metadata(self) -> CommonAttentionMetadata:
        s, n, q, t = self.s, self.num_reqs, self.q, self.num_tokens
        qsl = list(range(0, t + 1, q)) + [t] * (MAX_REQS - n)  # make_dummy: padded entries = num_tokens
        s.qsl.copy_(torch.tensor(qsl, dtype=torch.int32))
        s.seq.copy_(torch.tensor([q] * n + [0] * (MAX_REQS - n), dtype=torch.int32))  # seq_len = query_len
        s.bt[:n].zero_()  # input_block_tables[:num_reqs].zero_(): all block 0
        s.slots.fill_(-1)  # the whole slot buffer is PAD_SLOT_ID
        for kind in KINDS:  # capture-time inputs: whatever the dummy run holds (finite)
            s.q_in[kind].normal_()
            s.k_in[kind].normal_()
            s.v_in[kind].normal_()
        # for_capture=True: max_seq_len = max_model_len, max_query_len = q (the uniform token count)
        return s.cam(n, q, q, MAX_LEN, [q] * n, qsl[: n + 1])

    def capture(self, how: str) -> None:
        s = self.s
        cam = self.capture_metadata()
        md1, n1 = counted_syncs(lambda: s.builder.build_for_cudagraph_capture(cam))
        s.body(md1, self.num_tokens)  # warm-up run (vLLM: warmup=True + eager run), compiles Triton
        if not CPU:
            torch.cuda.synchronize()
        md2, n2 = counted_syncs(lambda: s.builder.build_for_cudagraph_capture(cam))  # "fresh attention state"
        self.res["build_host_syncs"] += n1 + n2
        self.kv_in_graph = how == "full"
        if how == "eager":
            s.body(md2, self.num_tokens, True)  # the Python path runs once at "capture", as in a capture
            self.graph, self.md = None, md2
            return
        g = torch.cuda.CUDAGraph()
        inner: list[BaseException] = []
        stream = torch.cuda.Stream() if self.res["capture_errors"] else None  # fresh stream after a failure
        try:
            with torch.cuda.graph(g, pool=s.pool, stream=stream):
                torch.cuda.set_sync_debug_mode("error")
                try:
                    s.body(md2, self.num_tokens, self.kv_in_graph)
                except BaseException as e:  # noqa: BLE001
                    inner.append(e)
                    raise
                finally:
                    torch.cuda.set_sync_debug_mode("default")
        except Exception as e:  # report the body's error, not capture_end's follow-up error
            raise (inner[0] if inner else e)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
        self.graph, self.md = g, md2

    def capture_with_fallback(self) -> None:
        order = (
            ["eager"]
            if not USE_GRAPH
            else (
                ["full_kv_update_eager", "eager"] if args.kv_update_eager else ["full", "full_kv_update_eager", "eager"]
            )
        )
        for how in order:
            try:
                self.capture(how)
                self.res["graph"] = how
                break
            except Exception as e:  # noqa: BLE001
                self.res["capture_errors"].append(f"[{how}] {where(e)}")
                log(f"capture {self.mode} x{self.num_reqs} page {self.s.page} ({how}) FAILED: {where(e)}")
                if not CPU:
                    try:
                        torch.cuda.synchronize()
                    except Exception as e2:  # noqa: BLE001
                        self.res["capture_errors"].append(f"[{how}] after failure: {where(e2)}")
        if self.md is not None:
            plan = self.md.plan
            ptr = lambda t: t.data_ptr()  # noqa: E731
            self.res["plan_views"] = {
                "cu_seqlens_q": ptr(plan.main.cu_seqlens_q) == ptr(self.s.qsl),
                "cache_seqlens": ptr(plan.main.cache_seqlens) == ptr(self.s.seq),
                "page_table": ptr(plan.main.page_table) == ptr(self.s.bt),
                "slot_mapping": ptr(self.md.slot_mapping) == ptr(self.s.slots),
            }
            self.res["plan_at_capture"] = {
                "mode": plan.mode.value,
                "num_tokens": plan.num_tokens,
                "max_seqlen_q": plan.main.max_seqlen_q,
                "max_seqlen_k": plan.main.max_seqlen_k,
            }
            self.res["num_splits_at_capture"] = sorted({getattr(l, "num_splits", 1) for l in plan.launches.values()})

    # -- replay (2c) ---------------------------------------------------------------------------------
    def sample_contexts(self, n: int) -> list[int]:
        hi = MAX_CTX
        ctx = [int(math.exp(rng.uniform(0.0, math.log(hi + 1)))) - 1 for _ in range(n)]
        ctx[rng.randrange(n)] = rng.randint(int(0.66 * hi), hi)  # one long context per step (split-K)
        if n > 1 and rng.random() < 0.5:
            ctx[rng.randrange(n)] = rng.choice([0, self.s.page - self.q, self.s.page, 2 * self.s.page - 1])
        ctx = [max(0, min(c, MAX_LEN - self.q)) for c in ctx]
        while sum(ctx) > BUDGET:
            i = max(range(n), key=lambda j: ctx[j])
            ctx[i] //= 2
        return ctx

    def replay_once(self, r: int) -> None:
        s, q, n_pad, t_pad = self.s, self.q, self.num_reqs, self.num_tokens
        page = s.page
        if n_pad == 1:
            n_real = 1
        elif r == 0:
            n_real = n_pad
        elif r == 1:
            n_real = 1
        else:
            n_real = rng.randint(1, n_pad - 1) if rng.random() < 0.75 else n_pad
        ctx = self.sample_contexts(n_real)
        t_real = n_real * q
        need = [-(-(c + q) // page) for c in ctx]
        perm = (torch.randperm(s.num_blocks - 2)[: sum(need)] + 1).tolist()  # distinct, never 0 / last
        pages, o = [], 0
        for k in need:
            pages.append(perm[o : o + k])
            o += k
        # runner buffers, written in place (2c)
        qsl = [i * q for i in range(n_real + 1)] + [t_real] * (MAX_REQS - n_real)
        s.qsl.copy_(torch.tensor(qsl, dtype=torch.int32))
        seq = [c + q for c in ctx] + [0] * (MAX_REQS - n_real)
        s.seq.copy_(torch.tensor(seq, dtype=torch.int32))
        bt = torch.randint(1, s.num_blocks - 1, (MAX_REQS, s.max_pages_per_req), dtype=torch.int32)  # stale rows
        for i, pg in enumerate(pages):
            bt[i, : len(pg)] = torch.tensor(pg, dtype=torch.int32)
        bt[n_real:n_pad] = 0  # padded rows: NULL_BLOCK_ID
        s.bt.copy_(bt)

        def slot(i: int, p: int) -> int:
            return pages[i][p // page] * page + p % page

        new_slots = [slot(i, c + j) for i, c in enumerate(ctx) for j in range(q)]
        s.slots.copy_(torch.tensor(new_slots + [-1] * (MAX_TOKENS - t_real), dtype=torch.int64))
        hist_slots = torch.tensor(
            [slot(i, p) for i, c in enumerate(ctx) for p in range(c)], dtype=torch.int64, device=DEV
        )
        hist_off = [0]
        for c in ctx:
            hist_off.append(hist_off[-1] + c)
        hist = {}
        for kind in KINDS:
            hk = torch.randn(hist_off[-1], HKV, D, dtype=DTYPE, device=DEV)
            hv = torch.randn(hist_off[-1], HKV, D, dtype=DTYPE, device=DEV)
            if hist_off[-1]:
                s.impls[kind].do_kv_cache_update(s.layer, hk, hv, s.kv[kind], hist_slots)  # eager, outside
            hist[kind] = (hk, hv)
            # new tokens into the static inputs; padded token rows are NaN (they must never be read)
            s.q_in[kind].fill_(float("nan"))
            s.k_in[kind].fill_(float("nan"))
            s.v_in[kind].fill_(float("nan"))
            s.q_in[kind][:t_real].normal_().mul_(s.q_gain[kind])
            s.k_in[kind][:t_real].normal_()
            s.v_in[kind][:t_real].normal_()
            s.out[kind].fill_(SENTINEL)
        if not self.kv_in_graph:  # fallback mode: the new tokens' KV write outside the graph
            for kind in KINDS:
                s.impls[kind].do_kv_cache_update(
                    s.layer, s.k_in[kind][:t_pad], s.v_in[kind][:t_pad], s.kv[kind], self.md.slot_mapping
                )
        # build() is called as at every step; the graph never reads its result
        cam = s.cam(n_pad, q, q, max(seq[:n_real]), seq[:n_pad], qsl[: n_pad + 1])
        _, nsync = counted_syncs(lambda: s.builder.build(0, cam))
        self.res["build_host_syncs"] += nsync
        if self.graph is not None:
            self.graph.replay()
        else:
            s.body(self.md, t_pad, True)  # eager: the capture-time metadata object, reused
        if not CPU:
            torch.cuda.synchronize()
        # checks
        for kind in KINDS:
            out = s.out[kind]
            errs, ratios, effect = [], [], []
            for i, c in enumerate(ctx):
                t0 = i * q
                hk, hv = hist[kind]
                k = torch.cat([hk[hist_off[i] : hist_off[i + 1]], s.k_in[kind][t0 : t0 + q]])
                v = torch.cat([hv[hist_off[i] : hist_off[i + 1]], s.v_in[kind][t0 : t0 + q]])
                qq = s.q_in[kind][t0 : t0 + q]
                ref = naive_attention(qq, k, v, D**-0.5, **s.oracle[kind])
                d = (out[t0 : t0 + q].float() - ref).abs()
                d = torch.where(torch.isnan(d), torch.full_like(d, float("inf")), d)
                errs.append(d.max())
                ratios.append((d / (TOL + RTOL * ref.abs())).max())
                if kind != "plain":
                    effect.append((ref - naive_attention(qq, k, v, D**-0.5)).abs().max())
            err = torch.stack(errs).max().item()
            self.res["max_abs_err"][kind] = max(self.res["max_abs_err"][kind], err)
            self.res["tol_ratio"][kind] = max(self.res["tol_ratio"][kind], torch.stack(ratios).max().item())
            if effect:
                self.res["feature_effect"][kind] = max(
                    self.res["feature_effect"][kind], torch.stack(effect).max().item()
                )
            self.res["padded_row_violations"] += int((out[t_real:] != SENTINEL).flatten(1).any(1).sum().item())
            self.res["cache_violations"] += int((s.raw[kind][s.guard_idx] != s.guard_ref[kind]).sum().item())
        self.res["replays"] += 1
        self.res["n_real_seen"].append(n_real)
        self.res["max_ctx_seen"] = max(self.res["max_ctx_seen"], max(ctx))

    def finish(self, allow_padded: bool) -> dict:
        r = self.res
        seen = r.pop("n_real_seen")
        r["n_real"] = {
            "min": min(seen) if seen else None,
            "max": max(seen) if seen else None,
            "padded_replays": sum(1 for x in seen if x < self.num_reqs),
        }
        r["providers"] = {k: f"{v['prefill']}/{v['decode']}" for k, v in self.s.providers().items()}
        r["max_abs_err"] = {k: round(v, 6) for k, v in r["max_abs_err"].items()}
        r["tol_ratio"] = {k: round(v, 3) for k, v in r["tol_ratio"].items()}
        r["feature_effect"] = {k: round(v, 4) for k, v in r["feature_effect"].items()}
        r["ok"] = bool(
            r["graph"] == ("full" if USE_GRAPH else "eager")
            and not r["capture_errors"]
            and not r["replay_errors"]
            and r["replays"] == REPLAYS
            and all(v <= 1.0 for v in r["tol_ratio"].values())
            and (allow_padded or r["padded_row_violations"] == 0)
            and r["cache_violations"] == 0
            and r["build_host_syncs"] == 0
            and all(r.get("plan_views", {"": False}).values())
        )
        return r


def main() -> int:
    t0 = time.time()
    report = {
        "device": torch.cuda.get_device_name() if not CPU else "cpu",
        "torch": torch.__version__,
        "dtype": str(DTYPE).replace("torch.", ""),
        "graphs": USE_GRAPH,
        "tolerance": f"|out - ref| <= {TOL} + {RTOL} * |ref| (tol_ratio <= 1)",
        "providers_note": "prefill/decode",
        "layers": {
            "plain": f"Hq={HQ} Hkv={HKV} D={D}",
            "sliding": f"sliding_window={WINDOW}",
            "sinks": "sinks [Hq] fp32",
            "softcap": f"logits_soft_cap={SOFTCAP} (q x4)",
        },
        "max_model_len": MAX_LEN,
        "max_ctx": MAX_CTX,
        "shapes": [],
    }
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
    report["cudagraph_support"] = None
    for page in PAGES:
        s = Setup(page)
        report["cudagraph_support"] = XpuAttnMetadataBuilder.get_cudagraph_support(s.cfg, s.spec).name
        # vLLM captures the largest sizes first into one pool
        shapes = sorted(
            [Shape(s, "decode", n) for n in DECODE_REQS] + [Shape(s, "verify", n) for n in VERIFY_REQS],
            key=lambda x: (-x.num_tokens, x.mode),
        )
        for sh in shapes:
            sh.capture_with_fallback()
            log(
                f"page {page}: {sh.mode} x{sh.num_reqs}: {sh.res['graph']} (splits {sh.res.get('num_splits_at_capture')})"  # noqa: E501
            )
        for r in range(REPLAYS):  # interleaved, as a server replays whichever graph fits the step
            for sh in shapes:
                if sh.md is None:
                    continue
                try:
                    sh.replay_once(r)
                except Exception as e:  # noqa: BLE001
                    if len(sh.res["replay_errors"]) < 3:
                        sh.res["replay_errors"].append(f"replay {r}: {where(e)}")
                    log(f"replay {r} {sh.mode} x{sh.num_reqs} page {page} FAILED: {where(e)}")
        for sh in shapes:
            report["shapes"].append(sh.finish(args.allow_padded_writes))
        log(f"page {page} done ({time.time() - t0:.0f}s)")
        del s, shapes
        if not CPU:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            report.setdefault("peak_mem_gib", 0.0)
            report["peak_mem_gib"] = max(report["peak_mem_gib"], round(torch.cuda.max_memory_allocated() / 2**30, 2))
    report["elapsed_s"] = round(time.time() - t0, 1)
    report["sync_sites"] = SYNC_SITES[:5]
    report["ok"] = bool(report["shapes"]) and all(sh["ok"] for sh in report["shapes"])
    text = json.dumps(report, indent=1)
    print(text)
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "vllm_graphs.json"), "w") as f:
            f.write(text + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
