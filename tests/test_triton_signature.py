"""The Triton provider's launch keys (vllm_xpu_attn/kernels/providers/triton/signature.py): every field a kept
launch depends on, changed alone, gives a new key (a field left out would silently re-use a wrong compiled
specialisation or configuration); equal inputs give an equal key; what must not split the cache (addresses
beyond their 16-byte alignment, max_seqlen_k) does not.

Tensors are stand-ins with shape / stride() / dtype / get_device() / data_ptr() (what the keys read), so that a
device index and an address can be set on the CPU; the per-layer tensors are real (LayerTensors.make).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from vllm_xpu_attn.kernels.api import LayerConsts, LayerTensors, PagedStep
from vllm_xpu_attn.kernels.providers.triton import signature as S

BASE = 0x7F0000000000  # a 16-byte aligned address; each stand-in gets its own


class FakeTensor:
    """What the keys read of a tensor: shape, stride(), dtype, get_device(), data_ptr() (and .device)."""

    _next = itertools.count()

    def __init__(self, shape, stride, dtype, device: int = 0, ptr: int | None = None):
        self.shape = torch.Size(shape)
        self._stride = tuple(stride)
        self.dtype = dtype
        self._device = device
        self._ptr = BASE + 4096 * next(self._next) if ptr is None else ptr

    def stride(self, dim: int | None = None):
        return self._stride if dim is None else self._stride[dim]

    def get_device(self) -> int:
        return self._device

    def data_ptr(self) -> int:
        return self._ptr

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self._device)

    def but(self, **kw) -> "FakeTensor":
        """A copy with fields replaced (shape, stride, dtype, device, ptr); a fresh aligned address unless given."""
        f = dict(shape=self.shape, stride=self._stride, dtype=self.dtype, device=self._device, ptr=None)
        f.update(kw)
        return FakeTensor(**f)


def _stride_variants(t: FakeTensor, name: str) -> dict:
    """Each stride of ``t`` changed alone (+16: the % 16 class kept, so only the value differs)."""
    out = {}
    for i in range(len(t.shape)):
        st = list(t.stride())
        st[i] += 16
        out[f"{name}.stride[{i}]"] = t.but(stride=st)
    return out


def _tensor_variants(t: FakeTensor, name: str, other_dtype: torch.dtype) -> dict:
    """Shape, each stride, dtype, device index and 16-byte alignment of ``t``, each changed alone."""
    shape = list(t.shape)
    shape[0] += 1
    return {
        f"{name}.shape": t.but(shape=shape),
        **_stride_variants(t, name),
        f"{name}.dtype": t.but(dtype=other_dtype),
        f"{name}.device": t.but(device=t.get_device() + 1),
        f"{name}.misaligned": t.but(ptr=t.data_ptr() + 4),
    }


def _assert_all_distinct(keys: dict) -> None:
    """Every variation's key differs from the base's and from every other variation's."""
    seen: dict = {}
    for what, key in keys.items():
        hash(key)  # a dict key
        assert key not in seen, f"{what!r} gives the same key as {seen[key]!r}: a field is missing from the key"
        seen[key] = what


# ---- the step signature (provider._configs) -----------------------------------------------------
def _step(**kw) -> PagedStep:
    i32 = torch.int32
    f = dict(
        cu=FakeTensor([5], [1], i32),
        cs=FakeTensor([4], [1], i32),
        pt=FakeTensor([4, 32], [32, 1], i32),
        max_seqlen_q=1,
        max_seqlen_k=512,
        page_size=16,
    )
    f.update(kw)
    return PagedStep(f["cu"], f["cs"], f["pt"], f["max_seqlen_q"], f["max_seqlen_k"], f["page_size"])


CALL = LayerConsts.make(8, 2, 64)


def _step_key(step: PagedStep, call: LayerConsts = CALL, num_splits=None) -> tuple:
    addrs = (step.page_table.data_ptr(), step.cache_seqlens.data_ptr(), step.cu_seqlens_q.data_ptr())
    return S.step_signature(step, call, num_splits, addrs)


