"""The CPU provider: torch's fused flash-attention CPU kernel over pages gathered by index.

``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, dropout_p, is_causal, *,
attn_mask, scale) -> (out, logsumexp)`` is the maintained, vectorised, multi-threaded kernel behind
``torch.nn.functional.scaled_dot_product_attention`` on the CPU. It takes q [B, Hq, Lq, D] and
k/v [B, Hkv, Lk, D] (GQA natively: query head h reads KV head h // (Hq / Hkv)), an additive mask
in q's dtype or float32 broadcastable to [B, Hq, Lq, Lk], and returns the log-sum-exp [B, Hq, Lq]
float32, which is what the sinks correction and ``return_softmax_lse`` need.

Per step (once, shared by every layer of the step and configuration), ``TorchSdpaLaunch`` turns the
page table into flat slot indices and groups the sequences:

* decode rows (one query) are bucketed by key length (a bucket's padding is bounded; long and short
  rows do not share one), each bucket split into runs of at most DECODE_CHUNK_BYTES of gathered K + V (so
  the kernel reads them back from the last-level cache, not memory), and run as one batched call per run
  over either each row's visible keys (slots, padded to the run's longest by repeating a visible key: short
  contexts on large pages, where whole pages would be mostly padding) or whole gathered pages (a page is
  one contiguous block, faster to gather per key than rows), keys outside a row's range masked and, on
  pages, zeroed (a page's unwritten tail or a page left of a window may hold anything);
  ``decode_gathers_rows`` picks. The kernel sees each KV head's query heads folded into its query rows
  (q [n, Hkv, Hq/Hkv, D]): it reads a KV head's keys once, not Hq/Hkv times;
* every other sequence (prefill, extend, verify) runs as its own call over exactly its keys, with a
  bottom-right-aligned causal / window mask.

Per layer it gathers K/V pages (decode) or rows (the rest) with ``index_select`` into buffers pooled per thread
(reused by every layer and step: a fresh multi-MB buffer costs a page fault per 4 KiB), or, for a one-sequence call
over consecutive cache rows, hands the kernel a view of the cache (no gather); FP8 caches are widened and
descaled after the gather; it adds ALiBi to the mask, calls the kernel and copies the rows into ``out``. An fp32
decode run with nothing to add (no sinks, ALiBi, softcap or LSE) takes the fewest ops (``_decode_plain``).

The kernel computes in fp32 whatever the storage (16-bit and FP8 rows are widened after the gather; the output
is rounded once). Served natively: GQA/MQA, fp32/fp16/bf16, FP8 KV (e4m3/e5m2, scalar or [batch, Hkv] descales),
sliding windows, non-causal, ALiBi (in the float32 mask), sinks (LSE correction: o *= exp(lse -
logaddexp(lse, sink))), LSE out, Dv != D and MLA (zero-padded to a common head size, which changes no
score). Logit softcap: the fused kernel never exposes its scores, so softcap layers run the same groups
through fp32 matmuls (``softcap_attention``, query rows chunked). Refused with its reason, so the
reference serves it: batch-invariant mode (the kernel's key blocking follows the padded length).
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence

import torch

from ..api import (
    FLOAT_DTYPES,
    FP8_DTYPES,
    NO_LAYER_TENSORS,
    Feature,
    KernelProvider,
    KernelRequest,
    KVLayout,
    LayerConsts,
    LayerTensors,
    PagedLaunch,
    PagedStep,
    check_varlen,
    is_fp8,
    merge_state_torch,
    write_kv_torch,
)

NEG_INF = float("-inf")
# A decode bucket, padded to its longest row, holds at most DECODE_PAD_RATIO x its real keys, or at most
# DECODE_PAD_SLACK padded keys more (a separate call costs more than gathering a few hundred padded rows).
DECODE_PAD_RATIO = 1.5
DECODE_PAD_SLACK = 512
# A decode kernel call gathers at most this many bytes of K + V (fp32) when it has more than one row: gathered just
# before the kernel reads them, they are still in the last-level cache (split further, the calls cost more).
DECODE_CHUNK_BYTES = 8 << 20


_OP: list = []  # the CPU flash kernel's op, looked up once (torch.ops' namespace lookup costs ~1 us a layer)


def _flash_op():
    """The CPU flash kernel (None when this torch has none)."""
    if not _OP:
        _OP.append(getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None))
    return _OP[0]


def bucket_decode_rows(
    lengths: Sequence[int], pad_ratio: float = DECODE_PAD_RATIO, slack: int = DECODE_PAD_SLACK
) -> list[list[int]]:
    """Group decode rows (indices into ``lengths``, all > 0) so that each group, padded to its longest
    row, holds at most ``pad_ratio`` x its real keys or at most ``slack`` padded keys. Longest first; greedy."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    buckets: list[list[int]] = []
    cur: list[int] = []
    real = 0
    for i in order:
        n = lengths[i]
        padded = (len(cur) + 1) * lengths[cur[0]] if cur else 0
        if cur and padded > pad_ratio * (real + n) and padded - (real + n) > slack:
            buckets.append(cur)
            cur, real = [], 0
        cur.append(i)
        real += n
    if cur:
        buckets.append(cur)
    return buckets


def fold_heads(n: int, hkv: int) -> bool:
    """Whether a decode call over ``n`` rows folds each KV head's query heads into its query rows (q [n, Hkv,
    Hq/Hkv, D]: the kernel reads a KV head's keys once, not Hq/Hkv times). Not when that leaves the kernel fewer
    than two (row, KV head) items a thread: one row's 3 items on 2 threads balance worse than the unfolded 9,
    and one row's keys stay in cache for the re-reads (1 x 2048: 197 vs 207 us unfolded, 2 threads).

    FP8 caches never fold (``_run_groups``): folding changes the kernel's fp32 summation order (outputs move by
    ~1e-6, as close to the exact result as unfolded), and with a 3-bit mantissa such a change can flip one later
    K/V element that sits on an FP8 rounding tie. vLLM's FP8 test saw exactly that (docs/cpu/profile.md): one
    layer-1 key element at -1.9375006 (unfolded, and -1.93750048 in the transformers oracle) vs -1.93749976
    (folded), rounding to -2.0 vs -1.875, moved prompt 0's logprobs by 6.5e-3 (the tolerance is 1e-3). Unfolded,
    FP8 decode rows keep the bits of the one-row-per-head kernel call."""
    return n * hkv >= 2 * torch.get_num_threads()


