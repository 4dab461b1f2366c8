# The check after switching cuda_sm90 to the MLA "tma" form (#49) and the decode_d64 / window tiles (#51); about
# 6 minutes from the repository root with $OUT set and benchmarks/.peers carried. 1. the GPU MLA tests (the new
# CUDA-graph capture of MLA decode included), 2. bench_mla.py (every shape, SGLang beside), 3. bench_decode_grid.py,
# 4. a short randomized GPU suite (6 x 12 layouts). Expected: tests pass; MLA 128 x 64 x 4096 near 330 us;
# grid rows D 64 / window above their 89.8 / 74.3 %.
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
t=$SECONDS; timeout 70 python -m pytest -q -p no:cacheprovider tests/gpu/gpu_check_triton.py -k "mla" > $OUT/mla_tests.txt 2>&1
echo "mla tests rc $? $((SECONDS-t)) s"; tail -n 3 $OUT/mla_tests.txt
t=$SECONDS; timeout 100 python benchmarks/bench_mla.py > /tmp/bench_mla.log 2>&1; echo "bench_mla rc $? $((SECONDS-t)) s"; tail -n 8 /tmp/bench_mla.log | cut -c1-400
t=$SECONDS; timeout 130 python benchmarks/bench_decode_grid.py --out $OUT > /tmp/grid.log 2>&1; echo "grid rc $? $((SECONDS-t)) s"
mkdir -p /tmp/suite; t=$SECONDS; OUT=/tmp/suite timeout 75 bash tests/gpu/suite_parallel.sh 6 12 > /tmp/suite/console.log 2>&1
echo "suite rc $? $((SECONDS-t)) s"; tail -qn 1 /tmp/suite/suite-*.log
cp /tmp/bench_mla.log /tmp/grid.log /tmp/suite/; tar czf $OUT/logs.tgz -C /tmp suite
grep -h '"name"' /tmp/grid.log | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l.split(' [')[0])
    print(r['name'], round(r.get('pct_copy', 0), 1), round(r.get('vllm_unified_pct_copy', 0), 1), round(r.get('sglang_decode_pct_copy', 0), 1), r.get('error', ''))"
