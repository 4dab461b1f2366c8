"""The bad-input table: inputs a careless caller passes, each with the outcome every provider must give.

Outcomes:
  ("error", exception type, regex naming the argument)  - refused before anything is written;
  ("result", oracle kwargs)                               - a documented correct result: equal to the naive
                                                           oracle (tests/support/naive.py) run with those kwargs;
  ("flagged", argument, bad sequences)                    - a value only the device sees (page ids, lengths,
                                                           cu_seqlens_q): the reference refuses it on the
                                                           host; the Triton kernels never touch memory
                                                           outside their tensors, write the bad
                                                           sequences' rows as NaN and raise naming the
                                                           argument (kernels/api/guard.py).

Every case is a function returning the call's keyword arguments (fresh tensors, so cases cannot leak
into each other). Shapes stay tiny: the Triton cases run in its CPU interpreter.
"""

from __future__ import annotations

import math

import torch

D, HQ, HKV, PAGE, PAGES = 16, 4, 2, 8, 6


def i32(x):
    return torch.tensor(x, dtype=torch.int32)


def base(seed: int = 0, dtype=torch.float32):
    """Two sequences: 10 keys (2 new queries) and 5 keys (1 query), pages 8 slots, 6 pages."""
    g = torch.Generator().manual_seed(seed)
    return dict(
        q=torch.randn(3, HQ, D, generator=g).to(dtype),
        k_cache=torch.randn(PAGES, PAGE, HKV, D, generator=g).to(dtype),
        v_cache=torch.randn(PAGES, PAGE, HKV, D, generator=g).to(dtype),
        page_table=i32([[0, 1], [2, 3]]),
        cache_seqlens=i32([10, 5]),
        cu_seqlens_q=i32([0, 2, 3]),
        max_seqlen_q=2,
    )


def with_(**over):
    def make():
        kw = base()
        for k, v in over.items():
            kw[k] = v() if callable(v) and not isinstance(v, torch.Tensor) else v
        return kw

    return make


def _edit(fn):
    """A case built by editing base()'s tensors in place."""

    def make():
        kw = base()
        fn(kw)
        return kw

    return make


def _nan_left_of_window(kw):
    kw["v_cache"][0, 0:3] = float("nan")  # keys 0..2 of sequence 0: left of every query's window
    kw["k_cache"][0, 0:3] = float("inf")
    kw["v_cache"][2, 0] = float("nan")  # key 0 of sequence 1 (one query at key 4): left of its window too
    kw["k_cache"][2, 0] = float("inf")
    kw["window_size"] = (3, 0)


def _nan_page_tail(kw):
    kw["v_cache"][2, 5:] = float("nan")  # sequence 1 (one query): 5 keys in page 2, slots 5..7 unwritten
    kw["k_cache"][2, 5:] = float("nan")
    kw["v_cache"][1, 2:] = float("nan")  # sequence 0: 10 keys, slots 10..15 of its second page
    kw["k_cache"][1, 2:] = float("nan")


def _nan_unused_pages(kw):
    kw["v_cache"][4:] = float("nan")
    kw["k_cache"][4:] = float("nan")


def _more_queries_than_keys(kw):
    # sequence 1: 3 new queries over 2 keys: its first query sees no key (FlashAttention: out 0, LSE -inf)
    kw["q"] = torch.randn(5, HQ, D)
    kw["cu_seqlens_q"] = i32([0, 2, 5])
    kw["cache_seqlens"] = i32([10, 2])
    kw["max_seqlen_q"] = 3


def _zero_keys(kw):  # a decode padding row: 1 query, 0 keys
    kw["cache_seqlens"] = i32([10, 0])


def _zero_length_queries(kw):
    kw["q"] = kw["q"][:2].contiguous()
    kw["cu_seqlens_q"] = i32([0, 2, 2])


def _empty_batch(kw):
    kw.update(
        q=torch.randn(0, HQ, D),
        page_table=torch.zeros(0, 2, dtype=torch.int32),
        cache_seqlens=i32([]),
        cu_seqlens_q=i32([0]),
        max_seqlen_q=0,
    )


def _sinks_no_key(kw):
    _zero_keys(kw)
    kw["sinks"] = torch.tensor([0.5, -1.0, 2.0, -math.inf])


def _sinks_all_minus_inf_no_key(kw):
    _zero_keys(kw)
    kw["sinks"] = torch.full((HQ,), -math.inf)


def _sinks_noncausal_no_key(kw):
    _zero_keys(kw)
    kw["causal"] = False
    kw["sinks"] = torch.full((HQ,), -math.inf)