# A decode run's K/V gather by rows (slots) costs about this many times a page gather's per key (one thread,
# 3 x 64 fp32 rows: 1.2x in cache, 1.4-1.9x for runs of 16-50 MB), and zeroing a gathered padding row (index_fill_)
# about this many times gathering one
ROW_GATHER_COST = 1.5
PAD_ZERO_COST = 2.5


def decode_gathers_rows(counts: torch.Tensor | Sequence[int], page_keys: int) -> bool:
    """Whether a decode run gathers each row's visible keys (counts long [n], or host ints) by rows, padded to the
    longest by repeating a visible key (nothing to zero; the kernel's lk = the longest), rather than ``page_keys`` keys
    a row of whole pages, the keys no query sees zeroed after the gather. Rows when they are cheaper: short contexts on
    large pages (48 keys on a page of 128: the pages are 2.7x the keys, 80 of each row's 128 rows zeroed)."""
    if isinstance(counts, torch.Tensor):
        n, most, total = counts.numel(), int(counts.max()), int(counts.sum())
    else:  # host ints (_one_decode_row)
        n, most, total = len(counts), max(counts), sum(counts)
    pad = n * page_keys - total  # rows the page gather zeroes
    return ROW_GATHER_COST * n * most < n * page_keys + PAD_ZERO_COST * pad


def chunk_decode_rows(buckets: list[list[int]], reads: Sequence[int], max_keys: int) -> list[list[int]]:
    """Split each bucket (row indices, longest first) into runs of consecutive rows whose padded keys (rows x the
    run's first ``reads``) stay <= ``max_keys``, one row at least: a run's gathered K/V is then still in the
    last-level cache when the kernel reads it (one gather of a whole 32 x 2048 bucket is 100 MB: the kernel would
    read it back from memory, ~2x slower)."""
    runs: list[list[int]] = []
    for bucket in buckets:
        cur: list[int] = []
        for i in bucket:
            if cur and (len(cur) + 1) * reads[cur[0]] > max_keys:
                runs.append(cur)
                cur = []
            cur.append(i)
        if cur:
            runs.append(cur)
    return runs


def _visibility(lq: int, lk: int, causal: bool, window: tuple[int, int]) -> torch.Tensor:
    """bool [lq, lk] (True = the query sees the key), queries aligned to the end of the keys."""
    left, right = window
    if causal:
        right = 0
    rel = torch.arange(lk)[None, :] - torch.arange(lk - lq, lk)[:, None]  # key - query position
    vis = torch.ones(lq, lk, dtype=torch.bool)
    if left >= 0:
        vis &= rel >= -left
    if right >= 0:
        vis &= rel <= right
    return vis


