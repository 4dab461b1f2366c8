# Issue #49 after the column-program merge, MLA splits up to 128 (tuning.max_splits) and the FP8 latent's PTX-operand
# form: one call, about 6 minutes (repository root, $OUT set, benchmarks/.peers carried):
# 1. bench_mla.py (ours through the engine path next to SGLang's Triton MLA, bf16 and e4m3, copy bandwidth of the
#    same run) -> mla_decode.{json,png} (docs/h200/mla-decode.json);
# 2. the GPU MLA tests under compute-sanitizer memcheck (split counts up to the new cap) -> memcheck_mla.log;
# 3. the GPU MLA and FP8 tests with more examples -> gpu_tests_mla.txt.
# Expected: 16 x 1 x 8192 at the policy's 128 splits near 13.6 us device time (was 21.9 at 32); the other shapes
# as before; e4m3 0.81-0.85x the cast form; tests pass; memcheck 0 errors.
#   BUDGET=420 bash benchmarks/lab/gpu_mla_final.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-420}
left() { local l=$((BUDGET - SECONDS - 8)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 8)) -gt 25 ]; }
nvidia-smi --query-gpu=name --format=csv,noheader
t=$SECONDS; timeout "$(left 200)" python benchmarks/bench_mla.py > /tmp/bench_mla.log 2>&1
echo "bench_mla rc $? $((SECONDS-t)) s"; tail -n 25 /tmp/bench_mla.log | cut -c1-250
t=$SECONDS
go && (cd tests && XPU_ATTN_WARMUP=0 VXA_GPU_EXAMPLES=3 PYTHONPATH=..:.:support timeout "$(left 110)" compute-sanitizer --tool memcheck \
  --print-limit 20 python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider -k "mla" > $OUT/memcheck_mla.log 2>&1)
echo "memcheck rc $? $((SECONDS-t)) s"; tail -n 2 $OUT/memcheck_mla.log
t=$SECONDS
go && (cd tests && VXA_GPU_EXAMPLES=12 PYTHONPATH=..:.:support timeout "$(left 120)" python -m pytest -q gpu/gpu_check_triton.py \
  -p no:cacheprovider -k "mla or fp8" > $OUT/gpu_tests_mla.txt 2>&1)
echo "gpu tests rc $? $((SECONDS-t)) s"; tail -n 3 $OUT/gpu_tests_mla.txt
echo "done at ${SECONDS}s"
