"""SGLang suite: runs in the SGLang venv (ci/venvs.sh sglang). Importing sglang here makes a
missing engine a collection error, never a silent skip."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sglang  # noqa: F401  (hard requirement of this suite)

from tiny_model import make_tiny_model  # tests/ is on sys.path (tests/conftest.py)

HERE = Path(__file__).parent
STUBS = str(HERE.parent.parent / "sglang_compat" / "cpu_shims")  # vllm._custom_ops stand-in (its docstring)
if STUBS not in sys.path:  # in-process SGLang imports (translation tests) need it too
    sys.path.insert(0, STUBS)


def sglang_env() -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = STUBS + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    import families  # Gemma-3: a window SGLang honours (its Mistral, a Llama, drops the window)

    return {"llama": make_tiny_model(root / "llama", "llama", seed=1),
            "gemma3": families.make(str(root / "gemma3"), "gemma3", 0)}


def run_sglang(model: str, tmp_path: Path, backend: str, args=(), tag="run", kernel: str | None = None) -> dict:
    """One SGLang process; ``kernel`` forces this backend's kernel provider (VLLM_XPU_ATTN_KERNEL)."""
    out = tmp_path / f"{tag}-{backend}{'-' + kernel if kernel else ''}.json"
    env = sglang_env()
    env.pop("VLLM_XPU_ATTN_KERNEL", None)
    if kernel:
        env["VLLM_XPU_ATTN_KERNEL"] = kernel
    proc = subprocess.run([sys.executable, str(HERE / "run_sglang.py"), model, str(out), "--backend", backend,
                           *map(str, args)], env=env, capture_output=True, text=True, timeout=1200)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not out.exists():
        raise AssertionError(f"SGLang run failed (rc {proc.returncode}):\n{log[-6000:]}")
    res = json.loads(out.read_text())
    res["log"] = log
    return res


from parity import LOGPROB_TOL, assert_parity  # noqa: E402,F401  (shared by both engine suites)