def _check_values(
    cu: list[int], lens: list[int], max_seqlen_q: int, total_q: int, page: int, width: int, causal: bool
) -> None:
    """The contract's value checks (contract.check_paged_values, same messages) on the step's host lists;
    page ids are checked on the pages actually read, when the slots are made."""
    if cu and cu[0] != 0:
        raise ValueError(f"cu_seqlens_q must start at 0, got {cu[0]}")
    q_lens = [b - a for a, b in zip(cu[:-1], cu[1:])]
    if any(n < 0 for n in q_lens):
        raise ValueError(f"cu_seqlens_q must be non-decreasing, got {cu}")
    if cu and cu[-1] > total_q:
        raise ValueError(f"cu_seqlens_q[-1]={cu[-1]} but q has only {total_q} tokens")
    if q_lens and max(q_lens) > int(max_seqlen_q):
        raise ValueError(f"max_seqlen_q={max_seqlen_q} is smaller than the longest query ({max(q_lens)})")
    if any(n < 0 for n in lens):
        raise ValueError(f"cache_seqlens must be >= 0, got {lens}")
    for b, kl in enumerate(lens):  # more queries than keys is legal: the first ones see no key (out 0, LSE -inf)
        need = -(-kl // page)
        if need > width:
            raise ValueError(
                f"page_table too short: sequence {b} has {kl} keys = {need} pages of {page}, table has {width} columns"
            )


class _Group:
    """One kernel call of a step: ``n`` sequences padded to ``lq`` x ``lk``.

    q_rows long [n * lq] (rows of q, for a decode bucket over non-consecutive rows) or q0/q1 (consecutive rows: one
    sequence's, or a decode bucket's); span: the first flat cache row when a one-sequence group reads consecutive
    rows (a view, no gather), else None; plain: a decode bucket ``_decode_plain`` can run;
    slots long [n * lk] flat cache slots (padding repeats the sequence's first slot, a written one; decode runs:
    its first visible one, ``clean_pad``), or pages long [n * lk / page_size] (decode runs: whole pages, rows no
    query sees listed in ``drop``);
    seqs long [n] sequence ids (per-sequence descales); mask float32 [n, 1, lq, lk] additive (0 / -inf)
    or None (``is_causal``: the kernel's own square causal mask instead); q_pos long [n, lq] query
    positions; the float32 [n, 1, lq, lk] |key - query| distances (ALiBi) are made on first use; dead
    bool [n, lq]: rows that see no key (None if none).
    """

    __slots__ = (
        "n",
        "lq",
        "lk",
        "q_rows",
        "q0",
        "q1",
        "slots",
        "pages",
        "drop",
        "seqs",
        "mask",
        "dead",
        "_dist",
        "q_pos",
        "is_causal",
        "unseen",
        "span",
        "plain",
        "fold",
    )

    def __init__(self, n, lq, lk, q_rows, q0, q1, slots, seqs, vis, q_pos, is_causal, pages=None, clean_pad=False):
        self.n, self.lq, self.lk, self.is_causal = n, lq, lk, is_causal
        self.q_rows, self.q0, self.q1, self.slots, self.seqs = q_rows, q0, q1, slots, seqs
        # decode buckets: long [n * lk / page_size] whole pages gathered instead of ``slots``; ``drop`` long [m]:
        # the gathered rows no query sees (zeroed after the gather), None if none
        self.pages, self.drop = pages, None
        self.q_pos = q_pos  # long [n, lq] query positions (ALiBi distances)
        self.mask = (
            None
            if vis is None
            else torch.zeros(vis.shape, dtype=torch.float32).masked_fill_(~vis, NEG_INF).unsqueeze(1)
        )
        dead = None if vis is None else ~vis.any(-1)
        self.dead = dead if dead is not None and bool(dead.any()) else None
        # keys no row of the group sees (left of every window): their slots may hold anything (engines reuse
        # pages that left the window), and a masked score or p = 0 does not cancel NaN/Inf: zeroed after the gather
        # (``clean_pad``: the only unseen keys are padding that repeats a visible key's slot: nothing to zero)
        unseen = None if vis is None or clean_pad else ~vis.any(-2)  # [n, lk]
        self.unseen = unseen if unseen is not None and bool(unseen.any()) else None
        if pages is not None and self.unseen is not None:
            self.drop, self.unseen = self.unseen.reshape(-1).nonzero().flatten(), None
        self._dist = None
        self.span = self._contiguous_span()
        # a decode bucket _decode_plain can run: consecutive rows, every row sees a key
        self.plain = lq == 1 and q_rows is None and self.dead is None and self.unseen is None
        self.fold = False  # decode buckets: set by the launch (fold_heads)

    def _contiguous_span(self) -> Optional[int]:
        """The first flat cache row (page * page_size + offset) when this one-sequence group reads lk consecutive
        rows and zeroes none of them in place: then the kernel reads the cache itself, no gather. None otherwise."""
        if self.n != 1 or self.drop is not None:
            return None
        if self.pages is not None:
            run = self.pages
            consecutive = run.numel() == 1 or bool((run[1:] - run[:-1] == 1).all())
            return int(run[0]) * (self.lk // run.numel()) if consecutive else None
        first = int(self.slots[0])
        return first if bool((self.slots == torch.arange(first, first + self.lk)).all()) else None

    def alibi_mask(self, slopes: torch.Tensor) -> torch.Tensor:
        """float32 [n, Hq, lq, lk]: the visibility mask minus slope_h * |key - query|."""
        if self.is_causal:  # ALiBi needs an explicit mask: make the causal one
            self.mask = torch.zeros(self.lq, self.lk).masked_fill_(
                torch.ones(self.lq, self.lk, dtype=torch.bool).triu(1), NEG_INF
            )[None, None]
            self.is_causal = False
        if self._dist is None:
            k_pos = torch.arange(self.lk)
            self._dist = (k_pos[None, None, :] - self.q_pos[:, :, None]).abs().float().unsqueeze(1)
        bias = self._dist * -slopes.float()[None, :, None, None]
        return bias if self.mask is None else bias + self.mask


_POOL = threading.local()  # per thread: (which, dtype, cols) -> the largest gather buffer made so far


def _pooled(key: tuple, rows: int) -> torch.Tensor:
    """This thread's buffer [>= rows, key[2]] of dtype key[1] for ``key``, grown (never shrunk) when too small.
    Steps run one after another on a thread and a buffer is only read within one group's run, so launches share it."""
    pool = getattr(_POOL, "bufs", None)
    if pool is None:
        pool = _POOL.bufs = {}
    buf = pool.get(key)
    if buf is None or buf.shape[0] < rows:
        buf = pool[key] = torch.empty(rows, key[2], dtype=key[1])
    return buf


class TorchSdpaLaunch(PagedLaunch):
    """One step's plan for one call configuration: the groups (built on the first layer's run, since the
    value checks need the cache's page count), then per layer gather -> kernel -> scatter."""

    __slots__ = ("_groups", "_zero_rows", "_real", "_bufs", "_num_pages", "_plain")

    def __init__(self, provider, step: PagedStep, call: LayerConsts):
        super().__init__(provider, step, call)
        self._groups: Optional[list[_Group]] = None
        # per step: every group a decode run _decode_plain can serve and the call adds nothing to the kernel's output
        # (no softcap, LSE, Dv != D), no row without keys; a layer then only checks its own tensors (``run``)
        self._plain = False
        self._zero_rows: Optional[torch.Tensor] = None  # rows of sequences with queries but no keys
        self._real = 0
        self._num_pages = 0
        self._bufs: dict = {}  # (k/v, dtype, width) -> gather buffer, shared by the groups, reused by every layer

    def buffer(self, which: str, dtype: torch.dtype, rows: int, cols: int) -> torch.Tensor:
        """A buffer [rows, cols] ``dtype`` for gathered K or V rows (``which``): one per kind, as large as the
        step's largest group (groups run one after another), reused by every layer of the step and, through this
        thread's pool, by later steps (fresh buffers cost more than the copy: a page fault per 4 KiB of a new
        multi-MB allocation, ~8 ms a step at 32 x 2048)."""
        key = (which, dtype, cols)
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < rows:
            rows_max = max(max(g.n * g.lk for g in self._groups), rows)
            buf = self._bufs[key] = _pooled(key, rows_max)
        return buf[:rows]

    def _build(self, num_pages: int, total_q: int, rows_ok: bool = True) -> None:
        """Group the step's sequences (module docstring) after the contract's value checks, on host lists.
        ``rows_ok``: the caches' rows gather as one memcpy each (else decode runs always gather whole pages)."""
        step, call = self.step, self.call
        page = step.page_size
        cu = step.cu_seqlens_q.tolist()
        lens = step.cache_seqlens.tolist()
        _check_values(cu, lens, step.max_seqlen_q, total_q, page, step.page_table.shape[1], call.causal)
        self._real = cu[-1] if cu else 0
        self._num_pages = num_pages
        one = self._one_decode_row(cu, lens, rows_ok)
        if one is not None:
            self._set_groups([one], [])
            return
        table = step.page_table

        def slots_of(seqs: list[int], pad_to: int) -> torch.Tensor:
            """long [len(seqs) * pad_to]: each sequence's key slots, padded with its first key's slot."""
            ln = torch.tensor([lens[b] for b in seqs])
            pos = torch.arange(pad_to).expand(len(seqs), pad_to)
            pos = torch.where(pos < ln[:, None], pos, 0)
            pages = self._checked_pages(seqs, table[seqs].long().gather(1, pos // page))  # real keys' pages only
            return (pages * page + pos % page).flatten()

        decode, zero_rows, groups = [], [], []
        for b, lk in enumerate(lens):
            q0, q1 = cu[b], cu[b + 1]
            lq = q1 - q0
            if lq == 0:
                continue
            if lk == 0:
                zero_rows.extend(range(q0, q1))
                continue
            if lq == 1:  # one query at the last key sees keys [lk - 1 - left, lk - 1], whatever causal/right
                decode.append(b)
                continue
            left, right = call.window
            if left < 0 and (lq == lk if call.causal else right < 0):
                # no window: every key seen, or a square causal block (the kernel's own is_causal, which skips
                # the masked key blocks). Said without the [lq, lk] mask: ~20 ms of host work at 2,048 tokens
                vis, causal_block = None, call.causal
            else:
                vis = _visibility(lq, lk, call.causal, call.window)
                if not bool(vis.any()):
                    zero_rows.extend(range(q0, q1))
                    continue
                causal_block = lq == lk and torch.equal(vis, torch.ones(lq, lq, dtype=torch.bool).tril())
            groups.append(
                _Group(
                    1,
                    lq,
                    lk,
                    None,
                    q0,
                    q1,
                    slots_of([b], lk),
                    torch.tensor([b]),
                    None if vis is None or causal_block or bool(vis.all()) else vis.unsqueeze(0),
                    torch.arange(lk - lq, lk).unsqueeze(0),
                    causal_block,
                )
            )
        left = call.window[0]
        # keys a row gathers by whole pages (from its first visible key's page to its last key's): the runs' size
        reads = [
            ((lens[b] - 1) // page - (max(0, lens[b] - 1 - left) // page if left >= 0 else 0) + 1) * page
            for b in decode
        ]
        row_bytes = 4 * call.num_kv_heads * (call.head_dim + call.v_head_dim)  # one key's K + V row, fp32
        for bucket in chunk_decode_rows(
            bucket_decode_rows([lens[b] for b in decode]), reads, max(1, DECODE_CHUNK_BYTES // row_bytes)
        ):
            seqs = sorted(decode[i] for i in bucket)  # in row order: consecutive rows are a slice of q and out
            ln = torch.tensor([lens[b] for b in seqs])
            groups.append(self._decode_group(seqs, [cu[b] for b in seqs], ln, rows_ok))
        if left < 0:  # without a window the unseen keys of a row group are padding (a repeated, written slot)
            for g in groups:
                if g.pages is None:
                    g.unseen = None
        self._set_groups(groups, zero_rows)

    def _set_groups(self, groups: list[_Group], zero_rows: list[int]) -> None:
        call = self.call
        self._groups = groups
        self._zero_rows = torch.tensor(zero_rows, dtype=torch.long) if zero_rows else None
        self._plain = (
            not zero_rows
            and not call.softcap
            and not call.return_lse
            and call.head_dim == call.v_head_dim
            and all(g.plain for g in groups)
        )

    def _one_decode_row(self, cu: list[int], lens: list[int], rows_ok: bool) -> Optional[_Group]:
        """``_build``'s group for a step of one decode row (batch-1 decode) with no window, whose keys lie on
        consecutive pages, from host ints: the group the general path makes (the same gather choice, lk, slots or
        pages, span view, fold), in ~8 small ops instead of ~40 (in vLLM's process, where each costs 5-10 us, the
        general path took ~280 us a step). None for any other step (then the general path)."""
        if len(lens) != 1 or cu != [0, 1] or lens[0] <= 0 or self.call.window[0] >= 0:
            return None
        ln, page = lens[0], self.step.page_size
        npg = (ln - 1) // page + 1
        pages = self.step.page_table[0, :npg].tolist()
        p0 = pages[0]
        if pages != list(range(p0, p0 + npg)) or p0 < 0 or p0 + npg > self._num_pages:
            return None  # scattered pages or a bad page id: the general path gathers or raises
        by_rows = rows_ok and decode_gathers_rows([ln], npg * page)
        if not by_rows and ln != npg * page:
            return None  # whole pages with unseen keys past the row's last: the general path zeroes them
        first = p0 * page
        g = _Group(
            1,
            1,
            ln,
            None,
            cu[0],
            cu[1],
            torch.arange(first, first + ln) if by_rows else None,
            torch.tensor([0]),
            None,
            torch.tensor([[ln - 1]]),
            False,
            pages=None if by_rows else torch.tensor(pages),
            clean_pad=by_rows,
        )
        g.fold = fold_heads(1, self.call.num_kv_heads)
        return g

    def _decode_group(self, seqs: list[int], rows: list[int], ln: torch.Tensor, rows_ok: bool) -> _Group:
        """One decode run's kernel call: sequences ``seqs`` (ascending) with their query rows ``rows`` and key
        lengths ln long [n]. Gathers each row's visible keys (slots, padded by repeating its first visible key) or
        whole pages (``decode_gathers_rows`` picks, where ``rows_ok``), so the kernel's lk is the run's longest
        visible span or its pages. ALiBi distances are taken against 0..lk-1: the query position relative to the
        first gathered key."""
        page, left = self.step.page_size, self.call.window[0]
        start = (ln - 1 - left).clamp(min=0) if left >= 0 else torch.zeros_like(ln)  # first visible key
        first, last = start // page, (ln - 1) // page  # their pages
        npg = int((last - first).max()) + 1
        cnt = ln - start  # visible keys
        table = self.step.page_table[seqs].long()
        if rows_ok and decode_gathers_rows(cnt, npg * page):
            lk = int(cnt.max())
            k_pos = start[:, None] + torch.arange(lk)[None, :]  # [n, lk] key positions
            vis = k_pos < ln[:, None]
            # padding repeats the row's first visible key (written, so finite: nothing to zero, only to mask)
            k_pos = torch.where(vis, k_pos, start[:, None])
            slots = self._checked_pages(seqs, table.gather(1, k_pos // page)) * page + k_pos % page
            pages, q_pos = None, cnt - 1
        else:
            col = first[:, None] + torch.arange(npg)[None, :]  # [n, npg] page-table columns
            col = torch.where(col <= last[:, None], col, first[:, None])  # padding pages repeat a read page
            pages = self._checked_pages(seqs, table.gather(1, col)).flatten()
            lk = npg * page
            k_pos = first[:, None] * page + torch.arange(lk)[None, :]  # [n, lk] key positions
            vis = (k_pos < ln[:, None]) & (k_pos >= start[:, None])  # padding pages lie past the last key
            slots, q_pos = None, ln - 1 - first * page
        consecutive = rows == list(range(rows[0], rows[0] + len(rows)))  # a slice of q/out, no index_select
        g = _Group(
            len(seqs),
            1,
            lk,
            None if consecutive else torch.tensor(rows),
            rows[0] if consecutive else None,
            rows[-1] + 1 if consecutive else None,
            None if slots is None else slots.flatten(),
            torch.tensor(seqs),
            None if bool(vis.all()) else vis.unsqueeze(1),
            q_pos.unsqueeze(1),
            False,
            pages=pages,
            clean_pad=pages is None,
        )
        g.fold = fold_heads(len(seqs), self.call.num_kv_heads)
        return g

    def _checked_pages(self, seqs: list[int], pages: torch.Tensor) -> torch.Tensor:
        """pages long [n, m] (the page ids read for sequences ``seqs``), after checking each lies in the cache."""
        lo, hi = int(pages.min()), int(pages.max())
        if lo < 0 or hi >= self._num_pages:
            bad = (pages < 0) | (pages >= self._num_pages)
            row = int(bad.any(1).nonzero()[0, 0])
            pid = int(pages[row][bad[row]][0])
            raise ValueError(f"page_table row {seqs[row]} references page {pid}, outside [0, {self._num_pages})")
        return pages

    def run(self, q, k_cache, v_cache, out, *, layer: LayerTensors = NO_LAYER_TENSORS):
        self.check(q, k_cache, v_cache, out, layer)
        if self._groups is None:
            self._build(k_cache.shape[0], q.shape[0], _rows_gather_fast(k_cache, v_cache))
        f32 = torch.float32
        if (
            self._plain
            and layer.sinks is None
            and layer.alibi_slopes is None
            and q.dtype == f32
            and out.dtype == f32
            and k_cache.dtype == f32
            and v_cache.dtype == f32
        ):  # the usual fp32 decode layer: _run_groups' plain path without its per-layer set-up (same calls, bits)
            op, call = _flash_op(), self.call
            for g in self._groups:
                _decode_plain(op, q, k_cache, v_cache, out, g, self, call.num_kv_heads, call.softmax_scale)
            return out
        return self.provider._run_groups(self, q, k_cache, v_cache, out, layer)


def _flat_rows(cache: torch.Tensor, per_page: bool) -> Optional[torch.Tensor]:
    """A 2-D view of cache [P, page, H, D]: [P, page * H * D] (``per_page``) or [P * page, H * D], when each
    page's rows are dense (and, for the row view, the pages too); None otherwise. Gathering along dim 0 of a
    2-D view takes torch's memcpy path: ~10x faster than index_select on the 3-D/4-D tensor."""
    p, page, h, d = cache.shape
    if cache.stride(3) != 1 or cache.stride(2) != d or cache.stride(1) != h * d:
        return None
    if per_page:
        return cache.as_strided((p, page * h * d), (cache.stride(0), 1))
    if p > 1 and cache.stride(0) != page * h * d:
        return None
    return cache.as_strided((p * page, h * d), (h * d, 1))


def _paired(k_cache: torch.Tensor, v_cache: torch.Tensor) -> Optional[torch.Tensor]:
    """The view [P, page, H, D + Dv] of both caches when each head's V row directly follows its K row in one
    buffer (vLLM's pages: [page, H, K | V]), so one gather copies both; None otherwise."""
    d, dv = k_cache.shape[-1], v_cache.shape[-1]
    if (
        k_cache.dtype != v_cache.dtype
        or k_cache.shape[:3] != v_cache.shape[:3]
        or k_cache.stride()[:3] != v_cache.stride()[:3]
        or k_cache.stride(3) != 1
        or v_cache.stride(3) != 1
        or k_cache.stride(2) != d + dv
        or v_cache.data_ptr() != k_cache.data_ptr() + d * k_cache.element_size()
    ):
        return None
    return k_cache.as_strided((*k_cache.shape[:3], d + dv), k_cache.stride())


def _rows_gather_fast(k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether the caches' key rows gather by index_select on a 2-D row view (a memcpy a row): paired K | V rows
    or dense K and V caches. Otherwise rows go through advanced indexing (~10x slower): decode gathers pages."""
    kv = _paired(k_cache, v_cache)
    if kv is not None:
        return _flat_rows(kv, per_page=False) is not None
    return _flat_rows(k_cache, per_page=False) is not None and _flat_rows(v_cache, per_page=False) is not None


def _gather_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, g: "_Group", launch: "TorchSdpaLaunch"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Group ``g``'s K and V rows [n * lk, H, D] / [n * lk, H, Dv]: one gather of both where the caches pair up
    (``_paired``: K and V are then strided views of one buffer), else one each."""
    kv = _paired(k_cache, v_cache)
    if kv is None:
        return _gather(k_cache, g, launch, "k"), _gather(v_cache, g, launch, "v")
    both = _gather(kv, g, launch, "kv")  # [n * lk, H, D + Dv]
    d = k_cache.shape[-1]
    return both[..., :d], both[..., d:]


def _gather(cache: torch.Tensor, g: "_Group", launch: "TorchSdpaLaunch", which: str) -> torch.Tensor:
    """Group ``g``'s key rows of cache [P, page, H, D] -> [n * lk, H, D] (into the launch's ``which`` buffer):
    whole pages (g.pages) or rows (g.slots, page * page_size + offset), never copying the whole cache. A cache
    whose rows are strided inside a page is read by advanced indexing."""
    h, d = cache.shape[2], cache.shape[3]
    if g.span is not None:  # consecutive rows: a view of the cache (the kernel reads it; nothing writes it)
        rows = _flat_rows(cache, per_page=False)
        if rows is not None:
            return rows[g.span : g.span + g.lk].view(-1, h, d)
    flat = _flat_rows(cache, per_page=g.pages is not None)
    if flat is not None:
        idx = g.pages if g.pages is not None else g.slots
        buf = launch.buffer(which, cache.dtype, g.n * g.lk, h * d)
        return torch.index_select(flat, 0, idx, out=buf.view(len(idx), -1)).view(-1, h, d)
    if g.pages is not None:
        return cache[g.pages].flatten(0, 1)
    page = cache.shape[1]
    return cache[g.slots // page, g.slots % page]


class TorchSdpaProvider(KernelProvider):
    name = "torch_sdpa"
    description = "torch's fused flash-attention CPU kernel over gathered pages (decode rows bucketed by length)"
    devices = frozenset({"cpu"})
    dtypes = frozenset(FLOAT_DTYPES)
    kv_dtypes = frozenset(FLOAT_DTYPES + FP8_DTYPES)
    kv_layouts = frozenset({KVLayout.NHD, KVLayout.HND})  # any strides: pages are gathered by index
    features = frozenset(
        {
            Feature.WINDOW,
            Feature.SOFTCAP,
            Feature.SINKS,
            Feature.ALIBI,
            Feature.LSE,
            Feature.NON_CAUSAL,
            Feature.DV,
            Feature.MLA,
        }
    )
    graph_capture_reason = "reads the step's lengths on the host to group sequences (CPU only: no graphs there)"
    # why each absent feature is absent (added to the generic "no X support")
    WHY = {
        "batch_invariant": "the kernel's key blocking follows each call's padded length, so a row's bits depend "
        "on its batch",
    }

    def unavailable_reason(self) -> Optional[str]:
        if _flash_op() is None:
            return f"torch {torch.__version__} has no aten._scaled_dot_product_flash_attention_for_cpu"
        return None

    def version(self) -> Optional[str]:
        return torch.__version__

    def not_supported_reasons(self, req: KernelRequest) -> list[str]:
        """The generic reasons, each absent feature's with why it is absent."""
        out = []
        for r in super().not_supported_reasons(req):
            feat = r[3 : -len(" support")].replace("-", "_") if r.startswith("no ") and r.endswith(" support") else None
            out.append(f"{r}: {self.WHY[feat]}" if feat in self.WHY else r)
        return out

    def _launch(self, step: PagedStep, call: LayerConsts, **options) -> TorchSdpaLaunch:
        if options:
            raise TypeError(f"provider {self.name!r} takes no launch options, got {sorted(options)}")
        return TorchSdpaLaunch(self, step, call)

    def _run_paged(self, step, call, q, k_cache, v_cache, out, layer):  # pragma: no cover - run() goes direct
        return self._launch(step, call).run(q, k_cache, v_cache, out, layer=layer)

    # ---- the per-layer work --------------------------------------------------------------
    def _run_groups(
        self,
        launch: TorchSdpaLaunch,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        out: torch.Tensor,
        layer: LayerTensors,
    ):
        """q [T, Hq, D] -> out [T, Hq, Dv] (rows past cu_seqlens_q[-1] left alone) (, lse [Hq, T] fp32)."""
        call = launch.call
        op = _flash_op()
        hq, d, dv = call.num_q_heads, call.head_dim, call.v_head_dim
        width = max(d, dv)
        lse_out = torch.full((hq, q.shape[0]), NEG_INF, dtype=torch.float32) if call.return_lse else None
        fp8 = is_fp8(k_cache.dtype)
        sinks = layer.sinks.float() if layer.sinks is not None else None
        # The kernel runs in fp32 whatever the storage: its 16-bit path rounds the probabilities to 16 bits before
        # P @ V (~12 % more error than fp32 compute, which is what the reference and vLLM's CPU_ATTN do); FP8 rows
        # are descaled in fp32 too. Output rounded once, into ``out``.
        cdt = torch.float32
        # fp32 decode with nothing to add to the kernel's output (the usual decode layer): _decode_plain
        plain = (
            not call.softcap
            and d == dv
            and sinks is None
            and lse_out is None
            and layer.alibi_slopes is None
            and q.dtype == cdt
            and out.dtype == cdt
            and k_cache.dtype == cdt
            and v_cache.dtype == cdt
        )
        for g in launch._groups:
            if plain and g.plain:
                _decode_plain(op, q, k_cache, v_cache, out, g, launch, call.num_kv_heads, call.softmax_scale)
                continue
            k, v = _gather_kv(k_cache, v_cache, g, launch)
            if fp8:  # [n * lk, Hkv, D] fp32
                k = self._widen(k, layer.k_descale, g, cdt)
                v = self._widen(v, layer.v_descale, g, cdt)
            elif k.dtype != cdt:
                k = launch.buffer("k32", cdt, k.shape[0], k[0].numel()).view(k.shape).copy_(k)
                v = launch.buffer("v32", cdt, v.shape[0], v[0].numel()).view(v.shape).copy_(v)
            if g.drop is not None:  # fresh tensors from the gather: zeroed in place
                k.index_fill_(0, g.drop, 0)
                v.index_fill_(0, g.drop, 0)
            if g.unseen is not None:
                drop = g.unseen.reshape(-1)[:, None, None]
                k, v = k.masked_fill(drop, 0), v.masked_fill(drop, 0)
            k = k.view(g.n, g.lk, *k.shape[1:]).transpose(1, 2)  # [n, Hkv, lk, D]
            v = v.view(g.n, g.lk, *v.shape[1:]).transpose(1, 2)
            qg = _group_q(q, g, cdt)  # [n, Hq, lq, D]
            mask = g.mask if layer.alibi_slopes is None else g.alibi_mask(layer.alibi_slopes)
            if call.softcap:  # the fused kernel cannot cap its scores: the scores made here, fp32
                o, lse = softcap_attention(qg, k, v, mask, g.is_causal, call.softmax_scale, call.softcap)
            else:
                if d != width:
                    qg, k = _pad(qg, width), _pad(k, width)
                if dv != width:
                    v = _pad(v, width)
                fold = g.fold and not fp8  # FP8: never (fold_heads)
                o, lse = _fused(op, qg, k, v, mask, g.is_causal, call.softmax_scale, fold)  # [n,Hq,lq,W], [n,Hq,lq]
                if dv != width:
                    o = o[..., :dv]
            if g.dead is not None:  # rows that see no key: o = 0, lse = -inf (the kernel says lse 0)
                lse = lse.masked_fill(g.dead.unsqueeze(1), NEG_INF)
                o = o.masked_fill(g.dead[:, None, :, None], 0.0)
            if sinks is not None:
                with_sink = torch.logaddexp(lse, sinks[None, :, None])
                o = o * torch.exp(lse - with_sink).nan_to_num_(0.0).unsqueeze(-1).to(o.dtype)  # (-inf sink, no key)
                lse = with_sink
            if g.q_rows is not None:
                out.index_copy_(0, g.q_rows, o[:, :, 0].to(out.dtype))
                if lse_out is not None:
                    lse_out.index_copy_(1, g.q_rows, lse[:, :, 0].T)
            elif g.lq == 1:  # a decode bucket over consecutive rows
                out[g.q0 : g.q1].copy_(o[:, :, 0])
                if lse_out is not None:
                    lse_out[:, g.q0 : g.q1] = lse[:, :, 0].T
            else:
                out[g.q0 : g.q1].copy_(o[0].transpose(0, 1))
                if lse_out is not None:
                    lse_out[:, g.q0 : g.q1] = lse[0]
        if launch._zero_rows is not None:  # sequences with queries and no visible key: o = 0, lse = sink or -inf
            out.index_fill_(0, launch._zero_rows, 0.0)
            if lse_out is not None and sinks is not None:
                lse_out[:, launch._zero_rows] = sinks[:, None]
        return (out, lse_out) if call.return_lse else out

    @staticmethod
    def _widen(x: torch.Tensor, descale: Optional[torch.Tensor], g: _Group, dtype: torch.dtype) -> torch.Tensor:
        """Gathered FP8 rows [n * lk, Hkv, D] -> ``dtype``, times the descale (scalar or per sequence and head)."""
        x = x.float()
        if descale is not None:
            if descale.numel() == 1:
                x = x * descale.reshape(1, 1, 1)
            else:
                per = descale.index_select(0, g.seqs)  # [n, Hkv]
                x = (x.view(g.n, g.lk, *x.shape[1:]) * per[:, None, :, None]).flatten(0, 1)
        return x.to(dtype)

    # ---- non-paged varlen, merge, KV write -----------------------------------------------
    def flash_attn_varlen_func(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        softmax_scale: Optional[float] = None,
        causal: bool = False,
        window_size: Sequence[int] = (-1, -1),
        softcap: float = 0.0,
        sinks: Optional[torch.Tensor] = None,
        alibi_slopes: Optional[torch.Tensor] = None,
        return_softmax_lse: bool = False,
        out: Optional[torch.Tensor] = None,
    ):
        """Non-paged varlen attention: q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv] (one dtype,
        fp32/fp16/bf16), cu_seqlens_q/k int [B+1] -> out [total_q, Hq, Dv] (, lse [Hq, total_q] fp32).

        Served as a paged call over page-size-1 views of k/v (one code path with the paged one)."""
        cq, ck = check_varlen(
            q,
            k,
            v,
            cu_seqlens_q,
            cu_seqlens_k,
            window_size=window_size,
            causal=causal,
            sinks=sinks,
            alibi_slopes=alibi_slopes,
        )
        batch = len(ck) - 1
        lens = [ck[b + 1] - ck[b] for b in range(batch)]
        width = max(lens + [1])
        table = torch.zeros(batch, width, dtype=torch.int32)
        for b in range(batch):
            table[b, : lens[b]] = torch.arange(ck[b], ck[b + 1], dtype=torch.int32)
        if out is None:
            out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device)
        kc, vc = k.unsqueeze(1), v.unsqueeze(1)
        if k.shape[0] == 0:  # a page table needs one page to point at (no key is read)
            kc = torch.zeros(1, 1, *k.shape[1:], dtype=k.dtype)
            vc = torch.zeros(1, 1, *v.shape[1:], dtype=v.dtype)
        return self.flash_attn_with_kvcache(
            q,
            kc,
            vc,
            table,
            torch.tensor(lens, dtype=torch.int32),
            cu_seqlens_q.to(torch.int32),
            max_seqlen_q,
            softmax_scale=softmax_scale,
            causal=causal,
            window_size=window_size,
            sinks=sinks,
            softcap=softcap,
            alibi_slopes=alibi_slopes,
            return_softmax_lse=return_softmax_lse,
            out=out,
            batch_invariant=False,
        )

    def merge_state(self, o_a, lse_a, o_b, lse_b, sinks=None):
        """o_* [T, H, D], lse_* [H, T] fp32 (natural log), sinks [H] -> (o [T, H, D] o_a.dtype, lse [H, T] fp32)."""
        return merge_state_torch(o_a, lse_a, o_b, lse_b, sinks)

    def write_kv(self, k, v, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
        """Scatter k/v [T, Hkv, D] into the paged caches [P, page, Hkv, D] (see torch_ops.write_kv_torch)."""
        write_kv_torch(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale)


# softcap_attention holds at most this many fp32 scores at once (query rows are processed in chunks)
SOFTCAP_CHUNK_SCORES = 1 << 24


def softcap_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    is_causal: bool,
    scale: float,
    softcap: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with a logit softcap, in fp32 matmuls (the fused kernel never exposes its scores).

    q [n, Hq, lq, D], k [n, Hkv, lk, D], v [n, Hkv, lk, Dv] (query head h reads KV head h // (Hq / Hkv)); mask
    float additive, broadcastable to [n, Hq, lq, lk], added after the cap (ALiBi comes after the cap too);
    ``is_causal``: the square causal mask -> (o [n, Hq, lq, Dv] in q's dtype, lse [n, Hq, lq] fp32). A row
    that sees no key gets o = 0, lse = -inf. Query rows go in chunks of <= SOFTCAP_CHUNK_SCORES scores.
    """
    n, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    grp = hq // hkv
    kf = k.float().transpose(-1, -2)  # [n, Hkv, D, lk]
    vf = v.float()
    o = torch.empty(n, hq, lq, v.shape[-1], dtype=q.dtype)
    lse = torch.empty(n, hq, lq, dtype=torch.float32)
    step = max(1, SOFTCAP_CHUNK_SCORES // max(1, n * hq * lk))
    for r0 in range(0, lq, step):
        r1 = min(lq, r0 + step)
        qc = q[:, :, r0:r1].float().reshape(n, hkv, grp * (r1 - r0), d)  # heads of one KV head side by side
        s = torch.matmul(qc, kf).mul_(scale).view(n, hq, r1 - r0, lk)
        s = torch.tanh(s.div_(softcap)).mul_(softcap)
        if mask is not None:
            s = s + mask[:, :, r0:r1]
        if is_causal:
            s = s.masked_fill(torch.ones(r1 - r0, lk, dtype=torch.bool).triu(r0 + 1), NEG_INF)
        m = torch.logsumexp(s, dim=-1)  # [n, Hq, rows]
        p = torch.exp(s - m.masked_fill(~torch.isfinite(m), 0.0).unsqueeze(-1))
        oc = torch.matmul(p.view(n, hkv, grp * (r1 - r0), lk), vf).view(n, hq, r1 - r0, -1)
        o[:, :, r0:r1] = oc
        lse[:, :, r0:r1] = m
    return o, lse


def _decode_plain(
    op,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    g: _Group,
    launch: "TorchSdpaLaunch",
    hkv: int,
    scale: float,
) -> None:
    """Decode bucket ``g`` (consecutive rows, every row sees a key) of an fp32 layer without sinks, ALiBi, softcap
    or LSE: q/out [T, Hq, D], caches [P, page, Hkv, D]. The fewest ops: gather (rows no query sees zeroed), the
    kernel (over the folded query heads, q [n, Hkv, Hq/Hkv, D], where g.fold), one strided copy of its output into
    ``out``. Every view the kernel gets is one ``as_strided`` (each view op costs ~1 us of dispatch; a batch-1
    layer made 9 of them around a 14 us kernel)."""
    n, lk = g.n, g.lk
    k = v = None
    if g.span is not None:  # one sequence over consecutive cache rows: [1, Hkv, lk, D] views of the caches
        k, v = _span_view(k_cache, g.span, lk), _span_view(v_cache, g.span, lk)
    elif g.drop is None:
        k, v = _gather_paired(k_cache, v_cache, g, launch)
    if k is None or v is None:
        k, v = _gather_kv(k_cache, v_cache, g, launch)  # [n * lk, Hkv, D]
        if g.drop is not None:  # gathered rows (never a view of the cache: see _Group.span): zeroed in place
            k.index_fill_(0, g.drop, 0)
            v.index_fill_(0, g.drop, 0)
        k, v = _by_head(k, n, lk), _by_head(v, n, lk)  # [n, Hkv, lk, D]
    qg = _query_view(q, g.q0, n, hkv if g.fold else 0)
    o, _ = op(qg, k, v, 0.0, False, attn_mask=g.mask, scale=scale)
    _query_view(out, g.q0, n, hkv if g.fold else 0).copy_(o)


def _query_view(x: torch.Tensor, q0: int, n: int, hkv: int) -> torch.Tensor:
    """Rows q0..q0+n-1 of x [T, Hq, D] (q or out, any strides) as the kernel's [n, Hkv, Hq/Hkv, D] (``hkv`` > 0:
    query heads folded) or [n, Hq, 1, D] (``hkv`` 0), in one view op."""
    st, hq, d = x.stride(), x.shape[1], x.shape[2]
    off = x.storage_offset() + q0 * st[0]
    if hkv:
        grp = hq // hkv
        return x.as_strided((n, hkv, grp, d), (st[0], grp * st[1], st[1], st[2]), off)
    return x.as_strided((n, hq, 1, d), (st[0], st[1], d * st[2], st[2]), off)


def _span_view(cache: torch.Tensor, first: int, lk: int) -> Optional[torch.Tensor]:
    """cache [P, page, H, D] -> its flat rows first..first+lk-1 as [1, H, lk, D] (one view op), when the rows are
    one uniform stride apart across pages and each row's D values are dense; None otherwise."""
    st = cache.stride()
    if st[3] != 1 or (cache.shape[0] > 1 and st[0] != cache.shape[1] * st[1]):
        return None
    h, d = cache.shape[2], cache.shape[3]
    return cache.as_strided((1, h, lk, d), (lk * st[1], st[2], st[1], 1), cache.storage_offset() + first * st[1])


def _gather_paired(
    k_cache: torch.Tensor, v_cache: torch.Tensor, g: "_Group", launch: "TorchSdpaLaunch"
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """``_gather_kv`` + the kernel's views in the fewest ops, for caches that are the K | V halves of one buffer's
    dense rows (vLLM's pages): one check on the strides, one view of the rows, one gather, one view each of K and V
    -> k/v [n, H, lk, D] (Dv for v). (None, None) for any other layout (then ``_gather_kv``)."""
    ks = k_cache.stride()
    p, page, h, d = k_cache.shape
    w = d + v_cache.shape[3]
    if (
        ks != v_cache.stride()
        or ks[3] != 1
        or ks[2] != w
        or ks[1] != h * w
        or k_cache.shape[:3] != v_cache.shape[:3]
        or k_cache.dtype != v_cache.dtype
        or v_cache.data_ptr() != k_cache.data_ptr() + d * k_cache.element_size()
    ):
        return None, None
    off = k_cache.storage_offset()
    if g.pages is not None:  # whole pages: [P, page * H * w], a page's rows are one dense block
        flat, idx = k_cache.as_strided((p, page * h * w), (ks[0], 1), off), g.pages
    elif p == 1 or ks[0] == page * ks[1]:  # key rows: [P * page, H * w]
        flat, idx = k_cache.as_strided((p * page, h * w), (ks[1], 1), off), g.slots
    else:
        return None, None
    n, lk = g.n, g.lk
    buf = launch.buffer("kv", k_cache.dtype, n * lk, h * w)
    torch.index_select(flat, 0, idx, out=buf.view(idx.numel(), -1))
    size, st, boff = (n, h, lk, d), (lk * h * w, w, h * w, 1), buf.storage_offset()
    return buf.as_strided(size, st, boff), buf.as_strided((n, h, lk, w - d), st, boff + d)


def _by_head(x: torch.Tensor, n: int, lk: int) -> torch.Tensor:
    """Gathered rows x [n * lk, H, D] (any strides) -> the kernel's [n, H, lk, D] view (one view op)."""
    st = x.stride()
    return x.as_strided((n, x.shape[1], lk, x.shape[2]), (lk * st[0], st[1], st[0], st[2]), x.storage_offset())


def _group_q(q: torch.Tensor, g: _Group, dtype: torch.dtype) -> torch.Tensor:
    """q [T, Hq, D] -> group ``g``'s queries [n, Hq, lq, D] in ``dtype`` (a view where the rows are a slice)."""
    if g.q_rows is not None:
        return q.index_select(0, g.q_rows).unsqueeze(2).to(dtype)  # [n, Hq, 1, D]
    if g.lq == 1:  # a decode bucket over consecutive rows
        return q[g.q0 : g.q1].unsqueeze(2).to(dtype)
    return q[g.q0 : g.q1].transpose(0, 1).unsqueeze(0).to(dtype)  # [1, Hq, lq, D]


def _fused(
    op,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: Optional[torch.Tensor],
    is_causal: bool,
    scale: float,
    fold: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused kernel: q [n, Hq, lq, W], k/v [n, Hkv, lk, W] -> (o [n, Hq, lq, W], lse [n, Hq, lq] fp32).

    ``fold`` (one query a row, decode): the query heads of a KV head are folded into its query rows, q [n, Hkv,
    Hq/Hkv, W] (their mask is one row: it broadcasts), so the kernel reads each KV head's keys once (fold_heads)."""
    n, hq, lq, w = q.shape
    hkv = k.shape[1]
    if not fold or lq != 1 or hq == hkv or is_causal:
        return op(q, k, v, 0.0, is_causal, attn_mask=mask, scale=scale)
    grp = hq // hkv
    if mask is not None and mask.shape[1] != 1:  # per-head (ALiBi) [n, Hq, 1, lk]
        mask = mask.reshape(n, hkv, grp, mask.shape[-1])
    o, lse = op(q.reshape(n, hkv, grp, w), k, v, 0.0, False, attn_mask=mask, scale=scale)
    return o.reshape(n, hq, 1, o.shape[-1]), lse.reshape(n, hq, 1)


def _pad(x: torch.Tensor, width: int) -> torch.Tensor:
    """Zero-pad the last dimension to ``width`` (extra zero columns change no dot product)."""
    return torch.nn.functional.pad(x, (0, width - x.shape[-1]))
