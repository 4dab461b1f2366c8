# Issue #49, the Nsight Compute profiles behind the two MLA targets left: (1) e4m3 latent in the PTX-operand form at
# 16 heads x 64 x 4096 (1.19x bf16's time on the H200) and (2) 16 heads x 1 x 8192 at the policy's 128 splits (13.7 us
# device time, 16 % of copy), split kernel and merge. One call, about 2 minutes (repository root, $OUT set), warm-up
# off, one profiled call after a compiled one: ncu_mla_e4m3_h16.txt, ncu_mla_h16x1x8192.txt.
# Expected: (1) the conversion's instructions and the fp16 tile's shared-memory round trip as the top stall, DRAM
# below bf16's; (2) each kernel's duration, DRAM throughput and the grid (128 programs of 64 keys; the merge's
# 16 x 16 programs) saying the time is per-program fixed cost and the second launch, not bandwidth.
#   bash benchmarks/lab/gpu_mla_ncu.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1 XPU_ATTN_WARMUP=0
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
timeout 120 ncu $S -k "regex:_mla_page_kernel" --launch-skip 1 --launch-count 1 \
  python benchmarks/lab/mla_new.py --only 1 --kv e4m3 --pick tma:16,32,4,2 --profile > $OUT/ncu_mla_e4m3_h16.txt 2>&1
echo "ncu e4m3 rc $?"; grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Executed Instructions  " $OUT/ncu_mla_e4m3_h16.txt | head -12
timeout 120 ncu $S -k "regex:_mla_page_kernel|_merge_splits" --launch-skip 2 --launch-count 2 \
  python benchmarks/lab/mla_new.py --only 2 --kv bf16 --pick tma:16,32,4,2 --splits 128 --profile > $OUT/ncu_mla_h16x1x8192.txt 2>&1
echo "ncu 16x1x8192 rc $?"; grep -E "^  _|Duration|Grid Size|Registers Per|DRAM Throughput|Memory Throughput|No Eligible" $OUT/ncu_mla_h16x1x8192.txt | head -20
