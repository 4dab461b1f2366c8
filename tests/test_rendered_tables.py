"""Every measured figure in README.md and docs/benchmarks.md is what benchmarks/render_tables.py renders from the
committed records: a figure edited by hand, or a record changed without re-rendering, fails here. No torch."""

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "render_tables.py"


def _renderer():
    """benchmarks/render_tables.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location("render_tables", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_tables", mod)
    spec.loader.exec_module(mod)
    return mod


def test_docs_match_their_records():
    diff = _renderer().check(ROOT)
    assert not diff, (
        "a doc's figures differ from their records; run `python benchmarks/render_tables.py` "
        "(or fix the record) and review:\n" + diff
    )


def test_check_mode_exits_zero_on_this_tree():
    """The command CI and a reader run: exit 0 and no output when the docs agree."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, ""), r.stdout + r.stderr


def test_an_edited_figure_is_caught():
    """Break check: change one rendered number in docs/benchmarks.md and the rendering no longer matches."""
    mod = _renderer()
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    row = re.search(r"^\| 64 x 4096 \| \*\*(\d+\.\d)\*\*", text, flags=re.M)
    assert row, "the decode table's 64 x 4096 row is where this test expects it"
    edited = text[: row.start(1)] + "99.9" + text[row.end(1) :]
    records = mod.Records(ROOT)
    assert mod.render_text(edited, records) == text != edited


def test_a_dropped_block_is_refused():
    """A doc that loses one of its render blocks (e.g. a rewrite of README) fails instead of passing silently."""
    mod = _renderer()
    text = (ROOT / "README.md").read_text().replace("<!-- render:readme-performance -->", "")
    with pytest.raises(ValueError, match="readme-performance"):
        mod.render_text(text, mod.Records(ROOT), mod.DOCS["README.md"])


def _outside_blocks(text: str) -> str:
    return re.sub(r"<!-- render:([\w-]+) -->.*?<!-- /render:\1 -->", "", text, flags=re.S)


MEASURED = re.compile(r"\b\d+\.\d+\s?(us|ms|s|%|TB/s|TFLOP/s|req/s|tokens/s)(?![\w/])|\b\d+\.\d+x\b")


def test_no_measured_figure_outside_render_blocks():
    """docs/benchmarks.md carries measured figures (decimals with a unit, ratios) only inside render blocks;
    configuration constants (page 64, 1 GiB, a 100 ms threshold) may stand in the prose."""
    text = _outside_blocks((ROOT / "docs" / "benchmarks.md").read_text())
    hits = [m.group(0) for m in MEASURED.finditer(text)]
    assert not hits, f"figures outside render blocks (render them from a record): {hits}"


def test_renderer_uses_the_standard_library_only():
    """It runs in the core suite and on any checkout: no torch, no third-party import."""
    tree = ast.parse(SCRIPT.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names) | {"__future__"}, sorted(names - set(sys.stdlib_module_names))
