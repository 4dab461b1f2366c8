# part 1: the FP8 tile's speed, the GPU suite and memcheck on this tree (device machine, repo root)
set -u
python benchmarks/lab/fp8_plan.py 2>&1 | grep -E '"cfg": \[16, 128, 8, 2\]|copy' > $OUT/plan_after.jsonl; cut -c1-150 $OUT/plan_after.jsonl
mkdir -p /tmp/gs; t0=$SECONDS; OUT=/tmp/gs timeout 300 bash tests/gpu/suite_parallel.sh 26 12; echo "suite rc $? in $((SECONDS-t0)) s"
tail -q -n 1 /tmp/gs/suite-*.log | sort | uniq -c
tar czf $OUT/suite_logs.tgz -C /tmp/gs .
cd tests; t0=$SECONDS; VXA_GPU_EXAMPLES=8 PYTHONPATH=..:. timeout 180 compute-sanitizer --tool memcheck python -m pytest -q -p no:cacheprovider gpu/gpu_check_triton.py -k "real_sizes or hot_path or token_rows or graph" > $OUT/memcheck.log 2>&1; echo "memcheck rc $? in $((SECONDS-t0)) s"; tail -n 3 $OUT/memcheck.log