def test_step_signature_changes_with_every_field():
    base = _step()
    keys = {"base": _step_key(base)}
    for name in ("cu", "cs", "pt"):
        t = {"cu": base.cu_seqlens_q, "cs": base.cache_seqlens, "pt": base.page_table}[name]
        for what, v in _tensor_variants(t, name, torch.int64).items():
            keys[what] = _step_key(_step(**{name: v}))
    keys["max_seqlen_q"] = _step_key(_step(max_seqlen_q=2))
    keys["page_size"] = _step_key(_step(page_size=32))
    keys["num_splits"] = _step_key(base, num_splits=2)
    # every LayerConsts field (call_id stands for the call)
    for field, value in dict(
        num_q_heads=16,
        num_kv_heads=4,
        head_dim=128,
        v_head_dim=32,
        softmax_scale=0.5,
        causal=False,
        window=(7, 0),
        softcap=30.0,
        return_lse=True,
        batch_invariant=True,
        mla=True,
    ).items():
        keys[f"call.{field}"] = _step_key(base, dataclasses.replace(CALL, **{field: value}))
    assert set(f.name for f in dataclasses.fields(LayerConsts)) <= {k[5:] for k in keys if k.startswith("call.")}
    _assert_all_distinct(keys)


def test_step_signature_equal_inputs_equal_key_and_addresses_do_not_split_it():
    a, b = _step(), _step()  # other (aligned) addresses, the same everything else
    assert _step_key(a) == _step_key(b)
    assert _step_key(a) == _step_key(_step(max_seqlen_k=4096))  # the config reads the table's width, not this
    assert _step_key(a, LayerConsts.make(8, 2, 64)) == _step_key(a)  # an equal LayerConsts, another instance


def test_step_specialisation_changes_with_every_field():
    base = _step()
    keys = {"base": S.step_specialisation(base)}
    pt = base.page_table
    keys["pt.stride[0]"] = S.step_specialisation(_step(pt=pt.but(stride=[48, 1])))
    keys["pt.rows"] = S.step_specialisation(_step(pt=pt.but(shape=[5, 32])))
    for name in ("cu", "cs", "pt"):
        t = {"cu": base.cu_seqlens_q, "cs": base.cache_seqlens, "pt": base.page_table}[name]
        keys[f"{name}.dtype"] = S.step_specialisation(_step(**{name: t.but(dtype=torch.int64)}))
        keys[f"{name}.misaligned"] = S.step_specialisation(_step(**{name: t.but(ptr=t.data_ptr() + 4)}))
    _assert_all_distinct(keys)


# ---- the layer signature (LaunchConfig.layers; the per-layer hot path) --------------------------
def _layer_tensors(**kw) -> LayerTensors:
    call = LayerConsts.make(8, 2, 64)
    kv = kw.pop("kv_dtype", torch.float8_e4m3fn)
    return LayerTensors.make(call, device=torch.device("cpu"), kv_dtype=kv, batch=kw.pop("batch", 4), **kw)


def _layer_key(q, k, v, o, layer) -> tuple:
    return S.layer_signature(q, k, v, o, layer, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr())


def _layer_base():
    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    return (
        FakeTensor([6, 8, 64], [512, 64, 1], bf16),
        FakeTensor([9, 16, 2, 64], [2048, 128, 64, 1], fp8),
        FakeTensor([9, 16, 2, 64], [2048, 128, 64, 1], fp8),
        FakeTensor([6, 8, 64], [512, 64, 1], bf16),
    )


