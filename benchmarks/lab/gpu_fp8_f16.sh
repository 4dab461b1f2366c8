# The fp16-dots decision for FP8 caches (FP8_DECODE.md "Next: fp16 dots"): one device call from the repository root
# (the device's copy of the tree: part 2 patches it) with $OUT set, about 9 minutes.
# part 1: this tree vs this tree + fp8_f16_dots.patch, each in its own process (fp8_ab.py; --tiles sweeps the
#         decode_fp8 tile in the patched tree)
# part 2: the patch applied here, the randomized GPU suite (FP8 in about a quarter of its layouts) and the FP8
#         graph and warm-up tests under memcheck
set -u
rm -rf /tmp/old /tmp/new && mkdir -p /tmp/old /tmp/new
cp -r vllm_xpu_attn /tmp/old/ && cp -r vllm_xpu_attn /tmp/new/
(cd /tmp/new && patch -p1 -s < "$OLDPWD/benchmarks/lab/fp8_f16_dots.patch") || { echo "patch failed"; exit 1; }
python benchmarks/lab/fp8_ab.py /tmp/old /tmp/new 2 --tiles > $OUT/fp8_ab.jsonl 2> $OUT/fp8_ab.txt; cat $OUT/fp8_ab.txt
git apply benchmarks/lab/fp8_f16_dots.patch || exit 1
mkdir -p /tmp/gs; t0=$SECONDS; OUT=/tmp/gs timeout 420 bash tests/gpu/suite_parallel.sh 26 12; echo "suite rc $? in $((SECONDS-t0)) s"
tail -q -n 1 /tmp/gs/suite-*.log | sort | uniq -c; tar czf $OUT/suite_logs.tgz -C /tmp/gs .
cd tests; VXA_GPU_EXAMPLES=6 PYTHONPATH=..:.:support timeout 240 compute-sanitizer --tool memcheck python -m pytest -q \
  -p no:cacheprovider gpu/gpu_check_triton.py -k "fp8" > $OUT/fp8_memcheck.log 2>&1; echo "memcheck rc $?"
tail -n 3 $OUT/fp8_memcheck.log
