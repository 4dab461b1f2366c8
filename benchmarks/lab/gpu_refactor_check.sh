# Issue #46's GPU check in one device call (repository root, $OUT set, the tree before the refactor in .ab_old:
# `git archive 6d00e72 vllm_xpu_attn | tar -x -C .ab_old`, carried), about 9 minutes: the randomized GPU suite
# (12 x 26 layouts + the other GPU tests) on this tree, then ab_trees.py old vs this tree (decode, prefill,
# features, D 64/128/256; alternating processes, 2 reps). Expected: the suite passes; every case within noise
# (+-3 %) except split-K decode at 8 x 32768, which the decode_split tile (#51) takes from ~82 % to ~100 % of copy.
set -u
mkdir -p /tmp/gs; t0=$SECONDS; OUT=/tmp/gs timeout 250 bash tests/gpu/suite_parallel.sh 26 12 > $OUT/suite.txt 2>&1
echo "suite rc $? in $((SECONDS-t0)) s" | tee -a $OUT/suite.txt; tail -n 16 $OUT/suite.txt
tar czf $OUT/suite_logs.tgz -C /tmp/gs .
t0=$SECONDS; timeout 300 python benchmarks/lab/ab_trees.py .ab_old . 2 > $OUT/ab_trees.jsonl 2> $OUT/ab_trees.txt
echo "ab_trees rc $? in $((SECONDS-t0)) s"; tail -n 24 $OUT/ab_trees.txt
