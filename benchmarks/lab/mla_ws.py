"""Issue #49: the MLA page kernel with its unmasked key loop as ``tl.range(..., warp_specialize=True)`` (Triton 3.6's
producer / consumer partitions), timed by mla_new.py, without touching the package: a copy of kernels.py with that
one loop changed is loaded from /tmp and put in place of ``kernels._mla_page_kernel`` before the provider launches
it (step_launch imports the kernel at launch time).

    PYTHONPATH=.:benchmarks python benchmarks/lab/mla_ws.py --only 0,1 --kv bf16 --pick tma:64,64,8,2   # args: mla_new.py's
"""

import importlib.util
import os
import runpy
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "vllm_xpu_attn", "kernels", "providers", "triton", "kernels.py")
LOOP = "        for start in range(lo, mid, BLOCK_N):\n"
WS = "        for start in tl.range(lo, mid, BLOCK_N, warp_specialize=True):\n"


def main():
    text = open(SRC).read()
    if text.count(LOOP) != 1:
        sys.exit("mla_ws.py: the MLA page kernel's unmasked loop was not found once in kernels.py")
    path = os.path.join(tempfile.mkdtemp(), "kernels_ws.py")
    with open(path, "w") as f:
        f.write(text.replace(LOOP, WS))
    spec = importlib.util.spec_from_file_location("kernels_ws", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from vllm_xpu_attn.kernels.providers.triton import kernels

    kernels._mla_page_kernel = mod._mla_page_kernel
    print(f"mla_ws: _mla_page_kernel from {path} (unmasked loop warp-specialised)", file=sys.stderr)
    sys.argv = [os.path.join(HERE, "mla_new.py")] + sys.argv[1:]
    sys.path.insert(0, HERE)
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
