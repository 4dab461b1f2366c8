"""AOT-compile absorbed-MLA decode kernels for sm_90a on a machine without a GPU (dev tool, issue #49).

    python benchmarks/lab/mla_aot.py                       # the shipped 128- and 16-head tiles (triton==3.6.0 venv)
    python benchmarks/lab/mla_aot.py '{"BLOCK_H": 64, "warps": 8}' ...   # one line per JSON

Compiles one specialisation per JSON argument of ``_mla_attn_kernel`` (or ``"kernel": "<name>"``, a sibling in
kernels.py taking the same arguments) through Triton's NVIDIA backend and its bundled ptxas, and prints one JSON
line: registers, spill stores/loads (bytes), stack, shared memory, global scratch, and the SASS by opcode (static
counts: HGMMA = wgmma, HMMA = mma.sync, LDL/STL = local-memory (spill) traffic, LDGSTS/UTMALDG = async copies),
and per key loop (innermost backward branch holding matrix ops) its instructions and LDL/STL/HGMMA/HMMA: where
the spill code sits (the hot loop, or the once-per-program tail).
Defaults: DeepSeek's latent (D_C 512 + D_R 64), page 64, bf16 q and cache, the shipped wide tile (64 heads x 64
keys, 8 warps, 2 stages, fused latent), one split. JSON keys: any constexpr, "warps", "stages", "q", "kv"
(dtype names "bf16", "fp8e4nv"), "kernel", "tag". Use the Triton version the GPU machine runs (3.6.0): ptxas ships
with it. ``cuda_aot.py`` does the same for ``_paged_attn_kernel``.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "../../vllm_xpu_attn/kernels/providers/triton/kernels.py")
BASE = dict(
    PAGE=64,
    D_C=512,
    D_R=64,
    BLOCK_H=64,
    BLOCK_N=64,
    BLOCK_DC=512,
    BLOCK_DV=512,
    NUM_SPLITS=1,
    HAS_DESCALE=False,
    WRITE_LSE=False,
    FP32_DOT=False,
    FP8_CVT=0,  # _mla_page_kernel: FP8 operand form (kernels.py)
    USE_DESC=False,  # _mla_page_kernel: pointer loads unless asked
    AHEAD=False,  # _mla_page_kernel: the scores one key block ahead ("ahead" form)
)
DEFAULTS = [
    {"tag": "shipped mla_wide"},
    {"tag": "shipped mla_decode", "BLOCK_H": 16, "BLOCK_N": 32, "warps": 4, "NUM_SPLITS": 8},
]


def compile_one(mod, variant: dict) -> dict:
    """Compile one specialisation (``variant``: constexpr overrides + warps/stages/q/kv/kernel/tag) and return
    its resource report (registers, spills, shared memory, SASS opcode counts)."""
    variant = dict(variant)
    tag = variant.pop("tag", "")
    fn = getattr(mod, variant.pop("kernel", "_mla_attn_kernel"))
    warps, stages = variant.pop("warps", 8), variant.pop("stages", 2)
    opts = variant.pop("options", {})
    qt, kt = variant.pop("q", "bf16"), variant.pop("kv", None)
    kt = kt or qt
    consts = dict(BASE)
    consts.update(variant)
    # only the constexprs this kernel declares (siblings may take more or fewer)
    consts = {k: v for k, v in consts.items() if k in fn.arg_names}
    ptr = {"Q": "*" + qt, "KV": "*" + kt, "PT": "*i32", "SEQ": "*i32", "CUQ": "*i32", "O": "*" + qt, "ERR": "*i32"}
    none = {"KDS", "LSE", "OP", "LP"}
    if consts.get("HAS_DESCALE"):
        ptr["KDS"] = "*fp32"
        none.discard("KDS")
    if consts.get("WRITE_LSE"):
        ptr["LSE"] = "*fp32"
        none.discard("LSE")
    if consts.get("NUM_SPLITS", 1) > 1:
        ptr["OP"] = ptr["LP"] = "*fp32"
        none -= {"OP", "LP"}
    sig, cx = {}, {}
    for n in fn.arg_names:
        if n in consts:
            sig[n], cx[n] = "constexpr", consts[n]
        elif n in none:
            sig[n], cx[n] = "constexpr", None
        elif n in ptr:
            sig[n] = ptr[n]
        elif n == "scale":
            sig[n] = "fp32"
        else:
            sig[n] = "i32"
    # what the launch specialises at these shapes: 16-byte aligned pointers, strides and head count % 16 == 0
    # (stride_ptb, kv_rows, pt_cols, total_q are do_not_specialize)
    aligned = [
        n for n in fn.arg_names if n in ptr or (n.startswith("stride_") and n != "stride_ptb") or n == "num_q_heads"
    ]
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    k = triton.compile(
        ASTSource(fn, sig, cx, attrs),
        target=GPUTarget("cuda", 90, 32),
        options=dict(num_warps=warps, num_stages=stages, **opts),
    )
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(k.asm["ptx"])
    r = None
    for ptxas in ("ptxas", "ptxas-blackwell"):  # newer Triton builds emit PTX only their second ptxas reads
        if not os.path.exists(os.path.join(bindir, ptxas)):
            continue
        r = subprocess.run(
            [os.path.join(bindir, ptxas), "-v", "--gpu-name=sm_90a", f.name, "-o", f.name + ".o"],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            break
    if r is None or r.returncode != 0:
        return {"tag": tag, "error": "ptxas failed: " + (r.stderr[-500:] if r else "no ptxas")}
    sass = subprocess.run(
        [os.path.join(bindir, "cuobjdump"), "-sass", f.name + ".o"], capture_output=True, text=True
    ).stdout
    ops = collections.Counter(
        m.group(1).split(".")[0] for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass)
    )
    # the key loops: backward branches whose body issues wgmma/mma, innermost only; per-iteration static counts of
    # local-memory (spill) loads/stores say whether the hot loop spills or only the code around it does
    ins = [(int(m.group(1), 16), m.group(2)) for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", sass)]
    spans = []
    for addr, txt in ins:
        t = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", txt)
        if t and int(t.group(1), 16) < addr:
            spans.append((int(t.group(1), 16), addr))
    loops = []
    for lo, hi in spans:
        if any(lo <= a and b <= hi and (a, b) != (lo, hi) for a, b in spans):
            continue  # not innermost
        body = [x for a, x in ins if lo <= a <= hi]
        cnt = {op: sum(1 for x in body if re.search(r"\b" + op + r"\b", x)) for op in ("LDL", "STL", "HGMMA", "HMMA")}
        if cnt["HGMMA"] or cnt["HMMA"]:
            loops.append({"instr": len(body), **cnt})
    rep = " ".join(r.stderr.split())
    num = lambda pat: int(m.group(1)) if (m := re.search(pat, rep)) else None  # noqa: E731
    os.unlink(f.name)
    os.unlink(f.name + ".o")
    return {
        "tag": tag,
        "warps": warps,
        "stages": stages,
        "tiles": [consts.get(x) for x in ("BLOCK_H", "BLOCK_N", "BLOCK_DC", "BLOCK_DV")],
        "regs": num(r"Used (\d+) registers"),
        "spill_st": num(r"(\d+) bytes spill stores"),
        "spill_ld": num(r"(\d+) bytes spill loads"),
        "stack": num(r"(\d+) bytes stack frame"),
        "smem": k.metadata.shared,
        "scratch": k.metadata.global_scratch_size,
        "HGMMA": ops.get("HGMMA", 0),
        "HMMA": ops.get("HMMA", 0),
        "LDL": ops.get("LDL", 0),
        "STL": ops.get("STL", 0),
        "LDGSTS": ops.get("LDGSTS", 0),
        "UTMALDG": ops.get("UTMALDG", 0),
        "LDSM": ops.get("LDSM", 0),
        "sass": sum(ops.values()),
        "key_loops": loops,
    }


def main() -> None:
    spec = importlib.util.spec_from_file_location("k", os.environ.get("MLA_AOT_KERNELS", KERNELS))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    variants = [json.loads(a) for a in sys.argv[1:]] or DEFAULTS
    for v in variants:
        try:
            print(json.dumps(compile_one(mod, v)), flush=True)
        except Exception as e:  # noqa: BLE001 - a variant that does not compile is a result
            print(
                json.dumps({"tag": v.get("tag", ""), "variant": v, "error": f"{type(e).__name__}: {str(e)[:300]}"}),
                flush=True,
            )


if __name__ == "__main__":
    main()
