# Issue #51's decode question in one device call (repository root, $OUT set, benchmarks/.peers carried: build it
# here first with `python benchmarks/extract_peers.py`), about 9 minutes:
# bench_attention.py (engine path vs one call, vLLM's and SGLang's Triton kernels beside ours, copy bandwidth),
# then splitk_sweep.py (split counts x decode tiles at the long-context shapes, kernel time split attention/merge).
set -u
export PYTHONPATH=.:benchmarks
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $OUT/gpu.txt
t0=$SECONDS; timeout 120 python benchmarks/bench_attention.py --no-flex --out $OUT > $OUT/bench_attention.log 2>&1
echo "bench_attention rc $? in $((SECONDS-t0)) s"; tail -n 25 $OUT/bench_attention.log
t0=$SECONDS; timeout 440 python benchmarks/lab/splitk_sweep.py > $OUT/splitk_sweep.jsonl 2> $OUT/splitk_sweep.err
echo "splitk_sweep rc $? in $((SECONDS-t0)) s"; tail -n 5 $OUT/splitk_sweep.err; tail -n 1 $OUT/splitk_sweep.jsonl | cut -c1-3000