def test_layer_signature_changes_with_every_field():
    q, k, v, o = _layer_base()
    plain = _layer_tensors()
    keys = {"base": _layer_key(q, k, v, o, plain)}
    for i, (name, t, other) in enumerate(
        (
            ("q", q, torch.float16),
            ("k_cache", k, torch.float8_e5m2),
            ("v_cache", v, torch.float8_e5m2),
            ("out", o, torch.float16),
        )
    ):
        for what, alt in _tensor_variants(t, name, other).items():
            four = [q, k, v, o]
            four[i] = alt
            keys[what] = _layer_key(*four, plain)
    # two tensors misaligned: another key than either alone (the hot path arms only all-aligned signatures)
    keys["q+k misaligned"] = _layer_key(q.but(ptr=q.data_ptr() + 8), k.but(ptr=k.data_ptr() + 8), v, o, plain)
    # the per-layer tensors: presence, dtype, alignment, descale layout (per-tensor / per-head) and stride
    sinks = torch.randn(8)
    per_head = torch.ones(4, 2)
    per_head_strided = torch.ones(4, 4)[:, :2]
    variants = {
        "sinks": dict(sinks=sinks),
        "sinks.bf16": dict(sinks=sinks.bfloat16()),
        "sinks.misaligned": dict(sinks=torch.randn(9)[1:]),
        "alibi": dict(alibi_slopes=torch.rand(8)),
        "alibi.misaligned": dict(alibi_slopes=torch.rand(9)[1:]),
        "descale": dict(k_descale=torch.ones(1), v_descale=torch.ones(1)),
        "descale.misaligned": dict(k_descale=torch.ones(2)[1:], v_descale=torch.ones(1)),
        "descale.per_head": dict(k_descale=per_head, v_descale=per_head.clone()),
        "descale.per_head_stride": dict(k_descale=per_head_strided, v_descale=per_head_strided.clone()),
    }
    for what, kw in variants.items():
        keys[f"layer.{what}"] = _layer_key(q, k, v, o, _layer_tensors(**kw))
    _assert_all_distinct(keys)


def test_layer_signature_equal_inputs_equal_key():
    q, k, v, o = _layer_base()
    q2, k2, v2, o2 = _layer_base()  # other aligned addresses
    sinks = torch.randn(8)
    assert _layer_key(q, k, v, o, _layer_tensors(sinks=sinks)) == _layer_key(
        q2, k2, v2, o2, _layer_tensors(sinks=sinks.clone())
    )
    assert _layer_key(q, k, v, o, _layer_tensors())[S.LAYER_ALIGNED] is True
    mis = _layer_key(q.but(ptr=q.data_ptr() + 4), k, v, o, _layer_tensors())[S.LAYER_ALIGNED]
    assert mis == (False, True, True, True)


# ---- what a compiled launch specialises on beyond the two signatures ----------------------------
def test_launch_extras_and_launch_signature_change_with_every_field():
    f32 = torch.float32
    lse, op, lp = FakeTensor([8, 6], [6, 1], f32), FakeTensor([100], [1], f32), FakeTensor([10], [1], f32)
    extras = {
        "base": S.launch_extras(lse, op, lp, False),
        "no lse": S.launch_extras(None, op, lp, False),
        "lse.misaligned": S.launch_extras(lse.but(ptr=lse.data_ptr() + 4), op, lp, False),
        "no split-K": S.launch_extras(lse, None, None, False),
        "o_part.misaligned": S.launch_extras(lse, op.but(ptr=op.data_ptr() + 4), lp, False),
        "l_part.misaligned": S.launch_extras(lse, op, lp.but(ptr=lp.data_ptr() + 4), False),
        "use_desc": S.launch_extras(lse, op, lp, True),
    }
    _assert_all_distinct(extras)

    q, k, v, o = _layer_base()
    layer_sig = _layer_key(q, k, v, o, _layer_tensors())
    step_spec = S.step_specialisation(_step())
    spec = S.launch_specialisation(layer_sig, extras["base"], step_spec, 8)
    specs = {
        "base": spec,
        "layer": S.launch_specialisation(
            _layer_key(q.but(dtype=torch.float16), k, v, o, _layer_tensors()), extras["base"], step_spec, 8
        ),
        "extras": S.launch_specialisation(layer_sig, extras["use_desc"], step_spec, 8),
        "step": S.launch_specialisation(
            layer_sig, extras["base"], S.step_specialisation(_step(pt=FakeTensor([5, 32], [32, 1], torch.int32))), 8
        ),
        "num_q_heads": S.launch_specialisation(layer_sig, extras["base"], step_spec, 16),
    }
    _assert_all_distinct(specs)

    def fn_a():
        pass

    def fn_b():
        pass

    consts = dict(BLOCK_M=16, BLOCK_N=32, NUM_SPLITS=1, HAS_SINKS=False)
    base = dict(fn=fn_a, grid=(4, 1, 2), consts=consts, warps=4, stages=2, spec=spec, options={"grf_mode": "large"})
    keys = {"base": S.launch_signature(**base)}
    alts = dict(fn=fn_b, grid=(5, 1, 2), warps=8, stages=3, spec=specs["num_q_heads"], options={"grf_mode": "small"})
    for field, value in alts.items():
        keys[field] = S.launch_signature(**dict(base, **{field: value}))
    keys["no options"] = S.launch_signature(**dict(base, options=None))
    for c, value in dict(BLOCK_M=32, BLOCK_N=64, NUM_SPLITS=2, HAS_SINKS=True).items():
        keys[f"consts.{c}"] = S.launch_signature(**dict(base, consts=dict(consts, **{c: value})))
    _assert_all_distinct(keys)
    assert S.launch_signature(**base) == S.launch_signature(**dict(base, consts=dict(consts), grid=[4, 1, 2]))


