"""AOT-compile the split-K merge (_merge_splits) for sm_90a without a GPU (dev tool): registers and spill per split
count at the column tile tuning.merge_columns picks (or BLOCK_C given).

    python benchmarks/lab/merge_aot.py [DV] [SPLITS ...] [--block-c N]     (defaults: 512, 16 32 64 128)

Run with the GPU machine's Triton (pip install triton==3.6.0 into a venv): its bundled ptxas is what is checked.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRITON = os.path.join(ROOT, "vllm_xpu_attn", "kernels", "providers", "triton")


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    args = sys.argv[1:]
    block_c = None
    if "--block-c" in args:
        i = args.index("--block-c")
        block_c = int(args[i + 1])
        del args[i : i + 2]
    dv = int(args[0]) if args else 512
    counts = [int(a) for a in args[1:]] or [16, 32, 64, 128]
    tuning = load("vxa_triton_tuning", os.path.join(TRITON, "tuning.py"))
    fn = load("k", os.path.join(TRITON, "kernels.py"))._merge_splits
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    ptr = {"OP": "*fp32", "LP": "*fp32", "O": "*bf16", "CUQ": "*i32"}
    for n in counts:
        c = block_c or tuning.merge_columns(n, dv)
        consts = dict(DV=dv, BLOCK_DV=dv, BLOCK_C=c, NUM_SPLITS=n, HAS_SINKS=True, WRITE_LSE=True)
        sig, cx = {}, {}
        for a in fn.arg_names:
            if a in consts:
                sig[a], cx[a] = "constexpr", consts[a]
            elif a in ptr:
                sig[a] = ptr[a]
            elif a in ("SINKS", "LSE"):
                sig[a] = "*fp32"
            else:
                sig[a] = "i32"
        attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in ptr}
        k = triton.compile(
            ASTSource(fn, sig, cx, attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=1)
        )
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(k.asm["ptx"])
        r = subprocess.run(
            [os.path.join(bindir, "ptxas"), "-v", "--gpu-name=sm_90a", f.name, "-o", f.name + ".o"],
            capture_output=True,
            text=True,
        )
        info = [ln.split(":", 1)[-1].strip() for ln in r.stderr.splitlines() if "spill" in ln or "registers" in ln]
        print(f"DV {dv} splits {n} BLOCK_C {c} ({dv // c} programs a row and head):", "; ".join(info))


if __name__ == "__main__":
    main()
