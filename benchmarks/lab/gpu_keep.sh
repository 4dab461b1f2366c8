# Issue #51's "keep" list at the split fill per cache width (tuning.SPLIT_FILL), one device call (about 9 minutes,
# repository root, $OUT set), each step under a timeout cut to what is left:
# 1. the new mixed-width test and the hot-path / warm-up GPU tests (gpu_check_triton.py);
# 2. bench_compile_stalls.py (cold cache, warm-up on / off: 0 stalls after warm-up; the FP8 kind now warms the split
#    counts of its own fill) -> compile_stalls.{json,png};
# 3. bench_host_cost.py --no-old (host cost per layer; the per-width sibling is read on the checked path only)
#    -> host_cost.json;
# 4. compute-sanitizer memcheck: the mixed-width test, real sizes, graphs, MLA -> memcheck.log;
# 5. the randomized GPU suite (26 x 12 layouts) with what is left -> logs.tgz.
# Expected: tests pass; 0 stalls with warm-up; host cost per layer within noise of 12.6 us; memcheck 0 errors.
#   BUDGET=560 bash benchmarks/lab/gpu_keep.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-560}
left() { local l=$((BUDGET - SECONDS - 8)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 8)) -gt 25 ]; }
L=/tmp/logs; mkdir -p $L /tmp/suite
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
t=$SECONDS
(cd tests && PYTHONPATH=..:.:support VXA_GPU_EXAMPLES=20 timeout "$(left 100)" python -m pytest -q -p no:cacheprovider \
  gpu/gpu_check_triton.py -k "own_fill or hot_path or warm_up" > $L/gpu_tests.txt 2>&1)
echo "gpu tests rc $? $((SECONDS-t)) s"; tail -n 3 $L/gpu_tests.txt
t=$SECONDS; go && timeout "$(left 120)" python benchmarks/bench_compile_stalls.py --out $OUT > $L/stalls.log 2>&1
echo "stalls rc $? $((SECONDS-t)) s"; tail -n 6 $L/stalls.log
t=$SECONDS; go && timeout "$(left 60)" python benchmarks/bench_host_cost.py --no-old --out $OUT > $L/host.log 2>&1
echo "host rc $? $((SECONDS-t)) s"; tail -n 8 $L/host.log
t=$SECONDS
go && (cd tests && XPU_ATTN_WARMUP=0 VXA_GPU_EXAMPLES=3 PYTHONPATH=..:.:support timeout "$(left 130)" compute-sanitizer --tool memcheck \
  --print-limit 20 python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider \
  -k "own_fill or real_sizes or graph or mla" > $OUT/memcheck.log 2>&1)
echo "memcheck rc $? $((SECONDS-t)) s"; tail -n 2 $OUT/memcheck.log
t=$SECONDS; go && OUT=/tmp/suite timeout "$(left 200)" bash tests/gpu/suite_parallel.sh 26 12 > $L/suite_console.log 2>&1
echo "suite rc $? $((SECONDS-t)) s"; tail -qn 1 /tmp/suite/suite-*.log
tar czf $OUT/logs.tgz -C /tmp logs suite
echo "done at ${SECONDS}s"