def test_warm_signature_changes_with_every_field():
    q, k, v, o = _layer_base()
    plain = _layer_tensors()
    keys = {
        "base": S.warm_signature(CALL, 16, q, k, v, o, plain),
        "call": S.warm_signature(dataclasses.replace(CALL, softcap=5.0), 16, q, k, v, o, plain),
        "page_size": S.warm_signature(CALL, 32, q, k, v, o, plain),
        "layer": S.warm_signature(CALL, 16, q, k, v, o, _layer_tensors(sinks=torch.randn(8))),
        "device": S.warm_signature(CALL, 16, q.but(device=1), k, v, o, plain),
    }
    for i, (name, t, other) in enumerate(
        (
            ("q", q, torch.float16),
            ("k_cache", k, torch.float8_e5m2),
            ("v_cache", v, torch.float8_e5m2),
            ("out", o, torch.float16),
        )
    ):
        four = [q, k, v, o]
        four[i] = t.but(dtype=other)
        keys[f"{name}.dtype"] = S.warm_signature(CALL, 16, *four, plain)
        for what, alt in _stride_variants(t, name).items():
            four = [q, k, v, o]
            four[i] = alt
            keys[what] = S.warm_signature(CALL, 16, *four, plain)
    _assert_all_distinct(keys)


def test_token_pages_signature_changes_with_every_field():
    i32, i64 = torch.int32, torch.int64
    tt, rows, out = FakeTensor([8, 256], [256, 1], i32), FakeTensor([4], [1], i64), FakeTensor([4, 16], [16, 1], i32)
    base = dict(batch=4, page_size=16, token_table=tt, rows=rows, has_rows=True, out=out, n_pages=16)
    alts = {
        "batch": dict(batch=5),
        "page_size": dict(page_size=32),
        "has_rows": dict(has_rows=False),
        "device": dict(token_table=tt.but(device=1)),
        "tt.dtype": dict(token_table=tt.but(dtype=i64)),
        "rows.dtype": dict(rows=rows.but(dtype=i32)),
        "tt.misaligned": dict(token_table=tt.but(ptr=tt.data_ptr() + 4)),
        "rows.misaligned": dict(rows=rows.but(ptr=rows.data_ptr() + 8)),
        "out.misaligned": dict(out=out.but(ptr=out.data_ptr() + 4)),
        "tt.stride[0] class": dict(token_table=tt.but(stride=[257, 1])),
        "n_pages class": dict(n_pages=17),
        "tt.rows class": dict(token_table=tt.but(shape=[16, 256])),
    }
    keys = {"base": S.token_pages_signature(**base)}
    keys.update({k: S.token_pages_signature(**dict(base, **kw)) for k, kw in alts.items()})
    _assert_all_distinct(keys)
    assert S.token_pages_signature(**base) == S.token_pages_signature(**dict(base, n_pages=32))  # same class


@pytest.mark.parametrize(
    "v, cls",
    [(1, (True, False, True)), (32, (False, True, True)), (2**31, (False, True, False)), (7, (False, False, True))],
)
def test_int_class(v, cls):
    assert S.int_class(v) == cls
