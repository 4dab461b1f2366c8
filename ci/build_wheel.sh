#!/usr/bin/env bash
# Build this package's wheel into DIR and print its path: bash ci/build_wheel.sh DIR
# Built from a copy of the sources, so builds running at once (CI installs venvs in parallel) never share
# setuptools' in-tree build/ folder, and nothing left there from an earlier build reaches the wheel.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest=$1
PY="${VXA_PYTHON:-python3.11}"
command -v "$PY" >/dev/null || PY=python3
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
cp -r "$here/pyproject.toml" "$here/LICENSE" "$here/vllm_xpu_attn" "$here/sglang_compat" "$src/"
mkdir -p "$src/docs" && cp "$here/docs/pypi.md" "$src/docs/"  # the long description
find "$src" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$dest"
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$dest" "$src" >/dev/null
ls "$dest"/vllm_xpu_attn-*.whl
