"""Bad input raises ValueError/TypeError naming the problem, never wrong output or a torch-internal crash."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton cases run through its interpreter on the CPU

import pytest
import torch

from vllm_xpu_attn import core
from vllm_xpu_attn.core import LayerSpec
from vllm_xpu_attn.kernels.api import get_provider

REF = get_provider("reference")


def good():
    return dict(
        q=torch.randn(3, 4, 16),
        k_cache=torch.randn(4, 8, 2, 16),
        v_cache=torch.randn(4, 8, 2, 16),
        page_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
        cache_seqlens=torch.tensor([10, 5], dtype=torch.int32),
        cu_seqlens_q=torch.tensor([0, 2, 3], dtype=torch.int32),
        max_seqlen_q=2,
    )


def call(**over):
    kw = good()
    kw.update(over)
    return REF.flash_attn_with_kvcache(**kw)


CASES = [
    ("head_dim of q", dict(q=torch.randn(3, 4, 32)), ValueError),
    ("q dtype .* and KV cache dtype", dict(q=torch.randn(3, 4, 16, dtype=torch.float16)), TypeError),
    ("k_cache dtype .* != v_cache dtype", dict(v_cache=torch.randn(4, 8, 2, 16, dtype=torch.float16)), TypeError),
    ("page_table too short", dict(cache_seqlens=torch.tensor([17, 5], dtype=torch.int32)), ValueError),
    ("non-decreasing", dict(cu_seqlens_q=torch.tensor([0, 3, 2], dtype=torch.int32), max_seqlen_q=3), ValueError),
    ("must start at 0", dict(cu_seqlens_q=torch.tensor([-1, 2, 3], dtype=torch.int32)), ValueError),
    (
        "cache_seqlens must be >= 0 .*got cache_seqlens\\[1\\]=-1",
        dict(cache_seqlens=torch.tensor([10, -1], dtype=torch.int32)),
        ValueError,
    ),
    (
        "KV cache dtype .* unsupported",
        dict(k_cache=torch.zeros(4, 8, 2, 16, dtype=torch.int8), v_cache=torch.zeros(4, 8, 2, 16, dtype=torch.int8)),
        TypeError,
    ),
    ("q dtype torch.float64 unsupported", dict(q=torch.randn(3, 4, 16, dtype=torch.float64)), TypeError),
    ("window_size right=2 with causal=True", dict(window_size=(4, 2)), ValueError),
    ("window_size entries must be >= -1", dict(window_size=(-3, 0)), ValueError),
    ("sinks must have shape", dict(sinks=torch.zeros(2)), ValueError),
    ("alibi_slopes must have shape", dict(alibi_slopes=torch.zeros(4, 1)), ValueError),
    ("multiple of num_kv_heads", dict(q=torch.randn(3, 3, 16)), ValueError),
    ("page_table must be int32", dict(page_table=torch.tensor([[0.0, 1.0], [2.0, 3.0]])), TypeError),
    ("cu_seqlens_q\\[-1\\]=3 but q has only 2 tokens", dict(q=torch.randn(2, 4, 16)), ValueError),
    ("max_seqlen_q=1 is smaller", dict(max_seqlen_q=1), ValueError),
    ("references page 9", dict(page_table=torch.tensor([[0, 9], [2, 3]], dtype=torch.int32)), ValueError),
    ("k_descale/v_descale given but the KV cache is", dict(k_descale=torch.ones(1)), ValueError),
    (
        "k_descale must be float32",
        dict(
            k_cache=torch.zeros(4, 8, 2, 16, dtype=torch.float8_e4m3fn),
            v_cache=torch.zeros(4, 8, 2, 16, dtype=torch.float8_e4m3fn),
            k_descale=torch.ones(1, dtype=torch.float16),
        ),
        TypeError,
    ),
    (
        "k_descale must be a scalar, \\[1\\] or \\[batch, num_kv_heads\\]",
        dict(
            k_cache=torch.zeros(4, 8, 2, 16, dtype=torch.float8_e4m3fn),
            v_cache=torch.zeros(4, 8, 2, 16, dtype=torch.float8_e4m3fn),
            k_descale=torch.ones(3, 3),
        ),
        ValueError,
    ),
    ("NHD pages", dict(k_cache=torch.randn(4, 8, 32)), ValueError),
    ("cache_seqlens must be \\[batch\\]", dict(cache_seqlens=torch.tensor([10, 5, 1], dtype=torch.int32)), ValueError),
    ("out must be", dict(out=torch.empty(3, 4, 8)), ValueError),
    ("softcap must be 0 \\(off\\) or a finite number", dict(softcap=-1.0), ValueError),
    ("q must be a torch.Tensor", dict(q=[[1.0]]), TypeError),
]


@pytest.mark.parametrize("match,over,exc", CASES, ids=[c[0][:40] for c in CASES])
def test_bad_kernel_call(match, over, exc):
    with pytest.raises(exc, match=match):
        call(**over)


def test_good_call_is_fine():
    assert call().shape == (3, 4, 16)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(num_q_heads=6, num_kv_heads=4), "multiple of num_kv_heads"),
        (dict(num_kv_heads=0), "num_kv_heads must be an int >= 1, got 0"),  # the kernels' words (contract.check_heads)
        (dict(head_dim=0), "head_dim must be an int >= 1"),
        (dict(window_left=-5), "window_left"),
        (dict(softcap=-2.0), "softcap"),
        (dict(alibi_slopes=(0.1,)), "alibi_slopes has 1 entries"),
        (dict(kind=core.AttentionKind.CROSS, window_left=4), "cross-attention"),
    ],
)
def test_bad_layer_spec(kw, match):
    base = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25)
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        LayerSpec(**base)


def _step(**over) -> core.StepInputs:
    kw = dict(
        mode=core.Mode.EXTEND,
        seq_lens=torch.ones(1, dtype=torch.int32),
        max_seqlen_k=1,
        num_tokens=1,
        page_size=1,
        query_lens=torch.ones(1, dtype=torch.int32),
        page_table=torch.zeros(1, 1, dtype=torch.int32),
    )
    kw.update(over)
    return core.StepInputs(**kw)


@pytest.mark.parametrize(
    "over,match",
    [
        (dict(page_size=0), "page_size must be an int >= 1"),
        (dict(query_lens=torch.ones(2, dtype=torch.int32)), "seq_lens \\[1\\] and query_lens \\[2\\] disagree"),
        (dict(query_lens=torch.ones(1, 1, dtype=torch.int32)), "query_lens \\[1, 1\\] disagree"),
        (dict(page_table=torch.zeros(2, 1, dtype=torch.int32)), "page_table must be \\[batch=1, max_pages\\]"),
        (dict(max_seqlen_k=2), "page table too short"),
        (dict(mode=core.Mode.TARGET_VERIFY, spec=core.SpecDecodeShape(topk=2, num_draft=0)), "num_draft"),
    ],
)
def test_bad_planner_input(over, match):
    with pytest.raises(ValueError, match=match):
        core.plan_step(_step(**over))


def test_kv_cache_checks_on_the_layer_write():
    """The caches an engine hands a layer are checked by LayerRunner.write_kv before anything is stored."""
    spec = LayerSpec(num_q_heads=2, num_kv_heads=1, head_dim=4, scale=0.5, dtype=torch.float32, kv_dtype=torch.float32)
    runner = core.LayerRunner(spec, "cpu", 1, override="reference")
    new, slots = torch.ones(1, 1, 4), torch.zeros(1, dtype=torch.int64)
    with pytest.raises(ValueError, match="k_cache must be \\[num_pages, page_size, num_kv_heads, head_dim\\]"):
        runner.write_kv(new, new, torch.zeros(2, 3), torch.zeros(2, 3), slots)
    kc = torch.zeros(1, 1, 1, 4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="configured KV dtype"):
        runner.write_kv(new.bfloat16(), new.bfloat16(), kc, kc.clone(), slots)
    assert not kc.any()


def test_write_kv_shape_mismatch():
    kc = torch.zeros(2, 4, 2, 8)
    with pytest.raises(ValueError, match="to match the cache"):
        REF.write_kv(torch.zeros(3, 2, 4), torch.zeros(3, 2, 4), kc, kc.clone(), torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="does not match KV cache dtype"):
        REF.write_kv(
            torch.zeros(3, 2, 8, dtype=torch.float16),
            torch.zeros(3, 2, 8, dtype=torch.float16),
            kc,
            kc.clone(),
            torch.zeros(3, dtype=torch.int64),
        )


@pytest.mark.parametrize(
    "name,opts",
    [("reference", {}), ("triton", {}), ("triton", {"num_splits": 2}), ("torch_sdpa", {})],
    ids=["reference", "triton", "triton-split-k", "torch_sdpa"],
)
def test_trailing_padding_rows_are_left_alone(name, opts):
    """Rows after cu_seqlens_q[-1] are padding (vLLM pads a graph replay's tokens): untouched, and the
    real rows are what an unpadded call computes."""
    prov = get_provider(name)
    if prov.unavailable_reason():
        pytest.fail(prov.unavailable_reason())
    kw = good()
    want = prov.flash_attn_with_kvcache(**kw, **opts)
    q = torch.cat([kw["q"], torch.randn(2, 4, 16)])
    out = torch.full((5, 4, 16), 7.0)
    prov.flash_attn_with_kvcache(**{**kw, "q": q}, out=out, **opts)
    assert torch.equal(out[3:], torch.full((2, 4, 16), 7.0))
    torch.testing.assert_close(out[:3], want, atol=1e-5, rtol=1e-5)
