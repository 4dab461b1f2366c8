# Issue #51's open decode question for the next device call (repository root, $OUT set), about 6 minutes: why do
# decode layers with softcap, sinks or ALiBi run at 79-82 % of copy at 64 x 4096 (ab_trees, H100) when plain decode
# runs at 96-100 %? splitk_sweep.py with each feature at 64x4096 and 8x32768 (split counts 1-64 x decode tiles).
# Expected reading: if a 4-warp or 64-key tile brings the feature rows to >= 90 % while plain decode stays on its
# tile, the fix is a feature-aware decode tile in tuning.py (CUDA only, through variants.attn_variant); if every
# tile stays near 80 %, the feature math itself (tanh, the sink merge, the ALiBi bias) is the limit, and the next
# step is Nsight Compute on the softcap variant.
set -u
export PYTHONPATH=.:benchmarks
for f in softcap sinks alibi; do
  t0=$SECONDS; timeout 110 python benchmarks/lab/splitk_sweep.py --feature $f --shapes 2,0 > $OUT/feature_$f.jsonl 2> $OUT/feature_$f.err
  echo "$f rc $? in $((SECONDS-t0)) s"; tail -n 1 $OUT/feature_$f.jsonl | cut -c1-1200
done
