# Issue #49, the MLA page kernel over an FP8 latent in the PTX-operand form (see gpu_mla_fp8_ptx.sh, the full call),
# cut to what 190 s of device time holds: fp8_ab.py before (f132872) vs after, MLA decode only (16 and 128 heads x 64 x
# 4096, bf16 / e4m3 / e5m2, each checked against fp32 first). Expected: e4m3 / bf16 <= 1 at 16 heads (was 1.23).
#   bash benchmarks/lab/gpu_mla_fp8_short.sh
set -u
# the MLA entry of tuning.FP8_OPERANDS to "ptx" in this machine's copy (shipped: "cast" until this run decides)
sed -i 's/"cuda_sm90": {"paged": "ptx", "mla": "cast"}/"cuda_sm90": {"paged": "ptx", "mla": "ptx"}/' vllm_xpu_attn/kernels/providers/triton/tuning.py
grep -n '"mla": "ptx"' vllm_xpu_attn/kernels/providers/triton/tuning.py || { echo "tuning.py: the MLA entry was not switched"; exit 1; }
export PYTHONPATH=.:benchmarks PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader
FP8_AB_MLA=only timeout 170 python benchmarks/lab/fp8_ab.py benchmarks/.peers/vxa_f132872 . 1 > $OUT/fp8_ab_mla.jsonl 2> $OUT/fp8_ab_mla.txt
echo "fp8_ab rc $? ${SECONDS} s"; cat $OUT/fp8_ab_mla.jsonl | cut -c1-200; tail -n 8 $OUT/fp8_ab_mla.txt
