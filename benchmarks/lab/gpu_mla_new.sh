# Issue #49: the MLA page-block kernel (_mla_page_kernel, tuning.MLA_KERNEL_FORM "ahead"/"tma"/"page") against the
# shipped MLA kernel (_mla_attn_kernel, "gather") and SGLang's Triton MLA decode, then the GPU MLA test per form.
# One device call from the repository root with $OUT set; under 8 minutes (BUDGET seconds, default 470), every step
# under `timeout` cut to what is left (later steps are skipped, in this order of need). Carry benchmarks/.peers for
# the SGLang column (else its rows read "error").
#   BUDGET=470 bash benchmarks/lab/gpu_mla_new.sh
# Files in $OUT (4): mla_new.jsonl (every candidate, checked vs fp32 then timed; last line "summary"), mla_new.err,
# gpu_tests_mla.txt (the GPU MLA test: "ahead" forced, shipped, then "tma", "page"), ncu_ahead_h128.txt (Nsight
# Compute of the "ahead" form, 64 x 32 tile, at 128 heads x 64 x 4096 bf16: registers, spills, occupancy, tensor pipe).
# Reading: benchmarks/lab/README.md.
set -u
export PYTHONPATH=.
BUDGET=${BUDGET:-470}
left() { local l=$((BUDGET - SECONDS - 10)); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
go() { [ $((BUDGET - SECONDS - 10)) -gt 20 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
# 1. the candidates (23 compiles with the warm-up off, 3 timings each); its own budget skips the tail
timeout "$(left 270)" python benchmarks/lab/mla_new.py --budget 220 > $OUT/mla_new.jsonl 2> $OUT/mla_new.err
echo "mla_new rc $? at ${SECONDS}s"; tail -n 3 $OUT/mla_new.err
python - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/mla_new.jsonl") if l.startswith("{")]
for r in rows:
    if "shape" in r:
        print(r["shape"], r["kv"], r["form"], r.get("tiles"), "splits", r.get("splits"), r.get("kernel", ""),
              r.get("desc", ""), r.get("ahead", ""), "us", r.get("us"), "TFLOP/s", r.get("tflops"),
              "%copy", r.get("pct_copy"), "err", r.get("err"), r.get("error", "")[:90], r.get("skipped", ""))
    elif "summary" in r:
        for s in r["summary"]:
            print("SUMMARY", json.dumps(s))
    else:
        print(json.dumps(r))
PY
# 2. the GPU MLA test (16 heads, page 64, warm-up then serve: split-K decode, extend rows) with the "ahead" form
# forced for cuda_sm90 (in-process table patch), then as shipped; "tma" and "page" after the profile
forms() {
  timeout "$(left 75)" python - "$1" <<'PY' >> $OUT/gpu_tests_mla.txt 2>&1
import sys
import pytest
from vllm_xpu_attn.kernels.providers.triton import tuning
if sys.argv[1] != "shipped":
    tuning.MLA_KERNEL_FORM["cuda_sm90"] = {"mla_decode": sys.argv[1], "mla_wide": sys.argv[1]}
print("== MLA_KERNEL_FORM cuda_sm90:", tuning.MLA_KERNEL_FORM.get("cuda_sm90"), flush=True)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/gpu/gpu_check_triton.py", "-k", "mla"]))
PY
  echo "gpu tests ($1) rc $? at ${SECONDS}s"; tail -n 2 $OUT/gpu_tests_mla.txt
}
for f in ahead shipped; do go && forms $f; done
# 3. Nsight Compute of the "ahead" form at 128 heads (spills, occupancy, tensor pipe on the device), if time is left
if go && command -v ncu > /dev/null; then
  timeout "$(left 120)" ncu --set full -k regex:_mla_page --launch-count 2 \
    python benchmarks/lab/mla_new.py --only 0 --kv bf16 --pick ahead:64,32,8,2 --profile > $OUT/ncu_ahead_h128.txt 2>&1
  echo "ncu rc $? at ${SECONDS}s"
  grep -E "Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|DRAM Throughput|Local Memory Spill|Tensor" \
    $OUT/ncu_ahead_h128.txt | tail -n 10
fi
for f in tma page; do go && forms $f; done
echo "done at ${SECONDS}s"
