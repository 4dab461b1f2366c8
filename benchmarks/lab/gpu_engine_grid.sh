# Issue #51, the device call after the feature-decode tile (tuning.py "decode_feature"), about 7 minutes, from the
# repository root with $OUT set and benchmarks/.peers carried. Writes 7 files.
# 1. bench_decode_grid.py: the wider decode grid through the engine path with vLLM's / SGLang's Triton kernels.
#    Expected: every row >= 90 % of copy (softcap / sinks / ALiBi now on the 4-warp tile: 98-101 % in the sweep),
#    ahead of both peers; a row below 90 % names the next tile question.
# 2. bench_attention.py --no-flex: the standard shapes, engine + one-call rows, peers (README's figures).
# 3. bench_fp8_engine.py: the FP8 table against the engine-path bf16 time of the same run.
# 4. the randomized GPU suite (new decode variants) with the features in it; bench_compile_stalls.py (0 expected).
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L /tmp/suite
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
t=$SECONDS; timeout 150 python benchmarks/bench_decode_grid.py --out $OUT > $L/grid.log 2>&1; echo "grid rc $? $((SECONDS-t)) s"
t=$SECONDS; timeout 110 python benchmarks/bench_attention.py --no-flex --out $OUT > $L/bench_attention.log 2>&1; echo "attention rc $? $((SECONDS-t)) s"
mv $OUT/results.png $OUT/bench_attention.png 2>/dev/null; mv $OUT/results.json $OUT/bench_attention.json 2>/dev/null
t=$SECONDS; timeout 60 python benchmarks/bench_fp8_engine.py --out $OUT > $L/fp8.log 2>&1; echo "fp8 rc $? $((SECONDS-t)) s"
t=$SECONDS; OUT=/tmp/suite timeout 150 bash tests/gpu/suite_parallel.sh 16 12 > $L/suite_console.log 2>&1
echo "suite rc $? $((SECONDS-t)) s"; tail -qn 1 /tmp/suite/suite-*.log
t=$SECONDS; OUT=$L timeout 95 python benchmarks/bench_compile_stalls.py > $L/compile_stalls.log 2>&1; echo "stalls rc $? $((SECONDS-t)) s"; tail -n 3 $L/compile_stalls.log
tar czf $OUT/suite_logs.tgz -C /tmp suite; tar czf $OUT/logs.tgz -C /tmp logs
grep -h '"name"' $L/grid.log | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l.split(' [')[0])
    print(r['name'], round(r.get('pct_copy', 0), 1), round(r.get('vllm_unified_pct_copy', 0), 1), round(r.get('sglang_decode_pct_copy', 0), 1), r.get('error', ''))"
