#!/usr/bin/env bash
# Main job: install vLLM and SGLang (own venvs under .venvs/), make the tiny built-in model,
# and serve it through each engine with this backend, printing text and the kernel provider.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
bash ci/venvs.sh vllm & p1=$!
bash ci/venvs.sh sglang & p2=$!
wait $p1; wait $p2
model="$VENV_DIR/tiny-llama"
"$VENV_DIR/vllm/bin/python" ci/demo.py --engine vllm --model "$model"
# SGLang on a CPU-only machine needs a stand-in for one vllm._custom_ops import (see the stub's docstring)
PYTHONPATH="$here/tests/sglang/stubs${PYTHONPATH:+:$PYTHONPATH}" "$VENV_DIR/sglang/bin/python" ci/demo.py --engine sglang --model "$model"
