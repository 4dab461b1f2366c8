"""SGLang suite: runs in the SGLang venv (ci/venvs.sh sglang). Importing sglang here makes a
missing engine a collection error, never a silent skip."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sglang  # noqa: F401  (hard requirement of this suite)
from engine_runs import Runs, collect  # tests/support/ is on sys.path (tests/conftest.py)
from tiny_model import make_tiny_model

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

    return {
        "llama": make_tiny_model(root / "llama", "llama", seed=1),
        "gemma3": families.make(str(root / "gemma3"), "gemma3", 0),
    }


def run_sglang(model: str, tmp_path: Path, backend: str, args=(), tag="run", kernel: str | None = None) -> dict:
    """One SGLang process; ``kernel`` forces this backend's kernel provider (XPU_ATTN_KERNEL)."""
    out = tmp_path / f"{tag}-{backend}{'-' + kernel if kernel else ''}.json"
    env = sglang_env()
    env.pop("XPU_ATTN_KERNEL", None)
    if kernel:
        env["XPU_ATTN_KERNEL"] = kernel
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_sglang.py"), model, str(out), "--backend", backend, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not out.exists():
        raise AssertionError(f"SGLang run failed (rc {proc.returncode}):\n{log[-6000:]}")
    res = json.loads(out.read_text())
    res["log"] = log
    return res


def run_sglang_batch(jobs: dict[str, tuple], tmp_path: Path, name: str = "batch") -> Runs:
    """Several SGLang runs ({tag: (model, backend, args[, kernel[, env]])}) in one process, one after another, each
    its own ``sglang.Engine`` (``kernel`` forces this backend's provider in that run's scheduler, ``env`` is set
    while it runs: the scheduler process it spawns inherits both): this process's
    imports are paid once instead of once per run. Each result is what ``run_sglang`` returns, with that run's
    part of the log under "log" and the whole process's under "process_log"."""
    outs = {tag: tmp_path / f"{name}-{tag.replace('/', '-')}.json" for tag in jobs}
    spec = tmp_path / f"{name}.jobs.json"
    plan = []
    for tag, (model, backend, args, *extra) in jobs.items():
        kernel, env = (list(extra) + [None, None])[:2]
        env = dict(env or {}, **({"XPU_ATTN_KERNEL": kernel} if kernel else {}))
        plan.append(
            {"model": str(model), "out": str(outs[tag]), "args": ["--backend", backend, *map(str, args)], "env": env}
        )
    spec.write_text(json.dumps(plan))
    env = sglang_env()
    env.pop("XPU_ATTN_KERNEL", None)
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_sglang.py"), "--batch", str(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600 + 400 * len(jobs),
    )
    log = proc.stdout
    return collect("SGLang", outs, log, proc.returncode)


from parity import LOGPROB_TOL, assert_parity  # noqa: E402,F401  (shared by both engine suites)
