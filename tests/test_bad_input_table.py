"""Bad input, case by case (tests/support/bad_input_cases.py), against every provider on the CPU (Triton in its
interpreter): each case gives its one documented outcome, the inputs are never modified, and the cases
that would read or write outside a tensor without the kernels' guards run in subprocesses, so a crash
fails its test instead of the run."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import re  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from bad_input_cases import CASES, ERR, RES  # noqa: E402
from naive import naive_paged_attention  # noqa: E402

from vllm_xpu_attn import core  # noqa: E402
from vllm_xpu_attn.kernels.api import (
    FLAGS,  # noqa: E402
    get_provider,  # noqa: E402
)

PROVIDERS = [("reference", {}), ("torch_sdpa", {}), ("triton", {}), ("triton", {"num_splits": 2})]
PIDS = ["reference", "torch_sdpa", "triton", "triton-split-k"]
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SUPPORT = os.path.join(HERE, "support")


def _snapshot(kw: dict) -> dict:
    return {k: v.clone() for k, v in kw.items() if isinstance(v, torch.Tensor)}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, NaN included."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)) if a.numel() else True


def _assert_inputs_unchanged(kw: dict, before: dict) -> None:
    for k, v in before.items():
        if k == "out":
            continue
        assert _same(kw[k], v), f"the call modified its input {k}"


def _oracle(kw: dict, opts: dict):
    args = dict(scale=kw.get("softmax_scale"), causal=kw.get("causal", True))
    for k, v in opts.items():
        args[k] = kw[v] if v == "sinks" else v
    return naive_paged_attention(
        kw["q"], kw["k_cache"], kw["v_cache"], kw["page_table"], kw["cache_seqlens"], kw["cu_seqlens_q"], **args
    )


@pytest.fixture(autouse=True)
def _clean_flags():
    FLAGS.clear()
    yield
    FLAGS.clear()


@pytest.mark.parametrize("prov,opts", PROVIDERS, ids=PIDS)
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_case(case, prov, opts):
    make, outcome = CASES[case]
    p = get_provider(prov)
    kw = make()
    before = _snapshot(kw)
    kind = outcome[0]
    if kind == ERR:
        _, exc, pattern = outcome
        out = kw.pop("out", None)
        sentinel = None if out is None else out.clone()
        with pytest.raises(exc, match=pattern):
            p.flash_attn_with_kvcache(**kw, out=out, **opts)
        if out is not None:
            assert _same(out, sentinel), "a refused call wrote into out"
    elif kind == RES:
        want, want_lse = _oracle(kw, outcome[1])
        total_q = kw["q"].shape[0]
        out = torch.full((total_q, kw["q"].shape[1], kw["v_cache"].shape[-1]), 7.0, dtype=kw["q"].dtype)
        res, lse = p.flash_attn_with_kvcache(**kw, out=out, return_softmax_lse=True, **opts)
        assert res is out
        assert torch.isfinite(out).all(), "non-finite values in a documented-finite result"
        torch.testing.assert_close(out.double(), want, atol=2e-5, rtol=2e-5)
        fin = torch.isfinite(want_lse)
        assert torch.equal(torch.isfinite(lse), fin) and torch.equal(lse[~fin], want_lse[~fin].float()), (
            "LSE of rows that see nothing (and their sinks) differ from the convention"
        )
        torch.testing.assert_close(lse[fin].double(), want_lse[fin], atol=2e-5, rtol=2e-5)
    else:
        _, arg, bad_seqs = outcome
        total_q = kw["q"].shape[0]
        out = torch.full((total_q, kw["q"].shape[1], kw["v_cache"].shape[-1]), 7.0, dtype=kw["q"].dtype)
        with pytest.raises(ValueError, match=arg):
            p.flash_attn_with_kvcache(**kw, out=out, **opts)
        if (out == 7.0).all():
            pass  # refused on the host before anything was written (the reference; host-side providers)
        else:  # a guarded kernel ran: the bad sequences' rows that exist are NaN, never plausible numbers
            cu = kw["cu_seqlens_q"].tolist()
            for b in bad_seqs:
                lo, hi = max(cu[b], 0), min(max(cu[b + 1], cu[b]), total_q)
                assert torch.isnan(out[lo:hi]).all(), f"sequence {b}'s rows are not NaN"
    _assert_inputs_unchanged(kw, before)


# ---- the same checks through the layer path (LayerSpec -> plan_step -> LayerRunner) ------------------
@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(v_head_dim=0), "v_head_dim must be an int >= 1 or None"),
        (dict(v_head_dim=-16), "v_head_dim must be an int >= 1"),
        (dict(head_dim=0), "head_dim must be an int >= 1"),
        (dict(scale=1e38), "softmax_scale must be a finite number"),
        (dict(scale=float("nan")), "softmax_scale must be a finite number"),
        (dict(softcap=float("inf")), "softcap must be 0"),
        (dict(softcap=float("nan")), "softcap must be 0"),
        (dict(dtype=torch.int8), "dtype torch.int8 unsupported"),
        (dict(kv_dtype=torch.int8), "kv_dtype torch.int8 unsupported"),
        (dict(kind="decoder"), "kind must be an AttentionKind"),
    ],
)
def test_layer_spec_refuses(kw, match):
    spec = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25)
    spec.update(kw)
    with pytest.raises((ValueError, TypeError), match=match):
        core.LayerSpec(**spec)


def _step(**over):
    kw = dict(
        mode=core.Mode.DECODE,
        seq_lens=torch.tensor([10, 5]),
        max_seqlen_k=10,
        num_tokens=2,
        page_size=8,
        page_table=torch.tensor([[0, 1], [2, 3]], dtype=torch.int32),
    )
    kw.update(over)
    return kw


@pytest.mark.parametrize(
    "over,match",
    [
        (dict(page_size=0), "page_size must be an int >= 1"),
        (dict(mode="sideways"), "mode must be a Mode"),
        (
            dict(mode=core.Mode.EXTEND, seq_lens=torch.tensor([10, 5, 3]), query_lens=torch.tensor([2, 1])),
            "seq_lens \\[3\\] and query_lens",
        ),
        (
            dict(mode=core.Mode.EXTEND, seq_lens=torch.tensor([10, 5, 3]), cu_seqlens_q=torch.tensor([0, 2, 3])),
            "seq_lens \\[3\\] and cu_seqlens_q",
        ),
        (dict(seq_lens=torch.tensor([[10, 5]])), "seq_lens must be an int tensor \\[batch\\]"),
        (dict(max_seqlen_k=-1), "max_seqlen_k"),
        (
            dict(seq_lens=torch.tensor([10, -3])),
            "seq_lens must be >= 0 \\(keys per sequence\\), got seq_lens\\[1\\]=-3",
        ),
    ],
)
def test_plan_step_refuses(over, match):
    with pytest.raises(ValueError, match=match):
        core.plan_step(core.StepInputs(**_step(**over)))


def test_mode_by_its_value_string_is_that_mode():
    plan = core.plan_step(core.StepInputs(**_step(mode="decode")))
    assert plan.mode is core.Mode.DECODE


def test_layer_write_compares_v_cache_with_k_cache():
    """A V cache that differs from the K cache in KV heads or dtype is refused by the layer's write, before any
    store, even where each new tensor matches its own cache (which is all a provider's write compares)."""
    spec = core.LayerSpec(
        num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25, dtype=torch.float32, kv_dtype=torch.float32
    )
    runner = core.LayerRunner(spec, "cpu", 8, override="reference")
    k, kc, slots = torch.ones(1, 2, 16), torch.zeros(4, 8, 2, 16), torch.tensor([9])
    with pytest.raises(ValueError, match="v_cache .* must match k_cache"):
        runner.write_kv(k, torch.ones(1, 1, 16), kc, torch.zeros(4, 8, 1, 16), slots)
    with pytest.raises(ValueError, match="v_cache .* must match k_cache"):
        runner.write_kv(k, k.half(), kc, torch.zeros(4, 8, 2, 16, dtype=torch.float16), slots)
    assert not kc.any(), "a refused write stored into the K cache"


def test_sink_layer_run_without_sinks_is_refused():
    spec = core.LayerSpec(
        num_q_heads=4,
        num_kv_heads=2,
        head_dim=16,
        scale=0.25,
        has_sinks=True,
        dtype=torch.float32,
        kv_dtype=torch.float32,
    )
    runner = core.LayerRunner(spec, "cpu", 8, override="reference")
    plan = core.plan_step(core.StepInputs(**_step()))
    with pytest.raises(ValueError, match="ran before its sinks were bound"):
        runner.forward(plan, torch.randn(2, 4, 16), torch.randn(4, 8, 2, 16), torch.randn(4, 8, 2, 16))


@pytest.mark.parametrize("prov", ["reference", "triton"])
def test_a_refused_direct_call_leaves_the_layer_path_refusing(prov):
    """A column-major table refused by a direct call must not leave a cached launch configuration behind that
    the layer path would then accept."""
    kw = CASES["column-major page_table"][0]()
    p = get_provider(prov)
    with pytest.raises(ValueError, match="contiguous last"):
        p.flash_attn_with_kvcache(**kw)
    spec = core.LayerSpec(
        num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25, dtype=torch.float32, kv_dtype=torch.float32
    )
    runner = core.LayerRunner(spec, "cpu", 8, override=prov)
    plan = core.plan_step(
        core.StepInputs(
            mode=core.Mode.EXTEND,
            seq_lens=kw["cache_seqlens"],
            max_seqlen_k=10,
            num_tokens=3,
            page_size=8,
            page_table=kw["page_table"],
            cu_seqlens_q=kw["cu_seqlens_q"],
            max_seqlen_q=2,
        )
    )
    with pytest.raises(ValueError, match="contiguous last"):
        runner.forward(plan, kw["q"], kw["k_cache"], kw["v_cache"])


def test_the_layer_path_reports_device_flags_at_the_next_step():
    """Through LayerRunner (no per-call check): a bad page id is answered with NaN rows and raised, naming the
    argument, at the next plan_step (the step boundary), once."""
    spec = core.LayerSpec(
        num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25, dtype=torch.float32, kv_dtype=torch.float32
    )
    runner = core.LayerRunner(spec, "cpu", 8, override="triton")
    kc, vc = torch.randn(4, 8, 2, 16), torch.randn(4, 8, 2, 16)
    plan = core.plan_step(core.StepInputs(**_step(page_table=torch.tensor([[0, 99], [2, 3]], dtype=torch.int32))))
    out = runner.forward(plan, torch.randn(2, 4, 16), kc, vc)
    assert torch.isnan(out[0]).all() and torch.isfinite(out[1]).all()
    with pytest.raises(ValueError, match="page_table: sequence 0 references page 99"):
        core.plan_step(core.StepInputs(**_step()))
    core.plan_step(core.StepInputs(**_step()))  # reported once


def test_the_kernels_flags_are_named_in_step_inputs_terms():
    """A length the kernels flag on the device (no host read) is reported at the next plan_step, in the kernels'
    words and in the StepInputs argument the caller passed (seq_lens)."""
    spec = core.LayerSpec(
        num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25, dtype=torch.float32, kv_dtype=torch.float32
    )
    runner = core.LayerRunner(spec, "cpu", 8, override="triton")
    kc, vc = torch.randn(4, 8, 2, 16), torch.randn(4, 8, 2, 16)
    plan = core.plan_step(core.StepInputs(**_step(seq_lens=torch.tensor([10, 17]))))  # row 1: 17 keys, 2 pages of 8
    runner.forward(plan, torch.randn(2, 4, 16), kc, vc)
    with pytest.raises(
        ValueError, match="cache_seqlens: sequence 1 has 17 keys.*in StepInputs terms: cache_seqlens is seq_lens"
    ):
        core.plan_step(core.StepInputs(**_step()))


@pytest.mark.parametrize("kind", ["cuda", "xpu"])
def test_layer_runner_refuses_a_device_this_host_lacks(kind):
    """Refused at construction, naming the device asked for and what this host has (one past the last device of
    that type: absent on every host)."""
    mod = getattr(torch, kind)
    device = f"{kind}:{mod.device_count()}" if mod.is_available() else kind
    spec = core.LayerSpec(num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25)
    with pytest.raises(ValueError, match=f"LayerRunner\\(device='{device}'\\): this host has .*cpu"):
        core.LayerRunner(spec, device, 8)


@pytest.mark.parametrize("prov", ["reference", "torch_sdpa", "triton"])
def test_a_plan_of_another_page_size_is_refused_never_run(prov):
    """A runner's providers were chosen for its page size: a plan (and cache) of another page size is refused
    before any launch, naming both sizes."""
    spec = core.LayerSpec(
        num_q_heads=4, num_kv_heads=2, head_dim=16, scale=0.25, dtype=torch.float32, kv_dtype=torch.float32
    )
    runner = core.LayerRunner(spec, "cpu", 16, override=prov)
    plan = core.plan_step(core.StepInputs(**_step()))  # page size 8, as the caches below
    out = torch.full((2, 4, 16), 7.0)
    with pytest.raises(
        ValueError, match="main sub-plan has page size 8, but this LayerRunner was built for page size 16"
    ):
        runner.forward(plan, torch.randn(2, 4, 16), torch.randn(4, 8, 2, 16), torch.randn(4, 8, 2, 16), out)
    assert (out == 7.0).all() and not plan.launches, "a refused plan was run"


# ---- write_kv: everything checked before the first store --------------------------------------------
def _write_case():
    kc, vc = torch.zeros(4, 8, 2, 16), torch.zeros(4, 8, 2, 16)
    return torch.ones(2, 2, 16), torch.ones(2, 2, 16), kc, vc, torch.tensor([0, 9])


@pytest.mark.parametrize("prov", ["reference", "triton"])
@pytest.mark.parametrize(
    "name,edit,exc,match",
    [
        ("bad v shape", lambda a: a.__setitem__(1, torch.ones(2, 2, 8)), ValueError, "v must be"),
        ("bad v dtype", lambda a: a.__setitem__(1, torch.ones(2, 2, 16, dtype=torch.float16)), TypeError, "v dtype"),
        (
            "slot past the cache",
            lambda a: a.__setitem__(4, torch.tensor([0, 10**9])),
            ValueError,
            "slot_mapping\\[1\\]",
        ),
        ("float slots", lambda a: a.__setitem__(4, torch.tensor([0.0, 9.0])), TypeError, "slot_mapping must be"),
        ("2-D slots", lambda a: a.__setitem__(4, torch.tensor([[0, 9]])), TypeError, "slot_mapping must be"),
        ("v_cache pages differ", lambda a: a.__setitem__(3, torch.zeros(3, 8, 2, 16)), ValueError, "v_cache"),
    ],
)
def test_write_kv_refuses_before_writing(prov, name, edit, exc, match):
    args = list(_write_case())
    edit(args)
    kc, vc = args[2], args[3]
    k0, v0 = kc.clone(), vc.clone()
    with pytest.raises(exc, match=match):
        get_provider(prov).write_kv(*args)
    assert _same(kc, k0) and _same(vc, v0), "a refused write_kv left the cache half written"


@pytest.mark.parametrize("prov", ["reference", "triton"])
def test_write_kv_writes_only_its_slots(prov):
    k, v, kc, vc, slots = _write_case()
    slots = torch.tensor([-1, 9])  # -1: padding, skipped
    get_provider(prov).write_kv(k, v, kc, vc, slots)
    assert (kc[1, 1] == 1).all() and (vc[1, 1] == 1).all()
    kc[1, 1] = 0
    vc[1, 1] = 0
    assert not kc.any() and not vc.any(), "slots other than the written ones changed"


# ---- out-of-bounds values in a subprocess: a crash fails the test, not the run ----------------------
OOB = {
    "page id 10**6": "page_table",
    "cu_seqlens_q[-1] past q": "cu_seqlens_q",
    "write_kv slot 10**9": "slot_mapping",
    "token table cut short": "page_table|cache_seqlens",
    "token_rows past the pool": "token_rows",
}


@pytest.mark.parametrize("case", list(OOB))
def test_out_of_bounds_values_in_a_subprocess(case):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([REPO, SUPPORT]))
    proc = subprocess.run(
        [sys.executable, os.path.join(SUPPORT, "bad_input_oob.py"), case],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"exit {proc.returncode} (a crash?):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert re.search(f"REFUSED .*({OOB[case]})", proc.stdout), proc.stdout[-2000:]
    assert "NAN-ROWS-OK" in proc.stdout or "NO-ROWS" in proc.stdout, proc.stdout[-2000:]
