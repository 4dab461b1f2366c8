# Issue #51's prefill question in one device call (repository root, $OUT set), about 4 minutes: does Triton 3.6's
# warp specialisation or a deeper software pipeline on the unmasked key loop of _paged_attn_kernel (the loop that
# holds most of a long causal prefill; tensor-descriptor K/V on sm90) move prefill toward 600 TFLOP/s?
# Two copies of kernels.py, each A/B against the shipped kernel with ab_kernel.py (2 reps, interleaved):
#   ws:  for start in tl.range(full_lo, full_hi, BLOCK_N, warp_specialize=USE_DESC)
#   st3: for start in tl.range(full_lo, full_hi, BLOCK_N, num_stages=3)
# Expected reading: a compile error or no gain (the loop body reads page ids per block, which the partitioner may
# refuse) closes this lever; a gain > 5 % on both prefill cases with decode unchanged is worth a GPU-suite run.
set -u
export PYTHONPATH=.:benchmarks
K=vllm_xpu_attn/kernels/providers/triton/kernels.py
mkdir -p /tmp/ws /tmp/st3
sed 's/        for start in range(full_lo, full_hi, BLOCK_N):/        for start in tl.range(full_lo, full_hi, BLOCK_N, warp_specialize=USE_DESC):/' $K > /tmp/ws/kernels.py
sed 's/        for start in range(full_lo, full_hi, BLOCK_N):/        for start in tl.range(full_lo, full_hi, BLOCK_N, num_stages=3):/' $K > /tmp/st3/kernels.py
for v in ws st3; do
  diff $K /tmp/$v/kernels.py | head -4
  t0=$SECONDS; timeout 200 python benchmarks/lab/ab_kernel.py /tmp/$v/kernels.py 2 > $OUT/ab_prefill_$v.jsonl 2> $OUT/ab_prefill_$v.err
  echo "$v rc $? in $((SECONDS-t0)) s"; tail -n 4 $OUT/ab_prefill_$v.err | cut -c1-400
  python - "$OUT/ab_prefill_$v.jsonl" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault((tuple(r["case"]), r["variant"]), []).append(r.get("tflops") or r.get("pct_copy"))
for (case, var), v in sorted(by.items()):
    print(case, var, statistics.median(v))
PY
done
