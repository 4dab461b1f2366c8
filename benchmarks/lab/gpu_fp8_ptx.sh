# Issue #51, FP8 KV decode at 1.8x bf16: the PTX-operand form (tuning.FP8_OPERANDS["cuda_sm90"]["paged"] = "ptx": FP8 tiles
# converted once by PTX cvt into fp16, stored, read by ldmatrix; 104-184 registers where the cast form took 255,
# benchmarks/lab/FP8_DECODE.md) on the device. One call (about 9 minutes, repository root, $OUT set, carry
# benchmarks/.peers with the tree before the change exported as benchmarks/.peers/vxa_f132872):
# 1. correctness first: the GPU FP8 tests and test_triton_provider's FP8 properties on the GPU (ptx form);
# 2. fp8_ab.py: before (f132872) vs this tree, paged decode, one rep, --tiles sweeps "decode_fp8" in this tree;
# 3. the fastest tile over e4m3 + e5m2 at the three shapes goes into tuning.py (this machine's copy), then
#    bench_fp8_engine.py (engine path, FP8 against the same run's bf16) -> fp8_engine.json;
# 4. memcheck of the FP8 GPU tests; 5. the randomized suite with what is left.
# Expected: e4m3 and e5m2 >= 1.8x bf16 through the engine path at 64 x 4096 / 256 x 1024 / 8 x 32768 if the key
# loop was register- and LDS-bound (the cast form: 1.29-1.52x, 245-287 us vs bf16 368-382 us); errors as before
# (max_err ~1e-3); tests pass; memcheck 0 errors.
#   BUDGET=560 bash benchmarks/lab/gpu_fp8_ptx.sh
set -u
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
BUDGET=${BUDGET:-560}
left() { local l=$((BUDGET - SECONDS - 8)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 8)) -gt 25 ]; }
L=/tmp/logs; mkdir -p $L /tmp/suite
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $L/gpu.txt
t=$SECONDS
(cd tests && PYTHONPATH=..:.:support timeout "$(left 90)" python -m pytest -q -x -p no:cacheprovider gpu/gpu_check_triton.py \
  -k "fp8 or e4m3" > $OUT/gpu_tests_fp8.txt 2>&1; echo "gpu tests rc $?")
(TRITON_INTERPRET=0 VXA_TRITON_EXAMPLES=60 PYTHONPATH=.:tests/support timeout "$(left 90)" python -m pytest -q -x -p no:cacheprovider \
  tests/test_triton_provider.py -k "fp8" >> $OUT/gpu_tests_fp8.txt 2>&1; echo "provider fp8 rc $?")
grep -E "passed|failed|error" $OUT/gpu_tests_fp8.txt | tail -n 4; echo "tests $((SECONDS-t)) s"
t=$SECONDS
FP8_AB_MLA=0 timeout "$(left 260)" python benchmarks/lab/fp8_ab.py benchmarks/.peers/vxa_f132872 . 1 --tiles \
  > $OUT/fp8_ab.jsonl 2> $L/fp8_ab.txt; echo "fp8_ab rc $? $((SECONDS-t)) s"; tail -n 12 $L/fp8_ab.txt
python - <<'PY'
import collections, json, os, re
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/fp8_ab.jsonl")]
tot, n = collections.Counter(), collections.Counter()
for r in rows:
    if r["tree"] == "new" and r["dtype"] != "bf16":
        tot[tuple(r["tile"])] += r["us"]; n[tuple(r["tile"])] += 1
full = max(n.values())
best = min((t for t in tot if n[t] == full), key=lambda t: tot[t])
for t in sorted(tot, key=lambda t: tot[t]):
    print("tile", t, "sum us", round(tot[t], 1), "cases", n[t])
p = "vllm_xpu_attn/kernels/providers/triton/tuning.py"
s = open(p).read()
s2 = re.sub(r'"decode_fp8": \(\d+, \d+, \d+, \d+\)', '"decode_fp8": (%d, %d, %d, %d)' % best, s, count=1)
open(p, "w").write(s2)
print("decode_fp8 ->", best)
PY
t=$SECONDS; go && timeout "$(left 100)" python benchmarks/bench_fp8_engine.py --out $OUT > $L/fp8.log 2>&1; echo "fp8 engine rc $? $((SECONDS-t)) s"
grep -h '"kv"' $L/fp8.log | python -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['kv'], r['batch'], r['context'], round(r['us'], 1), round(r.get('pct_copy', 0), 1), round(r['speedup_vs_bf16'], 2))"
t=$SECONDS
go && (cd tests && XPU_ATTN_WARMUP=0 VXA_GPU_EXAMPLES=3 PYTHONPATH=..:.:support timeout "$(left 110)" compute-sanitizer --tool memcheck \
  --print-limit 20 python -m pytest -q gpu/gpu_check_triton.py -p no:cacheprovider -k "fp8 or e4m3" > $OUT/memcheck_fp8.log 2>&1)
echo "memcheck rc $? $((SECONDS-t)) s"; tail -n 2 $OUT/memcheck_fp8.log
t=$SECONDS; go && OUT=/tmp/suite timeout "$(left 150)" bash tests/gpu/suite_parallel.sh 8 12 > $L/suite_console.log 2>&1
echo "suite rc $? $((SECONDS-t)) s"; tail -qn 1 /tmp/suite/suite-*.log | sort | uniq -c
grep -n '"decode_fp8"' vllm_xpu_attn/kernels/providers/triton/tuning.py
tar czf $OUT/logs.tgz -C /tmp logs suite
echo "done at ${SECONDS}s"
