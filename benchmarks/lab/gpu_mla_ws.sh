# Issue #49, one of the Triton 3.6 forms the issue lists: the MLA page kernel's unmasked key loop as
# tl.range(..., warp_specialize=True) (benchmarks/lab/mla_ws.py loads a copy of kernels.py with that loop changed),
# against the shipped loop in the same call, "tma" form at 128 heads (64, 64, 8, 2) and 16 heads (16, 32, 4, 2),
# bf16, 64 x 4096. About 2 minutes (repository root, $OUT set). Expected: within noise of the shipped loop or slower
# (Hopper wgmma already overlaps inside one partition; prefill's loop showed no change), or a compile error, recorded.
# AOT sm_90a with Triton 3.6.0 already shows the SASS identical to the shipped kernel's at both tiles
# (benchmarks/lab/README.md): with that Triton the two rows time the same machine code.
#   bash benchmarks/lab/gpu_mla_ws.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
for shape in "0 tma:64,64,8,2" "1 tma:16,32,4,2"; do
  set -- $shape
  for script in mla_new mla_ws; do
    timeout 50 python benchmarks/lab/$script.py --only $1 --kv bf16 --pick $2 --budget 40 > /tmp/ws.jsonl 2> /tmp/ws.err
    echo "$script shape $1 rc $?"; tail -n 2 /tmp/ws.err | cut -c1-300
    sed "s/^{/{\"script\": \"$script\", /" /tmp/ws.jsonl >> $OUT/mla_ws.jsonl
    grep '"form": "tma"' /tmp/ws.jsonl | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print('  ', r['shape'], r['tiles'], 'us', r.get('us'), 'tflops', r.get('tflops'), 'err', r.get('err'), r.get('error', ''))"
  done
done
