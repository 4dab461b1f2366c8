"""The source is formatted and linted by ruff, with the settings in pyproject.toml ([tool.ruff]): CI's core suite
runs both here, so an unformatted or lint-failing change fails CI with ruff's own report."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert exe, "ruff is not installed: pip install -e '.[lint]' (CI's core venv has it)"
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_format_leaves_every_file_as_it_is():
    r = _ruff("format", "--check", "--diff")
    assert r.returncode == 0, "run `ruff format` (the settings are pyproject.toml's):\n" + (r.stdout + r.stderr)[-6000:]


def test_ruff_check_finds_nothing():
    r = _ruff("check", "--output-format", "concise")
    assert r.returncode == 0, "ruff check:\n" + (r.stdout + r.stderr)[-6000:]
