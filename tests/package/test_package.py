"""The package as a stranger gets it: the sdist and the wheel build from a clean copy of the sources, their
metadata passes the index's checks (twine), and the wheel, installed into a new venv with only torch beside it,
runs the doctor. CI's `package` suite (ci/test.sh) runs this file in the core venv (`[package]` extra).

What each check guards: the license (PEP 639 expression + the LICENSE file in both artifacts), py.typed in
both packages, one version (the wheel's metadata = ``vllm_xpu_attn.__version__``), a long description that
reads on an index page (no repository-relative links), and a wheel that carries every module the doctor
imports (a file missing from the wheel fails here, not on a user's machine)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "LICENSE", "README.md", "vllm_xpu_attn", "sglang_compat", "docs/pypi.md"]


def _version() -> str:
    """``__version__`` read from the source, not imported (the installed package could be another copy)."""
    tree = ast.parse((ROOT / "vllm_xpu_attn" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__version__":
            return node.value.value
    raise AssertionError("vllm_xpu_attn/__init__.py has no __version__")


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """sdist + wheel built by `python -m build` (isolated build env) from a copy of the sources: the copy
    keeps build/ and egg-info out of the checkout, and the wheel is built from the sdist (build's default),
    so a file the sdist forgets fails the wheel too."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(src)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def _one(dist: Path, pattern: str) -> Path:
    found = sorted(dist.glob(pattern))
    assert len(found) == 1, (pattern, [p.name for p in dist.iterdir()])
    return found[0]


def test_metadata_passes_the_index_checks(dist):
    r = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_wheel_metadata_license_version_typing(dist):
    version = _version()
    wheel = _one(dist, "vllm_xpu_attn-*.whl")
    assert wheel.name.startswith(f"vllm_xpu_attn-{version}-py3-none-any"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"vllm_xpu_attn-{version}.dist-info/METADATA").decode()
        license_text = z.read(f"vllm_xpu_attn-{version}.dist-info/licenses/LICENSE").decode()
    assert "License-Expression: Apache-2.0" in meta and f"\nVersion: {version}\n" in meta, meta[:800]
    assert not re.search(r"^Classifier: License ::", meta, re.M)  # PEP 639: the expression, not a classifier
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert {"vllm_xpu_attn/py.typed", "sglang_compat/py.typed"} <= names
    # the long description reads on an index page: no links into the repository, no CI instructions
    body = meta.split("\n\n", 1)[1]
    assert body.startswith("# vllm-xpu-attn"), body[:200]
    relative = [t for t in re.findall(r"\]\(([^)\s]+)\)", body) if not re.match(r"^[a-z]+:", t)]
    assert not relative and "ci/test.sh" not in body, relative
    # the console script and every entry point an engine discovers
    with zipfile.ZipFile(wheel) as z:
        eps = z.read(f"vllm_xpu_attn-{version}.dist-info/entry_points.txt").decode()
    for line in (
        "vllm-xpu-attn = vllm_xpu_attn.cli:main",
        "xpu_attn = vllm_xpu_attn.vllm.plugin:platform_plugin",
        "xpu_attn = sglang_compat.plugin:register",
    ):
        assert line in eps, eps


def test_sdist_carries_license_and_long_description(dist):
    sdist = _one(dist, "vllm_xpu_attn-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {
        "LICENSE",
        "docs/pypi.md",
        "pyproject.toml",
        "vllm_xpu_attn/__init__.py",
        "vllm_xpu_attn/py.typed",
        "sglang_compat/plugin.py",
    } <= names, sorted(names)[:40]


def test_wheel_in_a_clean_venv_runs_the_doctor(dist, tmp_path):
    """A new venv, torch (the CPU wheel CI has on disk) and the wheel: nothing from this checkout on the path."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    wheel = _one(dist, "vllm_xpu_attn-*.whl")
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-cache-dir", "torch==2.13.0", str(wheel)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    where = subprocess.run(
        [str(py), "-c", "import vllm_xpu_attn, sys; print(vllm_xpu_attn.__file__)"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0 and str(venv) in where.stdout, where.stdout + where.stderr
    r = subprocess.run(
        [str(venv / "bin" / "vllm-xpu-attn"), "doctor", "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(rf"vllm-xpu-attn\s+{re.escape(_version())}\b", r.stdout), r.stdout[:2000]
    assert "-> torch_sdpa" in r.stdout, r.stdout[-2000:]
