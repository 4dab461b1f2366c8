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
    assert "prefill (cpu" in out and "-> torch_sdpa" in out
    # the engine versions and the supported ranges (no engine in this venv; the engine suites' venvs say 'supported')
    assert "not installed (supported: 0.30 to 0.32)" in out and "not installed (supported: 0.5.22 to 0.5.23)" in out


def test_doctor_cpu_features_stay_on_torch_sdpa():
    p = run("--softcap", "30", "--sinks", "--alibi", "--window", "16", "--kv-dtype", "fp8_e4m3")
    assert p.returncode == 0, p.stderr
    assert "prefill (cpu" in p.stdout and "decode (cpu" in p.stdout and "-> reference" not in p.stdout


def test_doctor_explains_an_xpu_configuration():
    p = run("--device", "xpu", "--page-size", "16", "--softcap", "30", "--head-dim", "64")
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


def test_doctor_reports_vendor_versions_and_probed_capabilities():
    """With the strict vendor models on the path (an XPU stack as a user would have it), doctor prints
    each library's version and what the probes found: the modelled sgl-kernel main (9cf16bf9)
    stores softcap without applying it, so softcap is refused and Triton serves; an MLA layer's absorbed
    decode goes to the library's MLA operator (sgl_kernel_mla), its extend to Triton."""
    import os
    import re

    here = os.path.dirname(__file__)
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "VLLM_XPU_ATTN_PROBE_DEVICE": "cpu",
           "PYTHONPATH": os.pathsep.join([os.path.join(here, "fakes"), here])}
    p = subprocess.run([sys.executable, "-m", "vllm_xpu_attn", "doctor", "--device", "xpu", "--softcap", "30",
                        "--head-dim", "64", "--mla"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "0.1.8" in out and "0.1.16.2" in out and "2.8.10+xpu" in out, out
    assert "softcap: no" in out and "PR #491" in out, out
    assert "page_size_1: no" in out, out
    assert "decode (xpu" in out and "-> triton" in out, out
    assert re.search(r"MLA absorbed decode │ [^│]+│ sgl_kernel_mla │", out), out
    assert re.search(r"MLA absorbed extend │ [^│]+│ triton │", out), out


def test_doctor_reports_mla_layers():
    """doctor says which provider serves an MLA layer's absorbed decode / extend and its MHA prefill."""
    p = run("--mla", "--device", "cuda")
    assert p.returncode == 0, p.stderr
    out = " ".join(p.stdout.split())
    assert "MLA layers (latent 512 + rope 64" in out
    for what in ("MLA absorbed decode", "MLA absorbed extend", "MLA un-absorbed prefill (MHA)"):
        assert what in out
    assert "D=576 Hq/Hkv=32/1" in out and "mla" in out and "triton" in out
