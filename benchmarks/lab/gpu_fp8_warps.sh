# Issue #51, FP8 decode past 1.6x bf16: why are the PTX-operand form's 4- and 8-warp tiles slower (245-415 us at
# 64 x 4096 e4m3) than its 2-warp (16, 64, 2, 3) (224 us) though they hold 104-204 registers against 250?
# (benchmarks/lab/h100/fp8_ptx_ab_h100.jsonl). One call, about 3 minutes (repository root, $OUT set): Nsight Compute of
# one e4m3 64 x 4096 decode launch at (16, 64, 2, 3), (16, 64, 4, 2) and (16, 128, 8, 2), warm-up off.
# Expected reading: the 4-warp tile's warp states (barrier or short-scoreboard stalls at the fp16 tile's store /
# ldmatrix, shared-memory bank conflicts) or its achieved occupancy say what a wider tile must change; a 4-warp tile
# at >= 12 warps per SM without those stalls is the route to >= 90 % of copy by bytes (1.8x).
#   bash benchmarks/lab/gpu_fp8_warps.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1 XPU_ATTN_WARMUP=0
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters"
for tile in 16,64,2,3 16,64,4,2 16,128,8,2; do
  timeout 60 ncu $SECTIONS -k "regex:_paged_attn" --launch-skip 1 --launch-count 1 \
    python benchmarks/lab/fp8_probe.py --one 0 e4m3 --tile $tile > $OUT/ncu_fp8_ptx_${tile//,/_}.txt 2>&1
  echo "ncu $tile rc $?"
  grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Issue Slots Busy|No Eligible|Bank Conflicts|Stall" $OUT/ncu_fp8_ptx_${tile//,/_}.txt | head -14
done
