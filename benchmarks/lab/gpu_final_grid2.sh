# Issues #51 / #49: the records after grid_tune.py's decision, one device call (about 9 minutes, repository root,
# $OUT set, benchmarks/.peers carried). 1. compute-sanitizer memcheck over the real-size, graph, MLA and misaligned
# GPU tests (the MLA page kernel and the feature / D 64 decode tiles have not been under memcheck yet);
# 2. bench_decode_grid.py (the wider grid through the engine path, peers beside); 3. bench_attention.py --no-flex
# (standard shapes, engine + one-call rows, peers: README's figures); 4. bench_fp8_engine.py (FP8 against the
# engine-path bf16 of the same run); 5. the randomized GPU suite, 6 x 12 layouts.
# Expected: memcheck 0 errors; every grid row >= 90 % of copy; the suite passes.
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-570}
left() { local l=$((BUDGET - SECONDS - 8)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
L=/tmp/logs; mkdir -p $L /tmp/suite
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
t=$SECONDS
(cd tests && XPU_ATTN_WARMUP=0 VXA_GPU_EXAMPLES=4 PYTHONPATH=..:.:support timeout "$(left 150)" compute-sanitizer --tool memcheck \
  --print-limit 20 python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider \
  -k "real_sizes or graph or mla or misaligned or head_dim_tiles" > $OUT/memcheck.log 2>&1)
echo "memcheck rc $? $((SECONDS-t)) s"; tail -n 2 $OUT/memcheck.log
t=$SECONDS; timeout "$(left 140)" python benchmarks/bench_decode_grid.py --out $OUT > $L/grid.log 2>&1; echo "grid rc $? $((SECONDS-t)) s"
t=$SECONDS; timeout "$(left 110)" python benchmarks/bench_attention.py --no-flex --out $OUT > $L/bench_attention.log 2>&1; echo "attention rc $? $((SECONDS-t)) s"
mv $OUT/results.png $OUT/bench_attention.png 2>/dev/null; mv $OUT/results.json $OUT/bench_attention.json 2>/dev/null
t=$SECONDS; timeout "$(left 60)" python benchmarks/bench_fp8_engine.py --out $OUT > $L/fp8.log 2>&1; echo "fp8 rc $? $((SECONDS-t)) s"
t=$SECONDS; OUT=/tmp/suite timeout "$(left 90)" bash tests/gpu/suite_parallel.sh 6 12 > $L/suite_console.log 2>&1
echo "suite rc $? $((SECONDS-t)) s"; tail -qn 1 /tmp/suite/suite-*.log
tar czf $OUT/logs.tgz -C /tmp logs suite
grep -h '"name"' $L/grid.log | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l.split(' [')[0])
    print(r['name'], round(r.get('pct_copy', 0), 1), round(r.get('vllm_unified_pct_copy', 0), 1), round(r.get('sglang_decode_pct_copy', 0), 1), r.get('error', ''))"
echo "done at ${SECONDS}s"
