"""GPU and host timing shared by the benchmarks (one copy, so every script measures the same way).

    from timing import throughput, event_latency, wall_latency   # benchmarks/ on sys.path

Two figures per kernel, never mixed:

- throughput: seconds per call of n back-to-back calls, CUDA events around the whole batch, no
  synchronisation inside. The host enqueues ahead of the GPU, so launch cost hides behind device time:
  what a graph-captured or well-pipelined engine sees.
- latency: one call timed alone, synchronised after each call, median of the samples. Includes the
  host's launch of that call: what an engine that waits on every step sees. ``event_latency`` times it
  with CUDA events, ``wall_latency`` with the host clock (call + synchronize).

For host-bound calls (microsecond decode layers) ``host_per_call`` times the host side alone and
``queued_throughput`` the device side alone (calls queued behind a GPU sleep so the events see
device time, not enqueue time).

The latency helpers return the middle of the sorted samples, the upper of the two middle ones for an
even count (``upper_median``), as the recorded results were computed.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch

Call = Callable[[], object]


def upper_median(xs: Sequence[float]) -> float:
    """Middle value of the sorted samples; the upper of the two middle ones for an even count."""
    return sorted(xs)[len(xs) // 2]


def _events() -> tuple[torch.cuda.Event, torch.cuda.Event]:
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def throughput(fn: Call, n: int = 50, warmup: int = 1) -> float:
    """Seconds per call of ``n`` back-to-back calls of ``fn``: CUDA events around the batch, / n.

    ``warmup`` untimed calls first (compiles, caches), then a synchronize so the batch starts on an idle GPU.
    """
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = _events()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / n


def event_latency(fn: Call, iters: int = 20, warmup: int = 3) -> float:
    """Median seconds of one call of ``fn`` timed alone: CUDA events around it, a synchronize after each."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = _events()
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return upper_median(times)


def wall_latencies(calls: Sequence[Call], n: int, sync: Callable[[], None] = torch.cuda.synchronize) -> list[float]:
    """Host-clock seconds of ``n`` single calls (rotating over ``calls``), each between two ``sync()``s.

    ``sync`` is a parameter so a CPU dry run (no CUDA) can pass a no-op.
    """
    k = len(calls)
    out = []
    for i in range(n):
        sync()
        t0 = time.perf_counter()
        calls[i % k]()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def wall_latency(fn: Call, n: int = 10) -> float:
    """Median host-clock seconds of one call of ``fn`` + synchronize (no warm-up: warm ``fn`` first)."""
    return upper_median(wall_latencies([fn], n))


def host_per_call(calls: Sequence[Call], n: int, repeats: int, warmup: int = 0,
                  sync: Callable[[], None] = torch.cuda.synchronize) -> list[float]:
    """Host seconds per call of ``n`` back-to-back calls rotating over ``calls``, one value per repeat.

    ``time.perf_counter`` around the loop with no synchronisation inside (the host cost of enqueueing);
    ``sync()`` before and after each repeat, outside the timed region. Rotating over several layers'
    tensors keeps a per-argument cache from looking better than an engine's step. ``warmup`` untimed
    calls first.
    """
    k = len(calls)
    for i in range(warmup):
        calls[i % k]()
    out = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for i in range(n):
            calls[i % k]()
        t1 = time.perf_counter()
        sync()
        out.append((t1 - t0) / n)
    return out


def sleep_cycles_per_second() -> float | None:
    """GPU clock cycles per second of ``torch.cuda._sleep`` (sizes the sleep of ``queued_throughput``);
    None where this torch has no ``_sleep``."""
    cuda = torch.cuda
    if not hasattr(cuda, "_sleep"):
        return None
    s, e = _events()
    cuda._sleep(1000)
    s.record()
    cuda._sleep(20_000_000)
    e.record()
    cuda.synchronize()
    return 20e6 / (s.elapsed_time(e) / 1e3)


def queued_throughput(calls: Sequence[Call], n: int, host_s_per_call: float, cycles_per_s: float | None,
                      rounds: int = 3) -> tuple[float, bool]:
    """Device seconds per call of ``n`` calls (rotating over ``calls``) with the host out of the picture.

    The calls are enqueued behind a ``torch.cuda._sleep`` long enough (2x the measured host time plus
    300 us) for the host to enqueue all of them first, so the events around them time the GPU alone.
    Returns the median over ``rounds`` and whether every round really was queued ahead (False also when
    there is no sleep to queue behind: then the figure may include host time).
    """
    cuda = torch.cuda
    k = len(calls)
    vals, ahead = [], []
    for _ in range(rounds):
        need = host_s_per_call * n * 2.0 + 300e-6
        cycles = int(need * cycles_per_s) if cycles_per_s else 0
        s, e = _events()
        cuda.synchronize()
        t0 = time.perf_counter()
        if cycles:
            cuda._sleep(cycles)
        s.record()
        for i in range(n):
            calls[i % k]()
        e.record()
        enq = time.perf_counter() - t0
        cuda.synchronize()
        vals.append(s.elapsed_time(e) / 1e3 / n)
        ahead.append(bool(cycles) and enq < cycles / cycles_per_s)
    return statistics.median(vals), all(ahead)


def copy_tbps(nbytes: int = 1 << 30, back_to_back: bool = False, n: int = 20) -> float:
    """Device copy bandwidth in TB/s (read + write of an ``nbytes`` buffer), the yardstick for decode.

    ``back_to_back``: time ``n`` copies with ``throughput``; else each copy alone with ``event_latency``.
    Report a kernel's bandwidth against the copy measured the same way in the same run.
    """
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = throughput(lambda: y.copy_(x), n) if back_to_back else event_latency(lambda: y.copy_(x), iters=n)
    return 2 * nbytes / t / 1e12
