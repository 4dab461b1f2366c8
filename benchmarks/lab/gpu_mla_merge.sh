# Issue #49, MLA decode at 16 heads x 1 x 8192 (target 60 % of copy; 22.2 us device time at 32 splits, 14 %): the
# split-K merge over output-column programs (tuning.merge_columns). Before it one program per query row and head
# merged MLA's 512-wide row (16 programs; 254 registers at 64 splits, 5.9 KB spill at 128: merge_aot.py); now
# 4-16 programs a row and head at 56 registers. One call, about 2 minutes (repository root, $OUT set,
# benchmarks/.peers carried with vxa_f132872, the tree before): mla_new.py "tma" (16, 32, 4, 2) at forced 16 / 32 /
# 64 / 128 splits, bf16, the old package then this one -> mla_merge_{old,new}.jsonl (us back-to-back, dev_us device
# time). Expected: new dev_us below old at 32 splits and lower still at 64 / 128 (old: 22.9 / 17.6 / 73.3 us on an
# H100); if 64 splits wins, MLA's split cap (tuning.MAX_SPLITS 32) is what to raise next.
#   bash benchmarks/lab/gpu_mla_merge.sh
set -u
export PYTHONUNBUFFERED=1
for tree in old new; do
  P=.; [ $tree = old ] && P=benchmarks/.peers/vxa_f132872:.
  PYTHONPATH=$P:benchmarks timeout 75 python benchmarks/lab/mla_new.py --only 2 --kv bf16 --pick tma:16,32,4,2 \
    --splits 16,32,64,128 --budget 55 > $OUT/mla_merge_$tree.jsonl 2> /tmp/mla_merge_$tree.err
  echo "$tree rc $? ${SECONDS}s"; tail -n 2 /tmp/mla_merge_$tree.err
  python - "$OUT/mla_merge_$tree.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "form" in r:
        print(r.get("forced_splits"), "us", r.get("us"), "dev_us", r.get("dev_us"), "pct", r.get("pct_copy"), r.get("error", ""))
PY
done
