"""`vllm-xpu-attn doctor` run as a user runs it: a subprocess on this CPU-only machine."""

import shutil
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "vllm_xpu_attn", "doctor", *args], capture_output=True, text=True,
                          timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})


def test_doctor_on_this_machine():
    p = run()
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for word in ("torch", "triton", "vllm-xpu-kernels", "sgl_kernel", "ipex", "reference"):
        assert word in out
    assert "not importable" in out  # vendor libraries are absent here, and doctor says why
    assert "prefill (cpu" in out and "-> reference" in out


def test_doctor_explains_an_xpu_configuration():
    p = run("--device", "xpu", "--page-size", "16", "--softcap", "--head-dim", "64")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "decode (xpu" in out and "-> triton" in out  # vendors absent; triton serves
    assert "no softcap support" in out or "not importable" in out


def test_doctor_rejects_bad_heads():
    p = run("--q-heads", "6", "--kv-heads", "4")
    assert p.returncode == 2 and "must be a multiple of --kv-heads" in p.stderr


def test_console_script_installed():
    exe = shutil.which("vllm-xpu-attn", path=sys.prefix + "/bin")
    assert exe, "console script vllm-xpu-attn missing from the venv"
    p = subprocess.run([exe, "doctor", "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "reference" in p.stdout
