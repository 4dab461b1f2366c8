# Issue #49, the other Triton 3.6 form the issue lists: the MLA page kernel as persistent programs
# (benchmarks/lab/mla_persist.py: a /tmp copy of kernels.py whose kernel loops over the shipped grid's work items,
# grid min(items, SMs)), against the shipped kernel (--shipped) in the same call, alternating, bf16, "tma" form:
#   shape 0: 128 heads x 64 x 4096   (64, 64, 8, 2)   128 items: one wave of one program per SM either way
#   shape 1: 16 heads x 64 x 4096    (16, 32, 4, 2)   the policy's splits
#   shape 2: 16 heads x 1 x 8192     (16, 32, 4, 2)   128 splits (the policy's): one wave
#   shape 3: 128 heads x 256 x 1024  (64, 64, 8, 2)   512 items: ~4 waves, where persistence could save launches/tail
# At most 8 minutes (8 runs, each under 55 s) (repository root, $OUT set). Expected: within noise of shipped at shapes 0-2 (the grid already fits
# one wave: each program runs one item; AOT sm_90a: 255 registers, the 16-head tile 235 -> 255 with 24 B spill
# outside its key loops, which may cost a few %), at most a few % faster at shape 3. Every row checked against fp32.
#   bash benchmarks/lab/gpu_mla_persist.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
for round in 1; do
  for shape in "0 tma:64,64,8,2" "1 tma:16,32,4,2" "2 tma:16,32,4,2" "3 tma:64,64,8,2"; do
    set -- $shape
    for form in --shipped --per-sm=1; do
      timeout 55 python benchmarks/lab/mla_persist.py $form --only $1 --kv bf16 --pick $2 --budget 45 > /tmp/p.jsonl 2> /tmp/p.err
      echo "round $round shape $1 $form rc $?"; grep -v '^mla_persist' /tmp/p.err | tail -n 2 | cut -c1-300
      sed "s/^{/{\"round\": $round, \"run\": \"$form\", /" /tmp/p.jsonl >> $OUT/mla_persist.jsonl
      grep '"form": "tma"' /tmp/p.jsonl | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print('  ', r['shape'], r.get('splits'), 'us', r.get('us'), 'dev_us', r.get('dev_us'), 'tflops', r.get('tflops'), 'err', r.get('err'), r.get('error', ''))"
    done
  done
done
