#!/bin/bash
# The GPU suite (tests/gpu/gpu_check_triton.py) in parallel processes, on the device machine from the repo root:
#
#     bash tests/gpu/suite_parallel.sh [EXAMPLES_PER_PROCESS=26] [PROCESSES=12] [FIRST_SEED=1]
#
# The random real-size test is compile-bound (nearly every layout is a new kernel specialisation: window
# sizes, page sizes, head counts and dtypes are constexprs, and the compile runs on one host core), so
# PROCESSES x EXAMPLES_PER_PROCESS layouts, each process with its own --hypothesis-seed, finish in about
# 1/PROCESSES of one process's time (the H200 machine has 16 cores). Hypothesis starts every run with the
# same simplest layout, so 12 x 26 = 312 examples hold at least 301 distinct layouts. The other GPU tests
# run alongside in one more process. Logs: $OUT/suite-*.log, per-example progress in $OUT/progress-*.txt.
# Exit status 0 only if every process passed.
set -u
n=${1:-26}
procs=${2:-12}
seed0=${3:-1}
out=${OUT:-/tmp}
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=..:.:support
# every random layout is a new layer kind: compiling all the variants it could launch (warm-up) would multiply the
# suite's compile time; it checks what each layout launches. benchmarks/bench_compile_stalls.py covers warm-up.
export XPU_ATTN_WARMUP=0
pids=()
for s in $(seq "$seed0" $((seed0 + procs - 1))); do
  VXA_GPU_PROGRESS="$out/progress-$s.txt" VXA_GPU_EXAMPLES=$n python -m pytest -q gpu/gpu_check_triton.py \
    -p no:cacheprovider -k "real_sizes and not batch_invariant" --hypothesis-seed="$s" > "$out/suite-$s.log" 2>&1 &
  pids+=($!)
done
VXA_GPU_PROGRESS="$out/progress-rest.txt" VXA_GPU_EXAMPLES=150 python -m pytest -q gpu/gpu_check_triton.py \
  -p no:cacheprovider -k "not real_sizes or batch_invariant" > "$out/suite-rest.log" 2>&1 &
pids+=($!)
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for f in "$out"/suite-*.log; do echo "== $f"; tail -n 3 "$f"; done
for f in "$out"/progress-*.txt; do echo "== $f $(wc -l < "$f") examples, last at $(tail -n 1 "$f" | cut -c1-10)"; done
exit $rc
