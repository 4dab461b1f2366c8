"""The vLLM stand-in that the GPU graph tests run against (tests/gpu/vllm_stub, regenerated from a vLLM wheel by its
regen.py) still carries the adapter: tests/gpu/vllm_stub_smoke.py run on the CPU in a subprocess (the stub must not
shadow a real vLLM in this process), its decode rows checked there against a naive reference."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_stub_smoke_on_the_cpu():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests" / "gpu" / "vllm_stub")]))
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "gpu" / "vllm_stub_smoke.py"), "cpu"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    release = (ROOT / "tests" / "gpu" / "vllm_stub" / "vllm" / "_release.py").read_text()
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("ok: stub vllm ") and "+stub" in last, last
    assert last.split("stub vllm ", 1)[1].split("+", 1)[0] in release, (last, release)
