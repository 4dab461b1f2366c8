# Issues #51 / #49: one device call (under 9 minutes, $OUT set, carry benchmarks/.peers not needed):
# 1. grid_tune.py: the engine path's two grid rows below 90 % of copy (16 q / 2 KV heads, window 1024) over tile and
#    split-policy candidates, and the split policy's fill factor at the split-K shapes (grid_tune.jsonl);
# 2. Nsight Compute (speed of light, occupancy, launch, warp state, scheduler, memory and compute workload) of the
#    kernels whose targets are out of reach so far: bf16 and e4m3 paged decode at 64 x 4096 (FP8 >= 1.8x bf16),
#    causal prefill 1 x 8192 next to cuDNN (>= 600 TFLOP/s), MLA "tma" at 128 x 64 x 4096 bf16 / e4m3 and
#    16 x 64 x 4096 bf16 (450 TFLOP/s, 85 % of copy, FP8 >= bf16) -> ncu_*.txt (6 files);
# between them, mla_new.py at 16 heads (bf16) with device time alone per split count (mla_small.jsonl).
#   BUDGET=560 bash benchmarks/lab/gpu_grid_tune.sh
# Expected reading: benchmarks/lab/README.md ("grid_tune.py").
set -u
export PYTHONPATH=.:benchmarks
BUDGET=${BUDGET:-560}
left() { local l=$((BUDGET - SECONDS - 10)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 10)) -gt 30 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout "$(left 200)" python benchmarks/lab/grid_tune.py --budget 140 > $OUT/grid_tune.jsonl 2> $OUT/grid_tune.err
echo "grid_tune rc $? at ${SECONDS}s"; tail -n 3 $OUT/grid_tune.err; grep summary $OUT/grid_tune.jsonl
# MLA at 16 heads, bf16: device time alone (queued behind a GPU sleep) per split count, 16 x 1 x 8192's 60 % target
timeout "$(left 90)" python benchmarks/lab/mla_new.py --only 1,2 --kv bf16 --budget 70 > $OUT/mla_small.jsonl 2>> $OUT/grid_tune.err
echo "mla_new rc $? at ${SECONDS}s"
python - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/mla_small.jsonl"):
    r = json.loads(l)
    if "shape" in r:
        print(r["shape"], r["form"], r.get("tiles"), "splits", r.get("splits"), "us", r.get("us"), "dev_us", r.get("dev_us"),
              "dev%copy", r.get("dev_pct_copy"), "host_us", r.get("host_us"), "err", r.get("err"), r.get("error", "")[:80])
PY
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats"
prof() {  # name, kernel regex, skip, count, command...
  local name=$1 rx=$2 skip=$3 cnt=$4; shift 4
  go || { echo "skip $name"; return; }
  timeout "$(left 80)" ncu $SECTIONS -k "regex:$rx" --launch-skip "$skip" --launch-count "$cnt" "$@" > $OUT/ncu_$name.txt 2>&1
  echo "ncu $name rc $? at ${SECONDS}s"
  grep -E "^  [_a-z].*\(|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|Memory Throughput|Issue Slots Busy|No Eligible|Executed Ipc A" $OUT/ncu_$name.txt | head -24
}
prof decode_bf16_64x4096 _paged_attn 1 1 python benchmarks/lab/fp8_probe.py --one 0 bf16
prof decode_e4m3_64x4096 _paged_attn 1 1 python benchmarks/lab/fp8_probe.py --one 0 e4m3
prof mla_tma_h128_bf16 _mla_page 1 1 python benchmarks/lab/mla_new.py --only 0 --kv bf16 --pick tma:64,64,8,2 --profile
prof mla_tma_h16_bf16 _mla_page 1 1 python benchmarks/lab/mla_new.py --only 1 --kv bf16 --pick tma:16,32,4,2 --profile
prof prefill_1x8192 "_paged_attn|sdpa|fprop|flash" 1 2 python benchmarks/lab/profile_prefill.py
prof mla_tma_h128_e4m3 _mla_page 1 1 python benchmarks/lab/mla_new.py --only 0 --kv e4m3 --pick tma:64,64,8,2 --profile
echo "done at ${SECONDS}s"
