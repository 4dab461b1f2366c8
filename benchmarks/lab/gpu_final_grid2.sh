# Issues #51 / #49: the records after the first grid_tune.py call's decisions (SPLIT_FILL 1 for paged decode, the
# cuda_sm90 "decode_window" tile), one device call (about 9 minutes, repository root, $OUT set, benchmarks/.peers
# carried), steps in order of need, each under a timeout cut to what is left:
# 1. bench_decode_grid.py (the wider grid through the engine path, peers beside) -> decode_grid.{json,png};
# 2. bench_attention.py --no-flex (standard shapes, engine + one-call rows, peers: README's figures)
#    -> bench_attention.{json,png};
# 3. compute-sanitizer memcheck over the real-size, graph, MLA and misaligned GPU tests (the MLA page kernel and
#    the feature / D 64 / window decode tiles had not been under memcheck) -> memcheck.log;
# 4. the randomized GPU suite (4 x 12 layouts); 5. bench_fp8_engine.py -> fp8_engine.json;
# 6. Nsight Compute, warm-up off, of bf16 / e4m3 paged decode at 64 x 4096 and causal prefill 1 x 8192 beside cuDNN;
# 7. grid_tune.py --stage 2 (split tile at every split shape, window tiles), as time allows.
# 6, 7, the suite's and the benchmarks' logs: logs.tgz. Expected: memcheck 0 errors; every grid row >= 90 % of copy
# but 16 q / 2 KV heads (~88-90 %); the suite passes.
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-560}
left() { local l=$((BUDGET - SECONDS - 8)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 8)) -gt 25 ]; }
L=/tmp/logs; mkdir -p $L /tmp/suite
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
t=$SECONDS; timeout "$(left 140)" python benchmarks/bench_decode_grid.py --out $OUT > $L/grid.log 2>&1; echo "grid rc $? $((SECONDS-t)) s"
grep -h '"name"' $L/grid.log | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l.split(' [')[0])
    print(r['name'], round(r.get('pct_copy', 0), 1), round(r.get('vllm_unified_pct_copy', 0), 1), round(r.get('sglang_decode_pct_copy', 0), 1), r.get('error', ''))"
t=$SECONDS; timeout "$(left 110)" python benchmarks/bench_attention.py --no-flex --out $OUT > $L/bench_attention.log 2>&1; echo "attention rc $? $((SECONDS-t)) s"
mv $OUT/results.png $OUT/bench_attention.png 2>/dev/null; mv $OUT/results.json $OUT/bench_attention.json 2>/dev/null
t=$SECONDS
go && (cd tests && XPU_ATTN_WARMUP=0 VXA_GPU_EXAMPLES=3 PYTHONPATH=..:.:support timeout "$(left 130)" compute-sanitizer --tool memcheck \
  --print-limit 20 python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider \
  -k "real_sizes or graph or mla or misaligned or head_dim_tiles" > $OUT/memcheck.log 2>&1)
echo "memcheck rc $? $((SECONDS-t)) s"; tail -n 2 $OUT/memcheck.log
t=$SECONDS; go && OUT=/tmp/suite timeout "$(left 75)" bash tests/gpu/suite_parallel.sh 4 12 > $L/suite_console.log 2>&1
echo "suite rc $? $((SECONDS-t)) s"; tail -qn 1 /tmp/suite/suite-*.log
t=$SECONDS; go && timeout "$(left 60)" python benchmarks/bench_fp8_engine.py --out $OUT > $L/fp8.log 2>&1; echo "fp8 rc $? $((SECONDS-t)) s"
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats"
prof() {  # name, kernel regex, skip, count, command...
  local name=$1 rx=$2 skip=$3 cnt=$4; shift 4
  go || { echo "skip $name"; return; }
  XPU_ATTN_WARMUP=0 timeout "$(left 45)" ncu $SECTIONS -k "regex:$rx" --launch-skip "$skip" --launch-count "$cnt" "$@" > $L/ncu_$name.txt 2>&1
  echo "ncu $name rc $? at ${SECONDS}s"
  grep -E "^  [_a-z].*\(|Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Issue Slots Busy" $L/ncu_$name.txt | head -14
}
prof decode_bf16_64x4096 _paged_attn 1 1 python benchmarks/lab/fp8_probe.py --one 0 bf16
prof decode_e4m3_64x4096 _paged_attn 1 1 python benchmarks/lab/fp8_probe.py --one 0 e4m3
prof prefill_1x8192 "_paged_attn|sdpa|fprop|flash" 1 2 python benchmarks/lab/profile_prefill.py
go && timeout "$(left 100)" python benchmarks/lab/grid_tune.py --stage 2 --rounds 2 --budget 40 > $L/grid_tune2.jsonl 2>&1
grep summary $L/grid_tune2.jsonl
tar czf $OUT/logs.tgz -C /tmp logs suite
echo "done at ${SECONDS}s"
