# One device call for issues #51 and #49 (about 9 minutes; from the repository root, $OUT set, benchmarks/.peers
# carried). 1. splitk_sweep.py --layer {d64,kv2,window} --quick --shapes 2 (the decode grid's rows below 90 %),
# 45 s each; 2. gpu_mla_new.sh with what is left (its own BUDGET). Files: sweep_{d64,kv2,window}.jsonl + the MLA
# script's 4. Readings: benchmarks/lab/README.md (splitk_sweep --layer; gpu_mla_new.sh).
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
for l in d64 kv2 window; do
  t=$SECONDS; timeout 45 python benchmarks/lab/splitk_sweep.py --quick --shapes 2 --layer $l > $OUT/sweep_$l.jsonl 2>/tmp/sweep_$l.err
  echo "sweep $l rc $? $((SECONDS-t)) s"; tail -n 2 /tmp/sweep_$l.err | cut -c1-300
  python - $OUT/sweep_$l.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ok = sorted((r for r in rows if "pct_copy" in r), key=lambda r: -r["pct_copy"])
print([(r.get("what", ""), r["tile"], r["splits"], r["pct_copy"]) for r in ok[:5]])
PY
done
BUDGET=$((560 - SECONDS - 15)) bash benchmarks/lab/gpu_mla_new.sh
