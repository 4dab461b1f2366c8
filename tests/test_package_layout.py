"""The package's layout rules, checked on its source: core and the adapters reach the kernel layer only through
``kernels.api``, the api imports no provider and no provider another, environment variables are read in one
module and documented in one table, and no block of code is written twice."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "vllm_xpu_attn"
PACKAGE_FILES = sorted(PKG.rglob("*.py")) + sorted((ROOT / "sglang_compat").rglob("*.py"))
PROVIDER_MODULES = (
    "kernels.providers.triton",
    "kernels.providers.xpu_libs",
    "kernels.providers.cpu_sdpa",
    "kernels.providers.reference",
)


def _imports(path: Path):
    """(module, line) of every import statement, relative ones resolved against the package."""
    tree = ast.parse(path.read_text())
    here = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                yield f"{mod}.{a.name}", node.lineno


def _kernel_imports(path: Path):
    """(module, line) of every import of this package's kernel layer from ``path``."""
    return [(m, ln) for m, ln in _imports(path) if m.startswith("vllm_xpu_attn.kernels")]


# The rooms and what each may import of the kernel layer (prefixes of module names): core and the adapters
# reach kernels through ``kernels.api`` only; the api imports no provider; a provider imports the api and
# its own package, never another provider.
UPPER_ROOMS = ("core", "vllm", "transformers_cb", "cli.py", "env.py", "versions.py", "log.py")


def _room_files(room: str):
    target = PKG / room
    return [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))


def test_core_and_adapters_import_only_kernels_api():
    """Folder rule: every import of ``vllm_xpu_attn.kernels`` from core, the adapters (vLLM, transformers,
    SGLang) and the CLI is of ``vllm_xpu_attn.kernels.api``; no importlib, no Triton; no provider module path
    spelled in their strings."""
    files = [f for room in UPPER_ROOMS for f in _room_files(room)] + sorted((ROOT / "sglang_compat").rglob("*.py"))
    assert len(files) > 20, files
    bad = []
    for path in files:
        for mod, line in _kernel_imports(path):
            if not mod.startswith("vllm_xpu_attn.kernels.api"):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
        if path.parent.name == "core":
            for mod, line in _imports(path):
                if mod.startswith("importlib") or mod == "triton" or mod.startswith("triton."):
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "kernels.providers" in node.value:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} names {node.value!r}")
    assert not bad, bad


def test_kernel_api_imports_no_provider_and_providers_import_no_other_provider():
    """``kernels.api`` imports nothing of ``kernels.providers`` (the registry names them in strings, loaded
    lazily); each provider imports ``kernels.api`` and its own modules, never another provider."""
    bad = []
    for path in sorted((PKG / "kernels" / "api").glob("*.py")):
        bad += [
            f"api/{path.name}:{ln} imports {m}"
            for m, ln in _kernel_imports(path)
            if not m.startswith("vllm_xpu_attn.kernels.api")
        ]
    providers = PKG / "kernels" / "providers"
    for path in sorted(providers.rglob("*.py")):
        rel = path.relative_to(providers)
        own = "vllm_xpu_attn.kernels.providers." + (rel.parts[0] if len(rel.parts) > 1 else rel.stem)
        bad += [
            f"providers/{rel}:{ln} imports {m}"
            for m, ln in _kernel_imports(path)
            if not m.startswith(("vllm_xpu_attn.kernels.api", own))
        ]
    assert not bad, bad


def test_core_loads_no_provider_module_when_planning():
    """Dynamic: importing core and planning a step (the page-table conversion included) loads no provider module."""
    code = """
import sys, torch
from vllm_xpu_attn.core import StepInputs, plan_step, token_table_to_page_table
table = torch.arange(64, dtype=torch.int32).reshape(2, 32)
token_table_to_page_table(table, page_size=16, max_seqlen_k=32)
loaded = sorted(m for m in sys.modules if m.startswith("vllm_xpu_attn.kernels."))
print(loaded)
bad = [m for m in loaded if any(p in m for p in %r)]
assert not bad, bad
""" % (PROVIDER_MODULES,)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_one_capture_check():
    """ "Inside a graph capture?" is asked in one place (kernels/api/guard.capturing knows CUDA and XPU): no other
    module asks a device runtime directly."""
    bad = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in PACKAGE_FILES
        if p != PKG / "kernels" / "api" / "guard.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "is_current_stream_capturing" in line
    ]
    assert not bad, bad


ENV_READ = re.compile(r"os\.(environ|getenv)")


def test_environment_read_in_one_module():
    """Only vllm_xpu_attn/env.py reads this package's variables (TRITON_INTERPRET too: env.triton_interpreting)."""
    bad = []
    for path in PACKAGE_FILES:
        if path == PKG / "env.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if ENV_READ.search(line) and re.search(r"XPU_ATTN|TRITON_INTERPRET", line):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, bad


def test_usage_docs_list_every_variable():
    from vllm_xpu_attn import env

    table = (ROOT / "docs" / "usage.md").read_text().split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([A-Z0-9_]+)` \|", table, flags=re.M)
    assert documented == [v.name for v in env.VARIABLES], documented
    for v in env.VARIABLES:  # and every name the package source spells out is in the table
        assert v.name.startswith("XPU_ATTN_")  # one prefix (env.py reads the old VLLM_ spellings as aliases)
    spelled = set()
    for path in PACKAGE_FILES:
        spelled |= set(re.findall(r"\bXPU_ATTN_[A-Z_]+\b", path.read_text()))
    spelled -= {"XPU_ATTN_MLA"}  # vLLM backend name of the MLA backend, not a variable
    assert spelled <= {v.name for v in env.VARIABLES}, spelled - {v.name for v in env.VARIABLES}


def _code_lines(path: Path):
    """(line number, normalised text) of lines that carry code: no blanks, comments, docstring-only or import lines,
    lone punctuation, no function signature (the formatter writes a long one a parameter a line: two functions
    taking the same arguments are not a repeated block); white space folded (as the duplicates tool reads code)."""
    out = []
    in_signature = False
    for i, raw in enumerate(path.read_text().splitlines(), 1):
        s = " ".join(raw.split())
        if s.startswith(("def ", "async def ")) and not s.endswith(":"):
            in_signature = True
        if in_signature:
            in_signature = not s.endswith(":")
            continue
        if not s or s.startswith("#") or re.fullmatch(r"[\[\](){},:;]+", s) or s.startswith(("import ", "from ")):
            continue
        out.append((i, s))
    return out


def test_no_block_of_six_lines_written_twice():
    """No run of six identical code lines stands twice in the package (one helper instead)."""
    seen: dict[tuple, str] = {}
    dups = []
    for path in PACKAGE_FILES:
        lines = _code_lines(path)
        last_hit = -10
        for k in range(len(lines) - 5):
            window = tuple(s for _, s in lines[k : k + 6])
            if sum(len(s) for s in window) < 120:  # thin runs (closing brackets, `else:`/`return`) are not code blocks
                continue
            where = f"{path.relative_to(ROOT)}:{lines[k][0]}"
            if window in seen and seen[window] != where and k - last_hit > 5:
                dups.append(f"{where} repeats {seen[window]}")
                last_hit = k
            seen.setdefault(window, where)
    assert not dups, dups
