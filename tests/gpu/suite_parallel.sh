#!/bin/bash
# The GPU suite (tests/gpu/gpu_check_triton.py) in parallel processes, on the device machine from the repo root:
#
#     bash tests/gpu/suite_parallel.sh [EXAMPLES_PER_PROCESS=100] [PROCESSES=3]
#
# The random real-size test is compile-bound (each layout's kernel specialisations compile on the host's
# cores), so PROCESSES x EXAMPLES_PER_PROCESS layouts, each process with its own --hypothesis-seed, finish in
# about 1/PROCESSES of one process's time; the other GPU tests run alongside in one more process.
# Logs: $OUT/suite-*.log (or /tmp). Exit status 0 only if every process passed.
set -u
n=${1:-100}
procs=${2:-3}
out=${OUT:-/tmp}
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH=..:.
pids=()
for s in $(seq 1 "$procs"); do
  VXA_GPU_EXAMPLES=$n python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider \
    -k "real_sizes and not batch_invariant" --hypothesis-seed="$s" > "$out/suite-$s.log" 2>&1 &
  pids+=($!)
done
VXA_GPU_EXAMPLES=150 python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider -k "not real_sizes or batch_invariant" \
  > "$out/suite-rest.log" 2>&1 &
pids+=($!)
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for f in "$out"/suite-*.log; do echo "== $f"; tail -n 2 "$f"; done
exit $rc
