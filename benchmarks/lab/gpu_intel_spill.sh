# Does the H200 keep its speed through the Intel spill work, and does the randomized GPU suite pass on what ships?
# One device call from the repository root with $OUT set and the pre-work tree's package in .ab_old
# (git archive 70620ab vllm_xpu_attn | tar -x -C .ab_old; carried), about 7 minutes:
# the GPU suite (12 x 26 random layouts + the other GPU tests), then ab_trees.py (paged decode and prefill, features,
# D 64/128/256: old vs this tree in alternating processes, 2 reps), then ab_mla.py (old/new interleaved, 2 reps).
set -u
mkdir -p /tmp/gs; t0=$SECONDS; OUT=/tmp/gs timeout 240 bash tests/gpu/suite_parallel.sh 26 12 > $OUT/suite.txt 2>&1
echo "suite rc $? in $((SECONDS-t0)) s" | tee -a $OUT/suite.txt; tail -n 16 $OUT/suite.txt
tar czf $OUT/suite_logs.tgz -C /tmp/gs .
t0=$SECONDS; timeout 270 python benchmarks/lab/ab_trees.py .ab_old . 2 > $OUT/ab_trees.jsonl 2> $OUT/ab_trees.txt
echo "ab_trees rc $? in $((SECONDS-t0)) s"; cat $OUT/ab_trees.txt | tail -n 20
t0=$SECONDS
for i in 1 2; do
  PYTHONPATH=.ab_old timeout 60 python benchmarks/lab/ab_mla.py old >> $OUT/ab_mla.jsonl 2>> $OUT/ab_mla.txt
  PYTHONPATH=. timeout 60 python benchmarks/lab/ab_mla.py new >> $OUT/ab_mla.jsonl 2>> $OUT/ab_mla.txt
done
echo "ab_mla in $((SECONDS-t0)) s"; tail -n 3 $OUT/ab_mla.txt
