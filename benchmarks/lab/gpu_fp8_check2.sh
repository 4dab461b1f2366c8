# part 2: FP8 decode under memcheck (split and not), and bf16 decode vs the package at two earlier commits
set -u
for a in "0 e4m3" "2 e5m2" "1 e4m3"; do timeout 60 compute-sanitizer --tool memcheck python benchmarks/lab/fp8_probe.py --one $a 2>&1 | tail -n 1; done
for r in ec743a9 2c1686f; do timeout 150 python benchmarks/bench_guards.py --before $r --rounds 3 --report-diff --decode-only --out $OUT/ab_$r 2>&1 | grep -v Warning | tail -n 4; done
