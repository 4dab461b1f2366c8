# Issues #51 / #49, a decision call (about 4 minutes, $OUT set), at the shipped split fill 2:
# 1. grid_tune.py --stage 2: the split tile at every split-K shape (16 q / 2 KV heads and the four long contexts)
#    and the window tile again, through the engine path (grid_tune2.jsonl);
# 2. MLA at fill 1's split counts: 128 heads x 64 x 4096 at 2 vs 4 splits (shipped), bf16 and e4m3;
#    16 heads x 64 x 4096 at 4 vs 8 (shipped); e4m3 at 128 heads on a 32-key tile (mla_splits.jsonl);
# 3. Nsight Compute with the warm-up off (the first run profiled a warm-up launch): bf16 and e4m3 paged decode at
#    64 x 4096, causal prefill 1 x 8192 beside cuDNN (ncu_*.txt).
#   BUDGET=300 bash benchmarks/lab/gpu_grid_tune2.sh
set -u
export PYTHONPATH=.:benchmarks
BUDGET=${BUDGET:-300}
left() { local l=$((BUDGET - SECONDS - 10)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 10)) -gt 30 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout "$(left 150)" python benchmarks/lab/grid_tune.py --stage 2 --budget 100 > $OUT/grid_tune2.jsonl 2> $OUT/grid_tune.err
echo "grid_tune rc $? at ${SECONDS}s"; tail -n 3 $OUT/grid_tune.err; grep summary $OUT/grid_tune2.jsonl
timeout "$(left 50)" python benchmarks/lab/mla_new.py --only 0 --kv bf16,e4m3 --pick tma:64,64,8,2 --splits 2,4 > $OUT/mla_splits.jsonl 2>> $OUT/grid_tune.err
timeout "$(left 30)" python benchmarks/lab/mla_new.py --only 1 --kv bf16 --pick tma:16,32,4,2 --splits 4,8 >> $OUT/mla_splits.jsonl 2>> $OUT/grid_tune.err
# e4m3 at 128 heads spills 2.79M local requests at the 64-key tile (ncu_mla_tma_h128_e4m3_h100.txt): a 32-key tile
timeout "$(left 30)" python benchmarks/lab/mla_new.py --only 0 --kv e4m3 --pick tma:64,32,8,2 --splits 2,4 >> $OUT/mla_splits.jsonl 2>> $OUT/grid_tune.err
echo "mla rc $? at ${SECONDS}s"
python - <<'PY'
import json, os
for l in open(os.environ["OUT"] + "/mla_splits.jsonl"):
    r = json.loads(l)
    if "shape" in r:
        print(r["shape"], r["kv"], r["form"], "splits", r.get("splits"), "us", r.get("us"), "dev_us", r.get("dev_us"),
              "tflops", r.get("tflops"), "%copy", r.get("pct_copy"), "err", r.get("err"), r.get("error", "")[:80])
PY
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section InstructionStats"
prof() {  # name, kernel regex, skip, count, command...
  local name=$1 rx=$2 skip=$3 cnt=$4; shift 4
  go || { echo "skip $name"; return; }
  XPU_ATTN_WARMUP=0 timeout "$(left 60)" ncu $SECTIONS -k "regex:$rx" --launch-skip "$skip" --launch-count "$cnt" "$@" > $OUT/ncu_$name.txt 2>&1
  echo "ncu $name rc $? at ${SECONDS}s"
  grep -E "^  [_a-z].*\(|Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|Issue Slots Busy|No Eligible|Executed Ipc A" $OUT/ncu_$name.txt | head -24
}
prof decode_bf16_64x4096 _paged_attn 1 1 python benchmarks/lab/fp8_probe.py --one 0 bf16
prof decode_e4m3_64x4096 _paged_attn 1 1 python benchmarks/lab/fp8_probe.py --one 0 e4m3
prof prefill_1x8192 "_paged_attn|sdpa|fprop|flash" 1 2 python benchmarks/lab/profile_prefill.py
echo "done at ${SECONDS}s"
