"""Random paged-attention layouts (hypothesis strategies) shared by the provider tests."""

from __future__ import annotations

import dataclasses
import math

import torch
from hypothesis import strategies as st

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
FP8 = [torch.float8_e4m3fn, torch.float8_e5m2]
# Output tolerance vs the fp64 naive oracle: the output is rounded to the q dtype.
ATOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


@dataclasses.dataclass
class Layout:
    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    page_table: torch.Tensor
    cache_seqlens: torch.Tensor
    cu_seqlens_q: torch.Tensor
    max_seqlen_q: int
    kwargs: dict  # softmax_scale, causal, window_size, softcap, sinks, alibi_slopes, k/v_descale

    def to(self, device) -> "Layout":
        mv = lambda t: t.to(device) if isinstance(t, torch.Tensor) else t  # noqa: E731
        return Layout(
            mv(self.q),
            mv(self.k_cache),
            mv(self.v_cache),
            mv(self.page_table),
            mv(self.cache_seqlens),
            mv(self.cu_seqlens_q),
            self.max_seqlen_q,
            {k: mv(v) for k, v in self.kwargs.items()},
        )

    def args(self):
        return (
            self.q,
            self.k_cache,
            self.v_cache,
            self.page_table,
            self.cache_seqlens,
            self.cu_seqlens_q,
            self.max_seqlen_q,
        )

    def logit_bound(self) -> float:
        """An upper bound of |logit| (Cauchy-Schwarz: scale * max ||q_t|| * max ||k|| * max k_descale)."""
        if not self.q.numel() or not self.k_cache.numel():
            return 0.0
        scale = self.kwargs["softmax_scale"] or self.q.shape[-1] ** -0.5
        kd = self.kwargs.get("k_descale")
        kmax = float(kd.max()) if kd is not None else 1.0
        return float(scale * self.q.float().norm(dim=-1).max() * self.k_cache.float().norm(dim=-1).max() * kmax)

    def naive_kwargs(self) -> dict:
        k = self.kwargs
        return dict(
            scale=k["softmax_scale"],
            causal=k["causal"],
            window=k["window_size"],
            softcap=k["softcap"],
            sinks=k["sinks"],
            alibi=k["alibi_slopes"],
            k_descale=k["k_descale"],
            v_descale=k["v_descale"],
        )