def _nan_softcap_window(kw):
    _nan_left_of_window(kw)
    kw["softcap"] = 5.0


def _noncontig_q(kw):
    kw["q"] = torch.randn(3, HQ, 2 * D)[:, :, ::2]


def _colmajor_table(kw):
    kw["page_table"] = i32([[0, 1], [2, 3]]).t().contiguous().t()


def _strided_lens(kw):
    kw["cache_seqlens"] = i32([10, 0, 5, 0])[::2]


# ---- the table ----------------------------------------------------------------------------------------
ERR, RES, FLAG = "error", "result", "flagged"
CASES = {
    # dtypes
    "q float64": (with_(q=lambda: torch.randn(3, HQ, D, dtype=torch.float64)), (ERR, TypeError, "q dtype")),
    "q int": (with_(q=lambda: torch.ones(3, HQ, D, dtype=torch.int32)), (ERR, TypeError, "q dtype")),
    "kv dtype != q": (
        with_(
            k_cache=lambda: torch.randn(PAGES, PAGE, HKV, D, dtype=torch.float16),
            v_cache=lambda: torch.randn(PAGES, PAGE, HKV, D, dtype=torch.float16),
        ),
        (ERR, TypeError, "KV cache dtype"),
    ),
    "k/v cache dtypes differ": (
        with_(v_cache=lambda: torch.randn(PAGES, PAGE, HKV, D, dtype=torch.float16)),
        (ERR, TypeError, "k_cache dtype .* != v_cache dtype"),
    ),
    "int8 cache": (
        with_(
            k_cache=lambda: torch.zeros(PAGES, PAGE, HKV, D, dtype=torch.int8),
            v_cache=lambda: torch.zeros(PAGES, PAGE, HKV, D, dtype=torch.int8),
        ),
        (ERR, TypeError, "KV cache dtype"),
    ),
    "float page_table": (
        with_(page_table=lambda: torch.tensor([[0.0, 1.0], [2.0, 3.0]])),
        (ERR, TypeError, "page_table must be int32"),
    ),
    "float cache_seqlens": (
        with_(cache_seqlens=lambda: torch.tensor([10.0, 5.0])),
        (ERR, TypeError, "cache_seqlens must be int32"),
    ),
    "sinks int": (with_(sinks=lambda: torch.ones(HQ, dtype=torch.int32)), (ERR, TypeError, "sinks must be a floating")),
    "descale fp16": (
        with_(
            k_cache=lambda: torch.zeros(PAGES, PAGE, HKV, D, dtype=torch.float8_e4m3fn),
            v_cache=lambda: torch.zeros(PAGES, PAGE, HKV, D, dtype=torch.float8_e4m3fn),
            k_descale=lambda: torch.ones(1, dtype=torch.float16),
            v_descale=lambda: torch.ones(1, dtype=torch.float16),
        ),
        (ERR, TypeError, "k_descale must be float32"),
    ),
    "out dtype": (with_(out=lambda: torch.empty(3, HQ, D, dtype=torch.float16)), (ERR, ValueError, "out must be")),
    # shapes
    "q 2-D": (with_(q=lambda: torch.randn(3, HQ * D)), (ERR, ValueError, "q must be")),
    "cache 3-D": (with_(k_cache=lambda: torch.randn(PAGES, PAGE, HKV * D)), (ERR, ValueError, "NHD pages")),
    "head_dim mismatch": (with_(q=lambda: torch.randn(3, HQ, 2 * D)), (ERR, ValueError, "head_dim")),
    "heads not a multiple": (with_(q=lambda: torch.randn(3, 3, D)), (ERR, ValueError, "multiple of num_kv_heads")),
    "v_cache pages differ": (
        with_(v_cache=lambda: torch.randn(PAGES - 1, PAGE, HKV, D)),
        (ERR, ValueError, "v_cache shape .* does not match k_cache"),
    ),
    "page_table 1-D": (with_(page_table=lambda: i32([0, 1])), (ERR, ValueError, "page_table must be \\[batch")),
    "cache_seqlens length": (with_(cache_seqlens=lambda: i32([10, 5, 1])), (ERR, ValueError, "cache_seqlens must be")),
    "cu_seqlens_q length": (with_(cu_seqlens_q=lambda: i32([0, 3])), (ERR, ValueError, "cu_seqlens_q must be")),
    "max_seqlen_q negative": (with_(max_seqlen_q=-1), (ERR, ValueError, "max_seqlen_q must be >= 0")),
    "out shape": (with_(out=lambda: torch.empty(3, HQ, 8)), (ERR, ValueError, "out must be")),
    "sinks shape": (with_(sinks=lambda: torch.zeros(2)), (ERR, ValueError, "sinks must have shape")),
    "alibi shape": (with_(alibi_slopes=lambda: torch.zeros(HQ, 1)), (ERR, ValueError, "alibi_slopes must have shape")),
    "descale shape": (
        with_(
            k_cache=lambda: torch.zeros(PAGES, PAGE, HKV, D, dtype=torch.float8_e4m3fn),
            v_cache=lambda: torch.zeros(PAGES, PAGE, HKV, D, dtype=torch.float8_e4m3fn),
            k_descale=lambda: torch.ones(3, 3),
            v_descale=lambda: torch.ones(3, 3),
        ),
        (ERR, ValueError, "k_descale must be a scalar"),
    ),
    "descale on a bf16 cache": (with_(k_descale=lambda: torch.ones(1)), (ERR, ValueError, "not FP8")),
    # strides
    "column-major page_table": (_edit(_colmajor_table), (ERR, ValueError, "page_table must have a contiguous last")),
    "strided cache_seqlens": (_edit(_strided_lens), (ERR, ValueError, "cache_seqlens must have a contiguous last")),
    "q head_dim not contiguous": (_edit(_noncontig_q), (ERR, ValueError, "q.*contiguous")),
    # scalars
    "softcap inf": (with_(softcap=math.inf), (ERR, ValueError, "softcap must be 0")),
    "softcap nan": (with_(softcap=math.nan), (ERR, ValueError, "softcap must be 0")),
    "softcap negative": (with_(softcap=-1.0), (ERR, ValueError, "softcap must be 0")),
    "scale 1e38": (with_(softmax_scale=1e38), (ERR, ValueError, "softmax_scale must be a finite number")),
    "scale 0": (with_(softmax_scale=0.0), (ERR, ValueError, "softmax_scale must be a finite number")),
    "scale nan": (with_(softmax_scale=math.nan), (ERR, ValueError, "softmax_scale must be a finite number")),
    "scale negative": (with_(softmax_scale=-0.25), (ERR, ValueError, "softmax_scale must be a finite number")),
    "window causal right": (with_(window_size=(4, 2)), (ERR, ValueError, "window_size right=2 with causal=True")),
    "window < -1": (with_(window_size=(-3, 0)), (ERR, ValueError, "window_size entries must be >= -1")),
    "window 3 entries": (with_(window_size=(1, 0, 0)), (ERR, ValueError, "window_size must be a \\(left, right\\)")),
    # values: documented correct results (the naive oracle's semantics)
    "nan/inf left of the window": (_edit(_nan_left_of_window), (RES, dict(window=(3, 0)))),
    "nan/inf left of the window + softcap": (_edit(_nan_softcap_window), (RES, dict(window=(3, 0), softcap=5.0))),
    "nan in page tails": (_edit(_nan_page_tail), (RES, {})),
    "nan in unused pages": (_edit(_nan_unused_pages), (RES, {})),
    "more queries than keys (causal)": (_edit(_more_queries_than_keys), (RES, {})),
    "a row with no key": (_edit(_zero_keys), (RES, {})),
    "zero-length queries": (_edit(_zero_length_queries), (RES, {})),
    "empty batch": (_edit(_empty_batch), (RES, {})),
    "sinks on a row with no key": (_edit(_sinks_no_key), (RES, dict(sinks="sinks"))),
    "sinks of -inf, no key": (_edit(_sinks_all_minus_inf_no_key), (RES, dict(sinks="sinks"))),
    "sinks of -inf, no key, non-causal": (_edit(_sinks_noncausal_no_key), (RES, dict(sinks="sinks", causal=False))),
    # values only the device sees
    "page id past the cache": (with_(page_table=lambda: i32([[0, 10**6], [2, 3]])), (FLAG, "page_table", [0])),
    "negative page id": (with_(page_table=lambda: i32([[0, 1], [-7, 3]])), (FLAG, "page_table", [1])),
    "table too narrow": (with_(cache_seqlens=lambda: i32([10, 17])), (FLAG, "page_table|cache_seqlens", [1])),
    "negative cache_seqlens": (with_(cache_seqlens=lambda: i32([10, -1])), (FLAG, "cache_seqlens", [1])),
    "cu_seqlens_q past q": (with_(cu_seqlens_q=lambda: i32([0, 2, 40]), max_seqlen_q=38), (FLAG, "cu_seqlens_q", [1])),
    "cu_seqlens_q decreasing": (
        with_(cu_seqlens_q=lambda: i32([0, 3, 2]), max_seqlen_q=3),
        (FLAG, "cu_seqlens_q", [1]),
    ),
}
