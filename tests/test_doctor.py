"""`vllm-xpu-attn doctor` run as a user runs it: a subprocess on this CPU-only machine."""

import re
import shutil
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "vllm_xpu_attn", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def test_doctor_on_this_machine():
    p = run()
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for word in ("torch", "triton", "vllm-xpu-kernels", "sgl_kernel", "ipex", "reference"):
        assert word in out
    assert "not importable" in out  # vendor libraries are absent here, and doctor says why
    assert "prefill (cpu" in out and "-> torch_sdpa" in out
    # the engine versions and the supported ranges (no engine in this venv; the engine suites' venvs say 'supported')
    assert "not installed (supported: 0.30 to 0.33)" in out and "not installed (supported: 0.5.22 to 0.5.23)" in out


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


# (arguments, the flag the error names, what the package's own check says): refused as argparse refuses a bad value
REFUSED = [
    (["--kv-heads", "0"], "--kv-heads", "num_kv_heads must be an int >= 1, got 0"),  # was a ZeroDivisionError
    (["--q-heads", "-4"], "--q-heads", "num_q_heads must be an int >= 1, got -4"),
    (["--head-dim", "0"], "--head-dim", "head_dim must be an int >= 1, got 0"),  # was SERVES
    (["--window", "-5"], "--window", "window_size entries must be >= -1 (-1 = unbounded)"),  # was SERVES
    (["--page-size", "0"], "--page-size", "page size must be an int >= 1, got 0"),
    (["--softcap", "-1"], "--softcap", "softcap must be 0 (off) or a finite number > 0, got -1.0"),
    (["--softcap", "nan"], "--softcap", "softcap must be 0 (off) or a finite number > 0, got nan"),
    (["--mla", "--kv-lora-rank", "-3"], "--kv-lora-rank", "MLA kv_lora_rank must be positive, got -3"),
    (["--kv-lora-rank", "0"], "--kv-lora-rank", "MLA kv_lora_rank must be positive, got 0"),
    (["--mla", "--rope-dim", "0"], "--rope-dim", "MLA qk_rope_head_dim must be positive, got 0"),
    (["--mla", "--nope-dim", "0"], "--nope-dim", "MLA qk_nope_head_dim must be positive, got 0"),
    (["--mla", "--v-dim", "-1"], "--v-dim", "MLA v_head_dim must be positive, got -1"),
]


@pytest.mark.parametrize("args,flag,says", REFUSED, ids=[" ".join(a) for a, _, _ in REFUSED])
def test_doctor_refuses_what_the_kernels_refuse(args, flag, says):
    """A value LayerSpec / the kernels refuse is refused by the same check, naming the flag: exit 2, no verdict."""
    p = run(*args)
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert f"vllm-xpu-attn doctor: error: argument {flag}: {says}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "SERVES" not in p.stdout


def test_doctor_window_minus_one_is_no_window():
    """-1 is FlashAttention's 'unbounded': the same request as no --window at all."""
    p = run("--window", "-1", "--device", "xpu")
    assert p.returncode == 0, p.stderr
    assert "decode (xpu" in p.stdout and "window=" not in p.stdout


def test_doctor_takes_the_engines_fp8_spelling():
    """--kv-dtype fp8 is vLLM's --kv-cache-dtype spelling of fp8_e4m3; both, and fp8_e5m2, are taken."""
    for spelling, dtype in (("fp8", "float8_e4m3fn"), ("fp8_e4m3", "float8_e4m3fn"), ("fp8_e5m2", "float8_e5m2")):
        p = run("--kv-dtype", spelling, "--device", "xpu")
        assert p.returncode == 0, p.stderr
        assert f"decode (xpu q=bfloat16 kv={dtype} " in p.stdout and "-> triton" in p.stdout, p.stdout[-3000:]


def test_doctor_help_shows_the_defaults():
    p = run("--help")
    assert p.returncode == 0, p.stderr
    entries = re.split(r"\n  (?=-)", p.stdout)[1:]  # one per option: "--flag METAVAR  help (default: ...)"
    help_of = {e.split()[0].rstrip(","): " ".join(e.split()) for e in entries}
    for flag, default in (
        ("--head-dim", "128"),
        ("--q-heads", "32"),
        ("--kv-heads", "8"),
        ("--page-size", "64"),
        ("--dtype", "bfloat16"),
        ("--kv-dtype", "auto"),
        ("--softcap", "0.0"),
        ("--device", "this host's"),
        ("--kv-lora-rank", "512 with --mla"),
        ("--rope-dim", "64"),
        ("--nope-dim", "128"),
        ("--v-dim", "128"),
    ):
        assert f"(default: {default})" in help_of[flag], (flag, help_of.get(flag))
    assert "fp8" in help_of["--kv-dtype"].split("}")[0]


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
    env = {
        "COLUMNS": "200",
        "PATH": "/usr/bin:/bin",
        "XPU_ATTN_PROBE_DEVICE": "cpu",
        "PYTHONPATH": os.pathsep.join([os.path.join(here, "fakes"), here]),
    }
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "vllm_xpu_attn",
            "doctor",
            "--device",
            "xpu",
            "--softcap",
            "30",
            "--head-dim",
            "64",
            "--mla",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
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
