"""Issue #49: the MLA page kernel as persistent programs (one of the Triton 3.6 forms the issue lists), timed by
mla_new.py, without touching the package.

A copy of kernels.py is written to /tmp in which the shipped kernel's body becomes ``_mla_page_one(b, tile, split,
...)`` (its three ``tl.program_id`` reads turned into parameters) and a new ``_mla_page_kernel`` with the same
parameters loops over the work items ``w = program_id(0), program_id(0) + num_programs(0), ...`` of the shipped grid
(batch x head tiles x splits, split fastest) and calls it for each. The provider's ``launcher`` is wrapped so that a
launch of that kernel gets the grid ``(min(items, SMs x --per-sm),)`` and the shipped grid's three sizes as the
constexprs GRID_B / GRID_T / GRID_S. Work item w runs exactly the shipped program (b, tile, split): the same bits.

    PYTHONPATH=.:benchmarks python benchmarks/lab/mla_persist.py --only 0,3 --kv bf16 --pick tma:64,64,8,2
    TRITON_INTERPRET=1 PYTHONPATH=.:benchmarks python benchmarks/lab/mla_persist.py --cpu --kv bf16,e4m3 --programs 2

mla_new.py's arguments, plus --shipped (the shipped kernel at this script's shapes: the baseline), --per-sm (resident programs per SM; default 1: the 64-head "tma" tile's 222 KB of
shared memory leaves one) and --programs (a fixed grid size instead, e.g. for the interpreter). Shape 3 is added
here: 128 heads x 256 x 1024 (512 work items: four waves of the 64-head tile on a 132-SM H100, where persistent
programs could save the launch of each wave's programs and its tail).
"""

import argparse
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..", "vllm_xpu_attn", "kernels", "providers", "triton", "kernels.py")
HEAD = "@triton.jit(do_not_specialize=[\"kv_rows\", \"pt_cols\", \"total_q\", \"stride_ptb\"])\ndef _mla_page_kernel(\n"
PIDS = "    b = tl.program_id(0)\n    tile = tl.program_id(1)\n    split = tl.program_id(2)\n"
BODY = '):\n    """Absorbed MLA by page blocks'


def persistent_source(text: str) -> str:
    """kernels.py's text with _mla_page_kernel turned into _mla_page_one + a persistent _mla_page_kernel."""
    for what, s in (("signature", HEAD), ("program ids", PIDS), ("docstring", BODY)):
        if text.count(s) != 1:
            sys.exit(f"mla_persist.py: the MLA page kernel's {what} was not found once in kernels.py")
    start = text.index(HEAD) + len(HEAD)
    params = text[start : text.index(BODY, start)]  # "    Q,\n    KV,\n ...    AHEAD: tl.constexpr,\n"
    names = [p.strip().rstrip(",").split(":")[0].strip() for p in params.splitlines() if p.strip()]
    text = text.replace(HEAD, "@triton.jit\ndef _mla_page_one(\n    b,\n    tile,\n    split,\n").replace(PIDS, "")
    calls = ", ".join(f"{n}={n}" for n in names)
    return text + (
        "\n\n" + HEAD + params + "    GRID_B: tl.constexpr = 1,\n    GRID_T: tl.constexpr = 1,\n    GRID_S: tl.constexpr = 1,\n"
        "):\n"
        "    for i in range(tl.program_id(0), GRID_B * GRID_T * GRID_S, tl.num_programs(0)):\n"
        "        w = i + 0 * tl.program_id(0)  # a tensor in the interpreter too (its range yields ints)\n"
        f"        _mla_page_one(b=w // (GRID_T * GRID_S), tile=w // GRID_S % GRID_T, split=w % GRID_S, {calls})\n"
    )


def main():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--per-sm", type=int, default=1)
    ap.add_argument("--programs", type=int, default=0)
    ap.add_argument("--shipped", action="store_true", help="the shipped kernel, with this script's shapes")
    mine, rest = ap.parse_known_args()
    sys.path.insert(0, HERE)
    import mla_new

    mla_new.SHAPES.append((128, 256, 1024))
    mla_new.CANDIDATES[3] = mla_new.WIDE
    sys.argv = [os.path.join(HERE, "mla_new.py")] + rest
    if mine.shipped:
        return mla_new.main()
    path = os.path.join(tempfile.mkdtemp(), "kernels_persist.py")
    with open(path, "w") as f:
        f.write(persistent_source(open(SRC).read()))
    spec = importlib.util.spec_from_file_location("kernels_persist", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from vllm_xpu_attn.kernels.api import get_provider
    from vllm_xpu_attn.kernels.providers.triton import kernels

    persistent = mod._mla_page_kernel
    kernels._mla_page_kernel = persistent  # step_launch imports it at launch time
    cls = type(get_provider("triton"))
    shipped = cls.launcher
    grids = []

    def launcher(self, fn, grid, consts, warps, stages, spec_key, options=None):
        if fn is persistent:
            g = tuple(int(x) for x in grid) + (1,) * (3 - len(grid))
            if mine.programs:
                programs = mine.programs
            else:
                import torch

                programs = torch.cuda.get_device_properties(0).multi_processor_count * mine.per_sm
            consts = dict(consts, GRID_B=g[0], GRID_T=g[1], GRID_S=g[2])
            grid = (min(g[0] * g[1] * g[2], programs), 1, 1)
            if (g, grid) not in grids:
                grids.append((g, grid))
                print(f"mla_persist: grid {g} -> {grid}", file=sys.stderr)
        return shipped(self, fn, grid, consts, warps, stages, spec_key, options)

    cls.launcher = launcher
    print(f"mla_persist: _mla_page_kernel from {path} (persistent programs)", file=sys.stderr)
    mla_new.main()


if __name__ == "__main__":
    main()
