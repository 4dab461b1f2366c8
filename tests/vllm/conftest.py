"""vLLM suite: runs in the vLLM venv (ci/venvs.sh vllm). Importing vllm here makes a missing
engine a collection error, never a silent skip."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import vllm  # noqa: F401  (hard requirement of this suite)
from engine_runs import Runs, collect  # tests/support/ is on sys.path (tests/conftest.py)
from tiny_model import make_tiny_model

HERE = Path(__file__).parent
BASE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {
        "llama": make_tiny_model(root / "llama", "llama", seed=1),
        "mistral-swa": make_tiny_model(root / "mistral", "mistral-swa", seed=2, sliding_window=16),
    }


def run_vllm(
    model: str, tmp_path: Path, *, ours: bool, multiprocess: bool = False, args=(), tag="run", kernel: str | None = None
) -> dict:
    """One vLLM process; returns the JSON it wrote plus its combined log under 'log'. ``kernel`` forces this
    backend's kernel provider (XPU_ATTN_KERNEL), e.g. "reference" to cover the oracle end to end."""
    out = tmp_path / f"{tag}-{'ours' if ours else 'vllm'}{'-' + kernel if kernel else ''}.json"
    env = dict(os.environ, **BASE_ENV)
    env.pop("XPU_ATTN_KERNEL", None)
    if kernel:
        env["XPU_ATTN_KERNEL"] = kernel
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if multiprocess else "0"
    env["XPU_ATTN_ENABLE"] = "1" if ours else "0"
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_vllm.py"), model, str(out), *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise AssertionError(f"vLLM run failed (rc {proc.returncode}):\n{log[-6000:]}")
    res = json.loads(out.read_text())
    res["log"] = log
    return res


def run_vllm_batch(
    jobs: dict[str, tuple[str, list]], tmp_path: Path, *, ours: bool, kernel: str | None = None, name: str = "batch"
) -> Runs:
    """Several vLLM runs ({tag: (model, args)}) in one process, one after another, each its own ``LLM``: the
    engine's import and platform set-up are paid once per process instead of once per run (most of a tiny
    model's run). Each result is what ``run_vllm`` returns, with that run's part of the log under "log" and
    the whole process's log under "process_log" (messages logged once per process)."""
    side = f"{name}-{'ours' if ours else 'vllm'}{'-' + kernel if kernel else ''}"
    outs = {tag: tmp_path / f"{side}-{tag.replace('/', '-')}.json" for tag in jobs}
    spec = tmp_path / f"{side}.jobs.json"
    spec.write_text(
        json.dumps(
            [{"model": str(m), "out": str(outs[t]), "args": [str(x) for x in args]} for t, (m, args) in jobs.items()]
        )
    )
    env = dict(os.environ, **BASE_ENV)
    env.pop("XPU_ATTN_KERNEL", None)
    if kernel:
        env["XPU_ATTN_KERNEL"] = kernel
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    env["XPU_ATTN_ENABLE"] = "1" if ours else "0"
    proc = subprocess.run(
        [sys.executable, str(HERE / "run_vllm.py"), "--batch", str(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600 + 300 * len(jobs),
    )
    log = proc.stdout
    return collect("vLLM", outs, log, proc.returncode)


from parity import LOGPROB_TOL, assert_parity  # noqa: E402,F401  (shared by both engine suites)
