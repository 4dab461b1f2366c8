"""AOT-compile the paged attention kernel for sm_90a on a machine without a GPU (dev tool).

    python benchmarks/lab/cuda_aot.py vllm_xpu_attn/kernels/providers/triton/kernels.py '{"GROUP": 8, "USE_DESC": false}'

Compiles one specialisation (the 1 x 8192 prefill's by default: bf16, D=128, GQA 4, page 64, the
sm90 descriptor tiles 128 x 64, 4 warps, 2 stages; the JSON overrides constexprs, "q"/"kv" dtypes,
"warps", "stages", "_opts": extra compile options such as {"maxnreg": 128}) through Triton's NVIDIA backend and its bundled ptxas, and prints shared memory,
global scratch and ptxas' register / stack report. Use the Triton version the GPU machine runs
(pip install triton==3.6.0 into a venv): ptxas ships with it, and its behaviour is what is being checked.
"""
import importlib.util, sys, json
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

KERNELS = sys.argv[1]
variant = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
spec = importlib.util.spec_from_file_location("k", KERNELS)
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
fn = mod._paged_attn_kernel
consts = dict(WIN_LEFT=-1, WIN_RIGHT=-1, PAGE=64, GROUP=4, D=128, DV=128, BLOCK_D=128, BLOCK_DV=128, CHUNK_D=128,
              CHUNK_DV=128, BLOCK_M=128,
              BLOCK_N=64, NUM_SPLITS=1, CAUSAL=True, HAS_SOFTCAP=False, ALIBI_DOT=False, WRITE_LSE=False, ALIGN_ROWS=False,
              SPLIT_MASK=True, USE_DESC=True, HAS_SINKS=False, HAS_ALIBI=False, HAS_DESCALE=False,
              DESCALE_PER_HEAD=False, FP32_DOT=False, FP8_CVT=0)
warps, stages = variant.pop("warps", 4), variant.pop("stages", 2)
qt, kt = variant.pop("q", "bf16"), variant.pop("kv", None)
kt = kt or qt
consts.update(variant)
ptr = {"Q": "*" + qt, "K": "*" + kt, "V": "*" + kt, "PT": "*i32", "SEQ": "*i32", "CUQ": "*i32", "O": "*" + qt,
       "ERR": "*i32"}
none = {"SINKS", "ALIBI", "KDS", "VDS", "LSE", "OP", "LP"}
if consts["HAS_SINKS"]: ptr["SINKS"] = "*fp32"; none.discard("SINKS")
if consts["HAS_ALIBI"]: ptr["ALIBI"] = "*fp32"; none.discard("ALIBI")
if consts["HAS_DESCALE"]: ptr["KDS"] = ptr["VDS"] = "*fp32"; none -= {"KDS", "VDS"}
if consts["WRITE_LSE"]: ptr["LSE"] = "*fp32"; none.discard("LSE")
if consts["NUM_SPLITS"] > 1: ptr["OP"] = ptr["LP"] = "*fp32"; none -= {"OP", "LP"}
sig, cx = {}, {}
for n in fn.arg_names:
    if n in consts:
        sig[n], cx[n] = "constexpr", consts[n]
    elif n in none:
        sig[n], cx[n] = "constexpr", None
    elif n in ptr:
        sig[n] = ptr[n]
    elif n in ("scale", "softcap"):
        sig[n] = "fp32"
    else:
        sig[n] = "i32"
aligned = [n for n in fn.arg_names if n in ptr or n.startswith("stride_") and n not in ("stride_ptb", "stride_ds_b")]
attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
k = triton.compile(ASTSource(fn, sig, cx, attrs), target=GPUTarget("cuda", 90, 32),
                   options=dict(num_warps=warps, num_stages=stages, **variant.pop("_opts", {})))
import collections, subprocess, tempfile, os, re
bindir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
    f.write(k.asm["ptx"])
for ptxas in ("ptxas", "ptxas-blackwell"):  # newer Triton builds emit a PTX version only their second ptxas reads
    if not os.path.exists(os.path.join(bindir, ptxas)):
        continue
    r = subprocess.run([os.path.join(bindir, ptxas), "-v", "--gpu-name=sm_90a", f.name, "-o", f.name + ".o"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        break
else:
    sys.exit(f"ptxas failed:\n{r.stderr[-2000:]}")
# the SASS by opcode (static counts): conversions (F2F, F2FP, PRMT), matrix ops (HMMA/HGMMA), ...
sass = subprocess.run([os.path.join(bindir, "cuobjdump"), "-sass", f.name + ".o"], capture_output=True, text=True).stdout
ops = collections.Counter(m.group(1).split(".")[0] for m in
                          re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
print(json.dumps({"shared": k.metadata.shared, "scratch": k.metadata.global_scratch_size, "sass": sum(ops.values()),
                  "ops": dict(ops.most_common(16))}),
      [l.strip() for l in r.stderr.splitlines() if "spill" in l or "stack" in l or "registers" in l])