@st.composite
def layouts(
    draw,
    *,
    page_sizes=(1, 16, 64, 128),
    max_batch=4,
    max_ctx=300,
    max_new=12,
    head_dims=(16, 32),
    dtypes=DTYPES,
    allow_fp8=True,
    allow_features=True,
    gqa=(1, 2, 4),
    max_kv_heads=2,
    always_fp8=False,
) -> Layout:
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    dtype = draw(st.sampled_from(dtypes))
    page_size = draw(st.sampled_from(page_sizes))
    hkv = draw(st.integers(1, max_kv_heads))
    hq = hkv * draw(st.sampled_from(gqa))
    d = draw(st.sampled_from(head_dims))
    batch = draw(st.integers(0, max_batch))
    causal = draw(st.booleans()) if allow_features else True
    q_lens, k_lens = [], []
    for _ in range(batch):
        kind = draw(st.sampled_from(["decode", "extend", "prefill", "empty"]))
        k_len = draw(st.integers(0 if kind == "empty" else 1, max_ctx))
        if kind == "decode":
            q_len = 1
        elif kind == "prefill":
            q_len = min(k_len, max_new)
            k_len = q_len
        elif kind == "extend":
            q_len = draw(st.integers(1, min(k_len, max_new)))
        else:
            q_len = 0
        q_lens.append(q_len)
        k_lens.append(k_len)

    pages_needed = [math.ceil(k / page_size) for k in k_lens]
    extra_cols = draw(st.integers(0, 2))
    width = max(pages_needed + [0]) + extra_cols
    num_pages = sum(pages_needed) + draw(st.integers(1, 3))
    perm = torch.randperm(num_pages, generator=gen)  # non-contiguous, shuffled page ids
    table = torch.randint(0, num_pages, (batch, width), generator=gen, dtype=torch.int32)  # padding: any page
    used = 0
    for b, n in enumerate(pages_needed):
        table[b, :n] = perm[used : used + n].to(torch.int32)
        used += n
    if draw(st.booleans()) and batch:  # a non-contiguous page-table tensor (a column slice of a wider one)
        wide = torch.zeros(batch, width + 3, dtype=torch.int32)
        wide[:, 1 : width + 1] = table
        table = wide[:, 1 : width + 1]

    fp8 = always_fp8 or (allow_fp8 and draw(st.booleans()) and draw(st.booleans()))  # ~25% of layouts
    kv_dtype = draw(st.sampled_from(FP8)) if fp8 else dtype
    total_q = sum(q_lens)
    q_mult = draw(st.sampled_from([1.0, 4.0]))  # larger logits make softcap/softmax differences visible
    q = (torch.randn(total_q, hq, d, generator=gen) * q_mult).to(dtype)
    k_cache = torch.randn(num_pages, page_size, hkv, d, generator=gen).to(kv_dtype)
    v_cache = torch.randn(num_pages, page_size, hkv, d, generator=gen).to(kv_dtype)

    kw = dict(
        softmax_scale=None,
        causal=causal,
        window_size=(-1, -1),
        softcap=0.0,
        sinks=None,
        alibi_slopes=None,
        k_descale=None,
        v_descale=None,
    )
    if draw(st.booleans()):
        kw["softmax_scale"] = draw(st.floats(0.05, 0.5))
    if allow_features:
        if draw(st.booleans()):
            left = draw(st.integers(0, max_ctx))
            right = 0 if causal else draw(st.integers(-1, 8))
            kw["window_size"] = (left, right)
        if draw(st.booleans()):
            kw["softcap"] = draw(st.floats(2.0, 30.0))
        if draw(st.booleans()):
            kw["sinks"] = torch.randn(hq, generator=gen) * 2
        if draw(st.booleans()):
            kw["alibi_slopes"] = torch.rand(hq, generator=gen) * 0.3
    if fp8:
        if draw(st.booleans()):
            kw["k_descale"] = torch.rand(1, generator=gen) + 0.5
            kw["v_descale"] = torch.rand(1, generator=gen) + 0.5
        else:
            kw["k_descale"] = torch.rand(batch, hkv, generator=gen) + 0.5
            kw["v_descale"] = torch.rand(batch, hkv, generator=gen) + 0.5
    cu = (
        torch.tensor([0] + list(torch.cumsum(torch.tensor(q_lens, dtype=torch.int64), 0)), dtype=torch.int32)
        if batch
        else torch.zeros(1, dtype=torch.int32)
    )
    return Layout(
        q,
        k_cache,
        v_cache,
        table,
        torch.tensor(k_lens, dtype=torch.int32),
        cu,
        max(q_lens + [0]) + draw(st.integers(0, 2)),
        kw,
    )


def assert_close_to(
    out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "out", logit_bound: float = 0.0
) -> None:
    """out (any dtype) vs an oracle ref; tolerance from the q dtype.

    fp32: an fp32 logit s carries a rounding error of ~eps32 * |s|, which exp() turns into a *relative*
    error of each probability; with large logits (|q| x4, scale 0.5: |s| ~ 100) that exceeds the flat
    2e-5, so fp32 adds 2 * eps32 * ``logit_bound`` (Layout.logit_bound) to the absolute tolerance.
    """
    atol = ATOL[dtype]
    if dtype == torch.float32:
        atol += 2 * torch.finfo(torch.float32).eps * logit_bound
    err = (out.double() - ref.double()).abs()
    bound = atol + atol * ref.double().abs()
    if err.numel() and not bool((err <= bound).all()):
        idx = int(torch.argmax(err - bound))
        raise AssertionError(
            f"{what}: max excess error {float((err - bound).max()):.3g} at flat index {idx}"
            f" (got {float(out.flatten()[idx]):.6g}, want {float(ref.flatten()[idx]):.6g}, atol {atol:.3g})"
        )


def assert_lse_close(lse: torch.Tensor, ref: torch.Tensor, tol: float = 1e-3) -> None:
    lse, ref = lse.double().cpu(), ref.double()
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(lse), fin), "lse: -inf pattern differs"
    if fin.any():
        assert float((lse[fin] - ref[fin]).abs().max()) <= tol * (1 + float(ref[fin].abs().max())), "lse differs"
