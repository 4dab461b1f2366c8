#!/usr/bin/env bash
# Main job: install vLLM and SGLang (own venvs under .venvs/), make the tiny built-in model,
# serve it through each engine with this backend and with the engine's own, and print them side by side
# (identical: N/N, the kernel provider, time per token). Exit 1 if the two disagree.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
bash ci/venvs.sh vllm & p1=$!
bash ci/venvs.sh sglang & p2=$!
wait $p1; wait $p2
model="$VENV_DIR/tiny-llama"
out="$VENV_DIR/demo"
mkdir -p "$out"
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
"$VENV_DIR/vllm/bin/python" ci/demo.py report "$out"/vllm-ours.json "$out"/vllm-own.json "$out"/sglang-ours.json \
  "$out"/sglang-own.json
