"""The docs stand on their own and say where their figures come from: README.md and docs/*.md link only to
files that exist, name only repository paths that exist, every performance table names the command that
produced it and an in-tree JSON file holding it, and nothing in the tree points outside the repository."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JOURNAL = ROOT / "benchmarks" / "lab" / "journal.md"  # dated record: names files of its time, some only in git history
DOCS = [ROOT / "README.md", ROOT / "CHANGELOG.md"] + sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")
PATHLIKE = re.compile(r"^[\w.-]+(/[\w.-]+)+\.(py|sh|json|jsonl|md|png|log|txt|toml)$")


def _relative_links(text: str):
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        yield target.split("#", 1)[0]


@pytest.mark.parametrize("doc", DOCS + [JOURNAL], ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    text = doc.read_text()
    missing = [t for t in _relative_links(text) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_named_repository_paths_exist(doc):
    """A path in backticks (`benchmarks/bench_attention.py`) names a file of this repository, from the root or
    from the doc's folder; globs and placeholders are not paths."""
    missing = []
    for token in CODE.findall(doc.read_text()):
        if any(c in token for c in "*{}<>$") or not PATHLIKE.match(token):
            continue
        if not ((ROOT / token).exists() or (doc.parent / token).exists()):
            missing.append(token)
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


def _sections(text: str):
    """(heading, body) for each `##` section."""
    parts = re.split(r"^(##+ .*)$", text, flags=re.M)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


@pytest.mark.parametrize("doc", [ROOT / "README.md", ROOT / "docs" / "benchmarks.md"], ids=lambda p: p.name)
def test_every_performance_table_names_its_command_and_data(doc):
    """Each section with a table of measurements names a command (a benchmarks/ script) and links an in-tree
    data file (.json, .jsonl or a folder of them)."""
    bad = []
    for heading, body in _sections(doc.read_text()):
        if not re.search(r"^\|.*\|\s*$", body, flags=re.M):
            continue
        if doc.name == "README.md" and heading != "## Performance":
            continue
        command = re.search(r"`[^`]*benchmarks/[\w/]+\.py[^`]*`", body)
        data = [t for t in _relative_links(body) if t.endswith((".json", ".jsonl", "/"))]
        if not command or not data or not all((doc.parent / t).exists() for t in data):
            bad.append(heading)
    assert not bad, f"{doc.relative_to(ROOT)}: tables without a command and an in-tree data file: {bad}"


def test_nothing_points_outside_the_repository():
    """The repository stands on its own: no file refers to the sibling folder it was planned from or to a
    design document outside it (docs/design.md is the design)."""
    outside = "../" + "shared"
    design = "DESIGN" + ".md"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not files:  # not a git checkout (an sdist): every text file under the root
        files = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".venvs" not in p.parts]
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".sh", ".toml", ".txt", ".cfg", ".yml", ".yaml", ""} or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if outside in text or design in text:
            hits.append(name)
    assert not hits, f"files pointing outside the repository: {hits}"
    assert (ROOT / "docs" / "design.md").exists(), "docs/design.md is the design document"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 130, f"README.md has {len(lines)} lines; details belong in docs/"


def test_version_written_in_the_docs_is_the_package_version():
    """README's status line and docs/usage.md's wheel name say the version vllm_xpu_attn.__version__ holds (the one
    source pyproject reads)."""
    import ast

    tree = ast.parse((ROOT / "vllm_xpu_attn" / "__init__.py").read_text())
    version = next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "__version__")
    readme = (ROOT / "README.md").read_text()
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert re.findall(r"version (\d+\.\d+\.\d+)", readme) == [version], re.findall(r"version (\d+\.\d+\.\d+)", readme)
    assert re.findall(r"vllm_xpu_attn-(\d+\.\d+\.\d+)-py3", usage) == [version]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.findall(r"^## (\d+\.\d+\.\d+)", changelog, re.M)[0] == version
